"""Disaggregated serving: prefill workers and decode workers on separate GPUs (DistServe, Zhong et al. 2024,
arXiv 2401.09670; Splitwise, Patel et al. 2024), the KV cache of each prompt shipped from one to the other.

A **prefill worker** (``tp·pp`` GPUs) runs batches of ``b`` whole prompts (chunks of at most
``max_num_batched_tokens`` tokens flowing through its pipeline): a batch takes ``T_p`` (the static TTFT of
``b`` prompts) and, pipelined, leaves the worker every ``period = chunks·(beat + hop)`` (``T_p`` without
PP), so it serves ``μ_p = b/period`` requests/s. Its KV pool must hold ``b`` prompts.

A **decode worker** keeps ``b`` sequences decoding (micro-batches over its pipeline as in static decode):
TPOT is one decode round at the mean context, and it finishes ``μ_d = b/((G−1)·TPOT)`` requests/s. Its KV
pool must hold ``b`` whole sequences.

**KV transfer**: a prompt's cache (``P`` positions × every layer's K/V, whole model) leaves the prefill
worker through each of its GPUs' own links in parallel (NVLink inside one node, else each GPU's NIC), as
vLLM's NixlConnector / SGLang's Mooncake transfer engine do, in ``bytes/(tp·pp·link bandwidth) + latency``.
The first token reaches the user after the transfer (the decode worker emits it), so TTFT = ``T_p`` + transfer.

**Expert parallelism** (MoE): as in the aggregated cost model, an EP group spans replicas, so a worker of EP degree
``ep`` is ``ep`` attention-data-parallel replicas of ``tp·pp`` GPUs sharing the routed experts (vLLM
``--data-parallel-size ep --enable-expert-parallel``; SGLang ``--enable-dp-attention --ep-size``): ``tp·pp·ep``
GPUs, ``batch`` per replica, and every MoE layer's dispatch/combine priced by ``collectives.ep_all_to_all_time``
(low-latency all-to-all) in ``infer_cost``. A request lives in one replica, so its KV cache leaves through that
replica's ``tp·pp`` links.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.costmodel.core import comm
from shardplan.costmodel.serving import layers as O
from shardplan.costmodel.serving.cost import InferRows, InferWorkload, infer_cost
from shardplan.costmodel.serving.steps import beat
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class WorkerTable:
    """Candidate workers of one kind: layout, batch, GPUs, latency and capacity, one entry per row."""

    tp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray  # EP degree = attention-DP replicas in the worker
    batch: np.ndarray  # sequences per replica
    gpus: np.ndarray
    latency_s: np.ndarray  # prefill: TTFT incl. transfer; decode: TPOT
    capacity_rps: np.ndarray  # requests/s one worker serves
    transfer_s: np.ndarray  # prefill: KV transfer per request (0 for decode)
    fits: np.ndarray

    def __len__(self) -> int:
        return len(self.tp)

    def take(self, idx: np.ndarray) -> WorkerTable:
        return WorkerTable(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))


def kv_transfer_s(model: ModelSpec, system: SystemSpec, work: InferWorkload, gpus: np.ndarray,
                  same_node: bool) -> np.ndarray:
    """Seconds to ship one prompt's KV cache from a prefill worker of ``gpus`` GPUs (each on its own link)."""
    per_token = float(O.kv_layer_bytes_per_token(model, work.kv(), np.ones(1))[0]) * model.num_layers
    nbytes = work.prompt_len * per_token
    level = "intra" if same_node or system.inter_node is None else "inter"
    link = system.intra_node if level == "intra" else system.inter_node
    return nbytes / (np.asarray(gpus, dtype=float) * comm.link_bandwidth(system, level)) + link.latency_s


def prefill_workers(model: ModelSpec, system: SystemSpec, work: InferWorkload, rows: InferRows,
                    same_node: bool) -> WorkerTable:
    """Rows (replicas = ep) as prefill workers, each replica running ``batch`` prompts at a time."""
    w = work.model_copy(update={"gen_len": 1, "mode": "static", "request_rate": None})
    c = infer_cost(model, system, w, rows)
    pp = rows.pp.astype(float)
    hop = np.where(pp > 1, c.prefill.p2p_s, 0.0)
    period = np.where(pp > 1, c.chunks * (beat(c.prefill, c.shapes) + hop), c.ttft_s)
    transfer = kv_transfer_s(model, system, work, rows.tp * rows.pp, same_node)
    return WorkerTable(rows.tp, rows.pp, rows.ep, rows.batch, worker_gpus(rows), c.ttft_s + transfer,
                       rows.dp * rows.batch / period, transfer, c.fits)


def decode_workers(model: ModelSpec, system: SystemSpec, work: InferWorkload, rows: InferRows) -> WorkerTable:
    """Rows (replicas = ep) as decode workers, each replica keeping ``batch`` sequences in flight."""
    w = work.model_copy(update={"mode": "static", "request_rate": None})
    c = infer_cost(model, system, w, rows)
    cap = rows.dp * rows.batch / ((work.gen_len - 1) * c.tpot_s)
    return WorkerTable(rows.tp, rows.pp, rows.ep, rows.batch, worker_gpus(rows), c.tpot_s, cap, np.zeros(len(rows)),
                       c.fits)


def worker_gpus(rows: InferRows) -> np.ndarray:
    """GPUs of one worker: its replicas (one EP group) of ``tp·pp`` GPUs each."""
    return rows.tp * rows.pp * rows.dp

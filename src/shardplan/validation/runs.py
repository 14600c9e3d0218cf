"""``shardplan validate``: predictions against published, measured runs shipped with the package.

Each group turns records of ``shardplan/data/*.json`` (copied from the papers, with their sources)
into cases run through the same library calls as the CLI, and reports the error of each prediction.
Groups: ``korthikanti-t5`` (iteration times, Korthikanti et al. 2022 Table 5), ``korthikanti-t4``
(22B layer forward/backward times, Table 4), ``narayanan`` (Narayanan et al. 2021 Tables 1–2, microbatch
and interleave chosen by the planner), ``modern`` (H100-era Megatron/NeMo/torchtitan/Llama 3 runs,
throughput per GPU); inference and offload groups register themselves below; ``validation.optimum`` runs
the planner free on expert-tuned runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import Recompute, TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.hardware.domains import job_system
from shardplan.models.catalog import megatron_gpt
from shardplan.models.spec import ModelSpec
from shardplan.validation.stacks import (
    stack_attention,
    stack_gradients,
    stack_modules,
    stack_mtp,
    stack_p2p_overlap,
    stack_recompute,
    stack_schedule,
    stack_software,
    stack_stage_layers,
    stack_stated,
    stack_tp_overlap,
)

Prediction = float | tuple[float, str | None]
"""A case's predicted value, with the reason when the cost model finds the published layout infeasible."""


@dataclass(frozen=True)
class Case:
    group: str
    id: str
    quantity: str
    measured: float
    predict: Callable[[], Prediction]


class CaseResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    group: str
    id: str
    quantity: str
    measured: float
    predicted: float | None
    error_pct: float | None
    failure: str | None = None
    infeasible: str | None = Field(None, description="Why the cost model finds the published layout infeasible "
                                   "(it ran): the case is scored and flagged.")


class GroupSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    cases: int
    ran: int
    mape_pct: float | None
    median_abs_pct: float | None
    max_abs_pct: float | None
    mean_signed_pct: float | None = None  # positive: predicted larger than measured
    infeasible: int = Field(0, description="Cases scored although the cost model finds them infeasible.")


class ValidationReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    rows: list[CaseResult]
    summary: dict[str, GroupSummary]


def load_records(name: str) -> list[dict[str, Any]]:
    """Records shipped in ``shardplan/data/<name>.json``."""
    return json.loads(resources.files("shardplan.data").joinpath(f"{name}.json").read_text())


def _gpt(name: str, hidden: int, layers: int, heads: int) -> ModelSpec:
    # The papers' GPT shape as the scoreboard passes it (a GPT-2 style config: V = 51200, tied embeddings).
    return megatron_gpt(name, layers=layers, hidden=hidden, heads=heads, source="Megatron-LM papers")


def _flagged(rep: Any, value: float) -> tuple[float, str | None]:
    """``value`` with the estimate's reason when it does not fit: such a case is scored but reported infeasible."""
    return value, (rep.reason or "infeasible") if getattr(rep, "status", None) == "infeasible" else None


def _step_time(model: ModelSpec, gpus: int, batch: int, layout: TrainLayout) -> float:
    system = get_system("dgx-a100-80gb")
    return estimate_training(model, system, gpus, TrainWorkload(seq_len=2048, global_batch=batch), layout
                             ).metrics.step_time_s


def korthikanti_t5() -> list[Case]:
    interleave = {"22B": 1, "175B": 3, "530B": 3, "1T": 1}  # as in the paper's runs
    by_id = {r["id"]: r for r in load_records("training_runs")}
    out = []
    for size, v in interleave.items():
        r = by_id[f"korthikanti-{size}"]
        m, p, w = r["model"], r["parallel"], r["workload"]
        model = _gpt(f"gpt-{size}", m["hidden_size"], m["layers"], m["attention_heads"])
        gpus, batch = r["hardware"]["num_gpus"], w["global_batch_sequences"]
        common = dict(tp=p["tp"], pp=p["pp"], dp=p["dp"], microbatch=w["micro_batch"], interleave=v)
        full = TrainLayout(**common, recompute=Recompute.FULL)
        sel = TrainLayout(**common, recompute=Recompute.SELECTIVE, sequence_parallel=True)
        measured_full = r["metrics"]["iteration_time_s_full_recompute"]
        out.append(Case("korthikanti-t5", f"{size}-full", "step_time_s", measured_full,
                        lambda model=model, gpus=gpus, batch=batch, lay=full: _step_time(model, gpus, batch, lay)))
        out.append(Case("korthikanti-t5", f"{size}-selective+sp", "step_time_s",
                        r["metrics"]["iteration_time_s_present_work"],
                        lambda model=model, gpus=gpus, batch=batch, lay=sel: _step_time(model, gpus, batch, lay)))
    return out


def korthikanti_t4() -> list[Case]:
    """22B, TP=8, microbatch 4: one layer's forward and backward (incl. recompute) time, five recipes."""
    r = next(x for x in load_records("training_runs") if x["id"] == "korthikanti-22B-layer-times")
    model = _gpt("gpt-22b", 6144, 48, 64)
    recipes = {
        "baseline_no_recompute": dict(), "sequence_parallelism": dict(sequence_parallel=True),
        "baseline_full_recompute": dict(recompute=Recompute.FULL),
        "selective_recompute": dict(recompute=Recompute.SELECTIVE),
        "selective_plus_sequence": dict(recompute=Recompute.SELECTIVE, sequence_parallel=True),
    }
    system = get_system("dgx-a100-80gb")

    def layer_ms(kw: dict[str, Any], phase: str) -> float:
        rep = estimate_training(model, system, 8, TrainWorkload(seq_len=2048, global_batch=4),
                                TrainLayout(tp=8, microbatch=4, **kw))
        rows = [x for x in rep.layers if x.kind in ("attention", "mlp")]
        if phase == "fwd":
            return sum(x.fwd_time_s for x in rows) * 1e3
        return sum(x.bwd_time_s + x.recompute_time_s for x in rows) * 1e3

    out = []
    for name, kw in recipes.items():
        times = r["metrics"]["per_layer_ms"][name]
        for phase in ("fwd", "bwd"):
            out.append(Case("korthikanti-t4", f"{name}.{phase}", "layer_time_ms", times[phase],
                            lambda kw=kw, phase=phase: layer_ms(kw, phase)))
    return out


def narayanan() -> list[Case]:
    """Tables 1–2: layout as published, microbatch and interleave chosen by the planner."""
    from shardplan.planner.training.solve import TrainRequest, plan_training

    system = get_system("dgx-a100-80gb")
    out = []
    for r in load_records("training_runs"):
        rid = r["id"]
        if not rid.startswith(("megatron21-t1-", "megatron21-t2-")):
            continue
        m, p, w, hw = r["model"], r["parallel"], r["workload"], r["hardware"]
        gpus, batch = hw["num_gpus"], w["global_batch_sequences"]
        pins: dict[str, Any] = {}
        if rid.startswith("megatron21-t1-"):
            h, layers, heads = m["hidden_size"], m["layers"], m["attention_heads"]
            tp, pp, zero = p["tp"], p["pp"], 0
        else:  # Table 2: 174.6B is the GPT-3 shape, 529.6B the 530B shape of Table 1
            h, layers, heads = (12288, 96, 96) if "174.6B" in rid else (20480, 105, 128)
            tp, pp, zero = (1, 1, 3) if p["scheme"] == "ZeRO-3" else (8, p["model_parallel_size"] // 8, 0)
            pins["microbatch"] = p["microbatch"]
        model = _gpt(rid, h, layers, heads)
        # Measured time per iteration from the published TFLOP/s and the paper's Eq. 3 FLOP count.
        s, V = 2048, 51200
        flops = 96 * batch * s * layers * h * h * (1 + s / (6 * h) + V / (16 * layers * h))
        measured = flops / (r["metrics"]["achieved_tflops_per_gpu"] * 1e12 * gpus)
        req = TrainRequest(model=model, system=system, num_gpus=gpus,
                           workload=TrainWorkload(seq_len=s, global_batch=batch), tp=tp, pp=pp,
                           dp=gpus // (tp * pp), recompute=Recompute.FULL, sequence_parallel=False, zero_stage=zero,
                           **pins)

        def predict(req: TrainRequest = req) -> float:
            plan = plan_training(req, explain=False)
            if plan.metrics is None:
                raise ValueError(plan.reason or "infeasible")
            return plan.metrics.step_time_s

        out.append(Case("narayanan", rid.removeprefix("megatron21-"), "step_time_s", measured, predict))
    return out


_MODERN_SYSTEMS = {"H100-SXM-80GB": "dgx-h100", "H100-96GB-HBM2e": "dgx-h100", "H100-SXM-HBM2e": "dgx-h100",
                   "H800": "dgx-h800", "B200": "dgx-b200", "B300": "dgx-b300", "H200": "hgx-h200",
                   "A100-SXM-80GB": "dgx-a100-80gb", "GB200": "gb200-nvl72", "GB300": "gb300-nvl72",
                   "MI300X": "mi300x-8", "MI325X": "mi325x-8", "MI355X": "mi355x-8", "MI350X": "mi350x-8"}
_ALIASES = {"llama-3-8b": "llama-3.1-8b", "llama-3-70b": "llama-3.1-70b"}


def _modern_model(record: dict[str, Any]) -> ModelSpec | None:
    """The record's model: a catalog name, or an explicit shape (GeLU MLP as the sources describe)."""
    from shardplan.errors import ShardplanError
    from shardplan.models import get_model
    from shardplan.models.spec import MlpKind

    shape = record["model"]["hf_or_shape"]
    if isinstance(shape, dict):
        return ModelSpec(name=record["id"], num_layers=shape["layers"], hidden_size=shape["hidden"],
                         num_heads=shape["heads"], num_kv_heads=shape["kv_heads"], ffn_hidden_size=shape["ffn"],
                         vocab_size=shape.get("vocab") or 51200, mlp=MlpKind.GELU)
    name = shape.split(" ")[0]
    try:
        return with_record_vocab(get_model(_ALIASES.get(name, name)), record)
    except ShardplanError:
        return None  # a model the catalog does not have (Kimi K2, GPT-OSS, Nemotron-H): not a case


def with_record_vocab(model: ModelSpec, record: dict[str, Any]) -> ModelSpec:
    """A catalog model with the vocabulary the record's run trained with, where its ``model.vocab_size`` states one
    (MLPerf's Llama 3.1 405B uses the Mixtral 8x22B tokenizer, V = 32768, instead of Llama 3's 128256)."""
    vocab = record["model"].get("vocab_size")
    return model.model_copy(update={"vocab_size": int(vocab)}) if vocab else model


def record_dtype(r: dict[str, Any]) -> str:
    """The compute datatype of a record's GEMMs: fp8 or fp4 (NVFP4) as its ``precision`` states, else bf16."""
    return r["precision"] if r["precision"] in ("fp8", "fp4") else "bf16"


def modern_setup(r: dict[str, Any]) -> tuple[ModelSpec, Any, int, TrainWorkload, TrainLayout, str, float] | None:
    """A modern record as (model, system with today's software, gpus, workload, layout as published, measured
    quantity, value); None for a model or GPU the catalog lacks. FSDP is ZeRO-3."""
    model, system_name = _modern_model(r), _MODERN_SYSTEMS.get(r["hardware"]["gpu"])
    if model is None or system_name is None:
        return None
    p, w, met = r["parallel"], r["workload"], r["metrics"]
    tp, pp, cp, ep = p["tp"] or 1, p["pp"] or 1, p["cp"] or 1, p.get("ep") or 1
    n = r["hardware"]["num_gpus"]
    rc_text = str(p.get("recompute") or "").lower()
    recompute = (Recompute.FULL if "full" in rc_text or "activation_checkpointing: true" in rc_text
                 else stack_recompute(r, rc_text))
    zero, local_batch = stack_schedule(r)  # Llama 3 keeps weights after the forward: ZeRO-1/2 (paper §3.3.1)
    batch = w["global_batch_sequences"]
    mb = p.get("microbatch") or 1
    dp = n // (tp * pp * cp)
    mb = mb if batch % (dp * mb) == 0 else 1
    layers = re.search(r"recompute_num_layers=(\d+)", rc_text)
    # Expert TP as recorded, else Megatron's default (tp) where it fits, else the largest etp ≤ tp with
    # etp·ep | tp·cp·dp (MoE parallel folding: EP larger than dp·cp forces expert TP down, e.g. to 1).
    fits = [e for e in range(tp, 0, -1) if tp % e == 0 and (tp * cp * dp) % (e * ep) == 0]
    etp = p.get("etp") or (fits[0] if fits else None)
    layout = TrainLayout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, microbatch=mb, interleave=p.get("vp") or 1,
                         recompute=recompute, recompute_layers=int(layers.group(1)) if layers else None,
                         sequence_parallel=tp > 1, zero_stage=zero,
                         recompute_modules=stack_modules(r) if recompute == Recompute.SELECTIVE else None)
    base = get_system(system_name)
    # software of today regardless of the preset's default (the A100 preset describes Selene 2021)
    sw = base.software.model_copy(update={"overlap_grad_reduce": True, "tp_comm_overlap": 0.5,
                                          "zero3_rail_parallel": True, "tp_overlap_method": stack_tp_overlap(r),
                                          "overlap_p2p_comm": stack_p2p_overlap(r), **stack_software(r)})
    sw._stated = stack_stated(r)
    system = job_system(base.model_copy(update={"software": sw}), n)
    work = TrainWorkload(seq_len=w["seq_len"], global_batch=batch, local_batch=local_batch, **stack_gradients(r),
                         dtype=record_dtype(r), attention=stack_attention(r), mtp_layers=stack_mtp(r))
    if met.get("tokens_per_s_per_gpu"):
        quantity, measured = "tokens_per_s_per_gpu", float(met["tokens_per_s_per_gpu"])
    else:
        quantity, measured = "model_tflops_per_gpu", float(met["model_tflops_per_gpu"])
    return model, system, n, work, layout, quantity, measured


def pinned_estimate(model: ModelSpec, system: Any, n: int, work: TrainWorkload, layout: TrainLayout,
                    stage_layers: list[int] | None) -> Any:
    """A published layout's estimate, with the recipe's own layers per pipeline rank where it sets them."""
    if stage_layers is None:
        return estimate_training(model, system, n, work, layout)
    from shardplan.costmodel.training.stage_report import estimate_split

    return estimate_split(model, system, n, work, layout, stage_layers)


def modern() -> list[Case]:
    """Megatron-LM/NeMo/torchtitan/Llama 3 runs on H100 (and a few B200/H200/A100) with today's software
    (flash attention, overlapped communication); layout as published, FSDP as ZeRO-3."""
    out = []
    for r in load_records("modern_training_runs"):
        setup = modern_setup(r)
        if setup is None:
            continue
        model, system, n, work, layout, quantity, measured = setup
        split = stack_stage_layers(r)

        def predict(model: ModelSpec = model, system: Any = system, n: int = n, work: TrainWorkload = work,
                    layout: TrainLayout = layout, quantity: str = quantity,
                    split: list[int] | None = split) -> Prediction:
            rep = pinned_estimate(model, system, n, work, layout, split)
            if quantity == "tokens_per_s_per_gpu":
                return _flagged(rep, rep.metrics.tokens_per_s / n)
            return _flagged(rep, rep.metrics.mfu * system.gpu.peak(work.dtype) / 1e12)

        out.append(Case("modern", r["id"], quantity, measured, predict))
    return out


def vllm_kv() -> list[Case]:
    """vLLM paper Table 1: KV-cache token slots of OPT-13B/66B/175B on A100s (TP as published)."""
    from shardplan.costmodel.serving.cost import InferLayout, InferWorkload
    from shardplan.costmodel.serving.report import estimate_inference
    from shardplan.models import get_model

    setups = {"OPT-13B": ("dgx-a100-40gb", 1), "OPT-66B": ("dgx-a100-40gb", 4), "OPT-175B": ("dgx-a100-80gb", 8)}
    out = []
    for r in load_records("inference_runs"):
        name = r["model"]["name"]
        hw, tp = setups[name]

        def predict(name: str = name, hw: str = hw, tp: int = tp) -> float:
            rep = estimate_inference(get_model(name.lower()), get_system(hw), tp,
                                     InferWorkload(prompt_len=512, gen_len=128),
                                     InferLayout(tp=tp, pp=1, ep=1, replicas=1, batch=1))
            return float(rep.memory.kv_cache_tokens)

        out.append(Case("vllm-kv", name, "kv_cache_tokens", float(r["metrics"]["max_kv_cache_token_slots"]), predict))
    return out


def flexgen_policy(record: dict[str, Any], model: ModelSpec) -> Any:
    """FlexGen's ``--percent wg wc cg cc hg hc`` (the rest on disk) and switches as an ``OffloadPolicy``: the weight
    bytes where FlexGen's whole-tensor rule puts them (``offload.flexgen_layout``), KV cache and activations at the
    percentages (FlexGen splits those tensors)."""
    from shardplan.costmodel.offload.flexgen_layout import flexgen_weight_split
    from shardplan.costmodel.offload.policy import OffloadPolicy, Placement

    p = record["parallel"]["offload_policy_percent"]

    def split(g: float, c: float) -> Placement:
        return Placement.of(g / 100, c / 100, (100 - g - c) / 100)

    return OffloadPolicy(
        gpu_batch_size=p["gpu_batch"], num_gpu_batches=p["num_gpu_batches"],
        weights=Placement.of(*flexgen_weight_split(model, p["wg"], p["wc"])),
        kv_cache=split(p["cg"], p["cc"]), activations=split(p["hg"], p["hc"]),
        cpu_attention=bool(p.get("cpu_attention")), compress_weights=bool(p.get("compress_weight")),
        compress_kv_cache=bool(p.get("compress_cache")), pin_weights=p.get("pin_weight", True))


def flexgen() -> list[Case]:
    """FlexGen (Sheng et al. 2023) on its T4 machine: published policies' generation throughput."""
    from shardplan.costmodel.offload.evaluate import estimate_offload
    from shardplan.costmodel.offload.policy import OffloadWorkload, default_capacities
    from shardplan.models import get_model

    out = []
    for r in load_records("offload_runs"):
        if not r["parallel"].get("offload_policy_percent"):
            continue

        def predict(r: dict[str, Any] = r) -> Prediction:
            system = get_system("gcp-t4")
            work = OffloadWorkload(prompt_len=r["workload"]["prompt_len"], gen_len=r["workload"]["gen_len"])
            model = get_model(r["model"]["name"].lower())
            rep = estimate_offload(model, system, work, flexgen_policy(r, model), default_capacities(system))
            return _flagged(rep, rep.metrics.tokens_per_s)

        tag = r["id"].removeprefix("flexgen-")
        out.append(Case("flexgen", tag, "tokens_per_s", float(r["metrics"]["generation_throughput_tok_s"]), predict))
    return out

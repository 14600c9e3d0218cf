"""Where context parallelism runs: the rules that tie a CP degree to the model's heads and to the CP exchange.

Transformer Engine's all-to-all CP splits heads; Megatron's CP on Mamba-2 and Gated DeltaNet layers splits theirs;
sliding windows and attention sinks limit the exchange (``frameworks.cp_blocker``). ``space`` applies them to the
candidate layouts, the planner to pinned values, the cost model to a given layout.
"""

from __future__ import annotations

from shardplan.costmodel.core.layouts import divisors, fmt_values
from shardplan.costmodel.training.frameworks import cp_blocker
from shardplan.costmodel.training.layout import TrainLayout
from shardplan.errors import ShardplanError
from shardplan.models.kinds import Mixer
from shardplan.models.spec import ModelSpec


def a2a_heads_ok(model: ModelSpec, tp: int, cp: int) -> bool:
    """All-to-all CP splits each TP rank's query and K/V heads over the cp ranks (Transformer Engine d0067d0
    context_parallel.py l.4246-4249 asserts both divide): under MLA K and V carry every query head; K/V heads fewer
    than tp are replicated, one per rank."""
    q = model.num_heads // tp
    kv = q if model.mla else max(model.kv_heads // tp, 1)
    return q % cp == 0 and kv % cp == 0


def recurrent_cp_ok(model: ModelSpec, tp: int, cp: int) -> bool:
    """Megatron's CP on Mamba-2 and Gated DeltaNet layers trades sequence for heads by all-to-all: cp divides each
    TP rank's SSM heads, and its B/C groups or is a multiple of them (Megatron-LM d98e8a6
    ssm/mamba_context_parallel.py l.106-131); cp divides each TP rank's key and value heads (gated_delta_net/gdn.py
    l.56-64, the in_proj split sections ``// cp_size``)."""
    if cp == 1:
        return True
    mixers, s, la = model.mixer_counts(), model.mamba, model.linear_attention
    if s is not None and mixers.get(Mixer.MAMBA, 0):
        heads, groups = s.num_heads // tp, max(s.n_groups // tp, 1)
        if heads % cp or (groups % cp if groups >= cp else cp % groups):
            return False
    return la is None or not mixers.get(Mixer.LINEAR, 0) or not ((la.num_key_heads // tp) % cp
                                                                  or (la.num_value_heads // tp) % cp)


def chunked_cp_ok(model: ModelSpec, seq_len: int, cp: int) -> bool:
    """Chunked-attention layers (Llama 4) under CP: each of a rank's two sequence chunks holds whole attention chunks
    when the sequence is longer than one (Megatron-Bridge@067f987 models/llama/llama4_utils.py l.304-307)."""
    chunk = model.attention_chunk_size
    if cp == 1 or chunk is None or not model.mixer_counts().get(Mixer.CHUNKED, 0) or seq_len <= chunk:
        return True
    return seq_len % (2 * cp) == 0 and (seq_len // (2 * cp)) % chunk == 0


def check_cp_runs(model: ModelSpec, cp: int, cp_comm_type: str, *, pytorch: bool = False) -> None:
    """A CP degree above 1 only where the CP exchange can run the model's attention (``frameworks.cp_blocker``;
    ``pytorch``: PyTorch's context_parallel runs the plan)."""
    blocker = cp_blocker(model, cp_comm_type, pytorch=pytorch) if cp > 1 else None
    if blocker is not None:
        runs = [k for k in ("a2a", "all_gather", "p2p") if not pytorch and cp_blocker(model, k) is None]
        use = f"use --cp-comm-type {' or '.join(runs)} or cp 1" if runs else "use cp 1"
        raise ShardplanError(f"{blocker}: {use}", field="cp-comm-type")


def check_cp_comm(model: ModelSpec, lay: TrainLayout, cp_comm_type: str, seq_len: int | None = None) -> None:
    """A pinned CP degree the system's CP communication can run (``SoftwareSpec.cp_comm_type``) on the model's
    attention (``frameworks.cp_blocker``) and, given the sequence, its chunked layers (``chunked_cp_ok``)."""
    check_cp_runs(model, lay.cp, cp_comm_type)
    if seq_len is not None and not chunked_cp_ok(model, seq_len, lay.cp):
        ok = [c for c in divisors(lay.num_gpus) if chunked_cp_ok(model, seq_len, c)]
        chunk = model.attention_chunk_size
        raise ShardplanError(f"cp ({lay.cp}) must leave each rank whole attention chunks of {chunk} tokens "
                             "(seq_len / (2·cp) a multiple of them, Megatron-Bridge's Llama 4 attention): "
                             f"allowed {fmt_values(ok)}", field="cp")
    if not recurrent_cp_ok(model, lay.tp, lay.cp):
        ok = [c for c in divisors(lay.num_gpus) if recurrent_cp_ok(model, lay.tp, c)]
        raise ShardplanError(f"cp ({lay.cp}) must divide the Mamba / Gated DeltaNet heads of a TP rank (tp {lay.tp}; "
                             f"Megatron's CP splits their heads): allowed {fmt_values(ok)}", field="cp")
    if cp_comm_type == "a2a" and lay.cp > 1 and not a2a_heads_ok(model, lay.tp, lay.cp):
        ok = [c for c in divisors(model.num_heads // lay.tp) if a2a_heads_ok(model, lay.tp, c)]
        others = [k for k in ("p2p", "all_gather") if cp_blocker(model, k) is None]
        instead = f", or use {' or '.join(others)}" if others else ""
        raise ShardplanError(f"cp ({lay.cp}) must divide the query and K/V heads of a TP rank under cp_comm_type a2a "
                             f"(tp {lay.tp}): allowed {fmt_values(ok)}{instead}", field="cp")

"""Megatron-LM flags that make the exported run train the planned architecture: RoPE base and scaling, the MoE
router, MTP layers, sliding-window and linear-attention patterns, attention sinks and the output gate.

Every flag is in ``tests/data/export/megatron_flags.json`` (Megatron-LM ``megatron/training/arguments.py`` at
commit d98e8a64ddf34856e74b24714e3bedb2f5a39553). Semantics from Megatron-Core's ``TransformerConfig``:
``--window-size L,R`` is FlashAttention's (left, right) window, a query seeing L earlier keys and itself, so a
Hugging Face window of w tokens is ``w-1,0``; ``--window-attn-skip-freq N`` and ``--linear-attention-freq N`` make
every N-th layer (1-based, ``layer_number % N == 0``) a full softmax-attention layer; Megatron's llama3 RoPE scaling
(``--use-rope-scaling``) fixes low_freq_factor 1, high_freq_factor 4 and original context 8192. What has no flag is
returned as a note (printed on stderr and in the file's header), never dropped.
"""

from __future__ import annotations

from shardplan.models.kinds import Mixer, RopeScaling, RouterScore
from shardplan.models.pattern import kind_at
from shardplan.models.spec import ModelSpec

Args = list[tuple[str, str | None]]

# megatron/core/models/common/embeddings/rope_utils.py apply_rope_scaling defaults (Llama 3.1's values)
MEGATRON_LLAMA3_SCALING = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _every_nth_full(model: ModelSpec, other: Mixer) -> int | None:
    """N when the layers are (N-1) ``other`` layers then one full-attention layer, repeated (Megatron's integer
    frequency: layer i, 1-based, is full iff i % N == 0); None when the pattern is not of that form."""
    mixers = [kind_at(model.layer_pattern, i, model.default_mixer)[0] for i in range(model.num_layers)]
    for n in range(1, model.num_layers + 1):
        if all((m == Mixer.FULL) == ((i + 1) % n == 0) and m in (Mixer.FULL, other) for i, m in enumerate(mixers)):
            return n
    return None


def rope_args(m: ModelSpec, args: Args, notes: list[str]) -> None:
    """RoPE base, rotated share and context-extension scaling."""
    r = m.rope
    if r is None or str(m.position) != "rope":
        return
    args.append(("--rotary-base", _fmt(r.theta)))
    if r.partial_rotary_factor < 1:
        args.append(("--rotary-percent", _fmt(r.partial_rotary_factor)))
    if r.scaling == RopeScaling.LLAMA3:
        args += [("--use-rope-scaling", None), ("--rope-scaling-factor", _fmt(r.factor))]
        given = {"low_freq_factor": r.low_freq_factor, "high_freq_factor": r.high_freq_factor,
                 "original_max_position_embeddings": r.original_max_position_embeddings}
        off = [f"{k} {v:g} (Megatron: {MEGATRON_LLAMA3_SCALING[k]:g})" for k, v in given.items()
               if v is not None and float(v) != MEGATRON_LLAMA3_SCALING[k]]
        if off:
            notes.append("Megatron's llama3 RoPE scaling fixes " + ", ".join(off))
    elif r.scaling == RopeScaling.YARN:
        # MLA models take --rope-type yarn; others the yarn position embedding
        kind = ("--rope-type", "yarn") if m.mla is not None else ("--position-embedding-type", "yarn")
        for i, (flag, _) in enumerate(args):
            if flag == kind[0]:
                del args[i]
                break
        args += [kind, ("--rotary-scaling-factor", _fmt(r.factor))]
        if r.original_max_position_embeddings:
            args.append(("--yarn-original-max-position-embeddings", str(r.original_max_position_embeddings)))
        for flag, v in (("--yarn-beta-fast", r.beta_fast), ("--yarn-beta-slow", r.beta_slow), ("--mscale", r.mscale),
                        ("--mscale-all-dim", r.mscale_all_dim)):
            if v is not None:
                args.append((flag, _fmt(v)))
    elif r.scaling != RopeScaling.NONE:
        notes.append(f"Megatron-LM has no {r.scaling} RoPE scaling flag (factor {r.factor:g}): unscaled RoPE is "
                     "written")
    if r.local_theta is not None and r.local_theta != r.theta:
        notes.append(f"the sliding-window layers' RoPE base {r.local_theta:g} has no Megatron flag: every layer "
                     f"uses --rotary-base {_fmt(r.theta)}")


def router_args(m: ModelSpec, args: Args, notes: list[str]) -> None:
    """Router score function, expert bias, top-k scaling and group-limited routing."""
    moe = m.moe
    if moe is None:
        return
    if moe.score_function == RouterScore.SIGMOID:
        args.append(("--moe-router-score-function", "sigmoid"))
    elif not moe.norm_topk_prob:
        # softmax over all experts, top-k weights not renormalised (Megatron's default takes softmax over the k)
        args.append(("--moe-router-pre-softmax", None))
    if moe.expert_bias:
        args.append(("--moe-router-enable-expert-bias", None))
    if moe.topk_scaling_factor != 1.0:
        args.append(("--moe-router-topk-scaling-factor", _fmt(moe.topk_scaling_factor)))
    if moe.num_groups:
        args += [("--moe-router-num-groups", str(moe.num_groups)), ("--moe-router-group-topk", str(moe.topk_groups))]
    if moe.shared_expert_gate:
        args.append(("--moe-shared-expert-gate", None))
    if moe.router_bias:
        notes.append("the router's bias (gpt-oss) has no Megatron flag of its own")


def mixer_args(m: ModelSpec, args: Args, notes: list[str]) -> None:
    """Sliding-window and Gated DeltaNet layer patterns, sinks, output gate, MTP; notes for what has no flag."""
    counts = m.mixer_counts()
    if counts.get(Mixer.SLIDING):
        assert m.sliding_window is not None
        n = _every_nth_full(m, Mixer.SLIDING)
        if counts.get(Mixer.FULL, 0) == 0 or n is not None:
            args.append(("--window-size", f"{m.sliding_window - 1},0"))
            if counts.get(Mixer.FULL):
                args.append(("--window-attn-skip-freq", str(n)))
        else:
            notes.append("the sliding/full layer pattern is not every-N-th-full: Megatron cannot express it, "
                         "sliding-window attention is not exported")
    if counts.get(Mixer.LINEAR):
        la = m.linear_attention
        assert la is not None
        n = _every_nth_full(m, Mixer.LINEAR)
        if n is None:
            notes.append("the linear/full layer pattern is not every-N-th-full: Megatron cannot express it")
        else:
            args += [("--experimental-attention-variant", "gated_delta_net"), ("--linear-attention-freq", str(n)),
                     ("--linear-num-key-heads", str(la.num_key_heads)),
                     ("--linear-num-value-heads", str(la.num_value_heads)),
                     ("--linear-key-head-dim", str(la.key_head_dim)),
                     ("--linear-value-head-dim", str(la.value_head_dim)),
                     ("--linear-conv-kernel-dim", str(la.conv_kernel))]
    for mixer, why in ((Mixer.CHUNKED, "chunked local attention (Llama 4)"), (Mixer.MAMBA, "Mamba-2 layers (a "
                       "hybrid model: Megatron trains it with pretrain_mamba.py and --hybrid-override-pattern)"),
                       (Mixer.NONE, "MLP-only layers")):
        if counts.get(mixer):
            notes.append(f"Megatron-LM's GPT model has no flag for {why}: the exported model differs there")
    if m.attention_sinks:
        args.append(("--softmax-type", "learnable"))  # a learned sink logit per head (gpt-oss)
    if m.attn_output_gate:
        args.append(("--attention-output-gate", None))
    if m.qk_norm and not m.qk_norm_per_head:
        notes.append("--qk-layernorm normalises each head; this model's qk-norm spans the whole projection")
    if m.sparse_attention is not None:
        notes.append("DeepSeek sparse attention (the indexer) is not exported: dense MLA is written")

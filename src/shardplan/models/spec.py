"""What a network is: ``ModelSpec`` and its layer pattern. Shapes only; no hardware, no costs.

Parameter counting lives in ``params`` (which reads a ModelSpec); the sub-specs in ``parts``.
Conventions of the counts (``total_params``, ``active_params``): tied embeddings once; MTP layers
(``mtp_params``) and a multimodal wrapper's vision tower (``vision_params``) apart, as model cards do.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shardplan.models import params as P
from shardplan.models.kinds import Mixer, MlpKind, MlpSlot, NormKind, PositionKind, RopeScaling, RouterScore
from shardplan.models.parts import (
    MAX_CONTEXT,
    MAX_LAYERS,
    LinearAttnSpec,
    MambaSpec,
    MLASpec,
    MoESpec,
    NonNegInt,
    PosInt,
    RopeSpec,
    SparseAttnSpec,
)
from shardplan.models.pattern import LayerKind, kind_at, kind_counts, parse_code, period

__all__ = [
    "LinearAttnSpec",
    "MLASpec",
    "MambaSpec",
    "Mixer",
    "MlpKind",
    "MlpSlot",
    "MoESpec",
    "ModelSpec",
    "NormKind",
    "PositionKind",
    "RopeScaling",
    "RopeSpec",
    "RouterScore",
    "SparseAttnSpec",
]


Context = Annotated[int, Field(ge=1, le=MAX_CONTEXT)]


class ModelSpec(BaseModel):
    """A decoder-only network, as much of it as cost and memory depend on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Catalog name or the file it came from.")
    family: str = Field("custom", description="Model family (llama, gpt, opt, …).")
    num_layers: Annotated[int, Field(ge=1, le=MAX_LAYERS)] = Field(
        description="Decoder layers (blocks), MTP layers not included.")
    hidden_size: PosInt = Field(description="Model width h.")
    num_heads: PosInt = Field(description="Attention (query) heads a.")
    num_kv_heads: PosInt | None = Field(None, description="Key/value heads (MHA: = heads, MQA: 1, GQA: between).")
    head_dim: PosInt | None = Field(None, description="Per-head dimension (default hidden_size / num_heads).")
    ffn_hidden_size: PosInt = Field(description="Intermediate size of the dense MLP.")
    mlp: MlpKind = Field(MlpKind.GELU, description="MLP kind: plain gelu/relu/relu2 or gated swiglu/geglu.")
    vocab_size: PosInt = Field(description="Vocabulary size V.")
    tied_embeddings: bool = Field(False, description="LM head shares the input embedding matrix.")
    position: PositionKind = Field(PositionKind.ROPE, description="Positional scheme.")
    max_position_embeddings: Context = Field(2048, description="Context length the model was trained for.")
    norm: NormKind = Field(NormKind.RMSNORM, description="Norm kind.")
    norms_per_layer: NonNegInt = Field(2, description="Norm layers per block (Gemma-2: 4; Falcon-7B: 1).")
    qkv_bias: bool = Field(False, description="Bias on the Q/K/V projections.")
    out_bias: bool = Field(False, description="Bias on the attention output projection.")
    qk_norm: bool = Field(False, description="A norm over each query and key (Qwen3, Gemma 3, OLMo 2).")
    qk_norm_per_head: bool = Field(
        True, description="qk-norm weights of head_dim shared by the heads (Qwen3: 2·head_dim per layer); False: "
        "over the whole projection (OLMo 2: (heads + kv_heads)·head_dim)."
    )
    mlp_bias: bool = Field(False, description="Biases on the MLP projections.")
    embedding_norm: bool = Field(False, description="A norm right after the word embedding (BLOOM).")
    parallel_block: bool = Field(False, description="Attention and MLP read the same input (GPT-J/NeoX/Falcon).")
    sliding_window: Context | None = Field(None, description="Span of the sliding-window ('S') layers.")
    attention_chunk_size: Context | None = Field(None, description="Chunk of the chunked-attention ('C') layers.")
    layer_pattern: tuple[str, ...] | None = Field(
        None, description="Per-layer kinds, repeated over the layers: run-length codes of a mixer letter "
        "(F full, S sliding, C chunked, L linear, M mamba, N none), an optional MLP letter (d dense, e MoE, "
        "n none) and *count, e.g. ('S*5', 'F'). None: every layer 'S' if sliding_window else 'F'."
    )
    attention_sinks: bool = Field(False, description="A learned sink logit per head (gpt-oss): heads per layer.")
    activation_clamp: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        None, description="Gated MLP inputs clamped before the activation: gate ≤ c, up within ±c (gpt-oss "
        "swiglu_limit 7). None: no clamp.")
    attn_output_gate: bool = Field(
        False, description="A sigmoid output gate from the query projection (Qwen3-Next): q projection doubled."
    )
    moe: MoESpec | None = Field(None, description="Mixture-of-experts feed-forward, if any.")
    mla: MLASpec | None = Field(None, description="Multi-head latent attention, if any.")
    sparse_attention: SparseAttnSpec | None = Field(None, description="DeepSeek sparse attention indexer, if any.")
    linear_attention: LinearAttnSpec | None = Field(None, description="Shape of the 'L' (Gated DeltaNet) layers.")
    mamba: MambaSpec | None = Field(None, description="Shape of the 'M' (Mamba-2) layers.")
    rope: RopeSpec | None = Field(None, description="RoPE base and scaling (None: not recorded).")
    mtp_layers: NonNegInt = Field(0, description="Multi-token-prediction layers (counted apart, in mtp_params).")
    vision_params: Annotated[int, Field(ge=0, le=2**50)] = Field(
        0, description="Vision tower + projector of a multimodal wrapper (apart).")
    dtype: str = Field("bf16", description="Datatype of the released weights.")
    source: str = Field("", description="Where the shape comes from (paper, model card, config.json).")

    @field_validator("layer_pattern")
    @classmethod
    def _codes(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None:
            if not v:
                raise ValueError("layer_pattern must hold at least one code")
            for code in v:
                parse_code(code)
        return v

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.head_dim is None and self.mla is None and self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads}) "
                "unless head_dim is given"
            )
        kv = self.num_kv_heads or self.num_heads
        if kv > self.num_heads or self.num_heads % kv:
            raise ValueError(f"num_kv_heads ({kv}) must divide num_heads ({self.num_heads})")
        if self.moe and self.moe.first_dense_layers > self.num_layers:
            raise ValueError(
                f"moe.first_dense_layers ({self.moe.first_dense_layers}) exceeds num_layers ({self.num_layers})"
            )
        if self.layer_pattern is not None:
            per = period(self.layer_pattern)
            if len(per) > self.num_layers:
                raise ValueError(f"layer_pattern has {len(per)} layers, more than num_layers ({self.num_layers})")
            needs = {Mixer.SLIDING: ("sliding_window", self.sliding_window),
                     Mixer.CHUNKED: ("attention_chunk_size", self.attention_chunk_size),
                     Mixer.LINEAR: ("linear_attention", self.linear_attention), Mixer.MAMBA: ("mamba", self.mamba)}
            for mixer, slot in per:
                if mixer in needs and needs[mixer][1] is None:
                    raise ValueError(f"layer_pattern uses '{mixer.value}' layers but {needs[mixer][0]} is not set")
                if slot == MlpSlot.MOE and self.moe is None:
                    raise ValueError("layer_pattern has MoE ('e') layers but moe is not set")
        return self

    # --- derived shape facts -------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_size(self) -> int:
        """Per-head q/k size (MLA: nope + rope part, e.g. 128 + 64 = 192 for DeepSeek-V3)."""
        if self.mla is not None:
            return self.mla.qk_head_dim
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def attention_kind(self) -> str:
        if self.mla is not None:
            return "MLA+DSA" if self.sparse_attention else "MLA"
        if self.kv_heads == self.num_heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    @property
    def default_mixer(self) -> Mixer:
        return Mixer.SLIDING if self.sliding_window else Mixer.FULL

    def layer_kinds(self) -> Counter[LayerKind]:
        """Layers per (mixer, MLP) kind, e.g. {(SLIDING, MOE): 18, (FULL, MOE): 18} for gpt-oss-120b."""
        moe = self.moe
        return kind_counts(self.layer_pattern, self.num_layers, self.default_mixer, has_moe=moe is not None,
                           first_dense=moe.first_dense_layers if moe else 0, freq=moe.layer_freq if moe else 1)

    def mixer_counts(self) -> dict[Mixer, int]:
        """Layers per token mixer."""
        out: Counter[Mixer] = Counter()
        for (mixer, _), n in self.layer_kinds().items():
            out[mixer] += n
        return dict(out)

    def mlp_counts(self) -> dict[MlpSlot, int]:
        """Layers per feed-forward kind (dense, MoE, none)."""
        out: Counter[MlpSlot] = Counter()
        for (_, slot), n in self.layer_kinds().items():
            out[slot] += n
        return dict(out)

    @property
    def num_attention_layers(self) -> int:
        """Layers with softmax attention (full, sliding or chunked): the ones that keep a KV cache."""
        return sum(n for m, n in self.mixer_counts().items() if m.is_attention)

    @property
    def kv_layers_full(self) -> int:
        """Attention layers whose KV cache grows with the whole context."""
        return self.mixer_counts().get(Mixer.FULL, 0)

    @property
    def num_recurrent_layers(self) -> int:
        """Linear-attention and Mamba layers: a fixed-size state per sequence, no KV cache."""
        return sum(n for m, n in self.mixer_counts().items() if m.is_recurrent)

    @property
    def is_hybrid(self) -> bool:
        """Any layer other than full attention (the cost model's uniform-layer approximation is inexact)."""
        return set(self.mixer_counts()) != {Mixer.FULL}

    def mixer_at(self, layer: int) -> Mixer:
        return kind_at(self.layer_pattern, layer, self.default_mixer)[0]

    def kv_window_for_layer(self, layer: int) -> int | None:
        """Tokens a layer's KV cache holds at most: the window (sliding), the chunk (chunked), None (full),
        0 (no KV cache: linear, Mamba or no mixer)."""
        mixer = self.mixer_at(layer)
        if mixer == Mixer.FULL:
            return None
        if mixer == Mixer.SLIDING:
            return self.sliding_window
        if mixer == Mixer.CHUNKED:
            return self.attention_chunk_size
        return 0

    def kv_cached_tokens(self, seq_len: int) -> int:
        """KV-cache token slots summed over layers for one sequence of ``seq_len`` tokens (vLLM's hybrid
        allocator: a sliding layer keeps min(seq, window), a chunked one min(seq, chunk))."""
        c = self.mixer_counts()
        return (c.get(Mixer.FULL, 0) * seq_len
                + c.get(Mixer.SLIDING, 0) * min(seq_len, self.sliding_window or seq_len)
                + c.get(Mixer.CHUNKED, 0) * min(seq_len, self.attention_chunk_size or seq_len))

    def recurrent_state_elements_per_seq(self) -> int:
        """State elements one sequence keeps in all linear-attention and Mamba layers (independent of length)."""
        c = self.mixer_counts()
        lin = c.get(Mixer.LINEAR, 0) * (self.linear_attention.state_elements if self.linear_attention else 0)
        ssm = c.get(Mixer.MAMBA, 0) * (self.mamba.state_elements if self.mamba else 0)
        return lin + ssm

    def recurrent_state_bytes_per_seq(self, dtype_bytes: float) -> float:
        return self.recurrent_state_elements_per_seq() * dtype_bytes

    @property
    def num_moe_layers(self) -> int:
        return self.mlp_counts().get(MlpSlot.MOE, 0)

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense MLP (MLP-less layers, e.g. Nemotron-H's Mamba layers, are neither)."""
        return self.mlp_counts().get(MlpSlot.DENSE, 0)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def total_params(self) -> int:
        """Every weight of the text model, tied embeddings once; MTP layers and vision tower not included."""
        return sum(P.param_breakdown(self).values())

    @property
    def active_params(self) -> int:
        """Weights one token passes through (top-k routed experts), with the input embedding and the head."""
        return sum(P.active_param_breakdown(self).values())

    @property
    def mtp_params(self) -> int:
        """Multi-token-prediction layers, embedding and output head shared with the main model."""
        return sum(P.mtp_param_breakdown(self).values())

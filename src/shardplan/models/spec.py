"""What a network is: ``ModelSpec`` and its parts (MoE, MLA). Shapes only; no hardware, no costs."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_LAYERS = 10_000
"""Most transformer layers a model may have (the deepest published models have a few hundred)."""
MAX_DIM = 2**24
"""Largest width, head count, expert count or vocabulary (16,777,216; published models stay below 2^20)."""
MAX_CONTEXT = 2**31 - 1
"""Largest max_position_embeddings."""

PosInt = Annotated[int, Field(ge=1, le=MAX_DIM)]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_DIM)]


class MlpKind(StrEnum):
    """Feed-forward block of a layer."""

    GELU = "gelu"
    """Plain two-matrix MLP with GeLU (GPT-2/3, OPT-style ReLU is its own member): 2·h·f weights."""
    RELU = "relu"
    """Plain two-matrix MLP with ReLU (OPT): 2·h·f weights."""
    SWIGLU = "swiglu"
    """Gated three-matrix MLP with SiLU gate (Llama, Mistral, Qwen, DeepSeek): 3·h·f weights."""
    GEGLU = "geglu"
    """Gated three-matrix MLP with GeLU gate (Gemma): 3·h·f weights."""

    @property
    def gated(self) -> bool:
        return self in (MlpKind.SWIGLU, MlpKind.GEGLU)


class NormKind(StrEnum):
    """Normalisation layer: LayerNorm has a weight and a bias, RMSNorm a weight only."""

    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class PositionKind(StrEnum):
    """Positional scheme: only learned absolute positions carry parameters."""

    LEARNED = "learned"
    ROPE = "rope"
    ALIBI = "alibi"


class MoESpec(BaseModel):
    """Mixture-of-experts feed-forward (Mixtral, Qwen-MoE, DeepSeek)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_experts: PosInt = Field(description="Routed experts per MoE layer.")
    experts_per_token: PosInt = Field(description="Routed experts each token is sent to (top-k).")
    expert_ffn_hidden_size: PosInt = Field(description="Intermediate size of one routed expert.")
    num_shared_experts: NonNegInt = Field(0, description="Always-active shared experts per MoE layer.")
    shared_expert_ffn_hidden_size: NonNegInt = Field(
        0, description="Intermediate size of one shared expert (0: same as a routed expert)."
    )
    shared_expert_gate: bool = Field(False, description="A sigmoid gate h→1 on the shared expert (Qwen2-MoE).")
    first_dense_layers: NonNegInt = Field(0, description="The first k layers use a dense MLP (DeepSeek).")
    layer_freq: PosInt = Field(1, description="Every n-th layer (after the dense ones) is an MoE layer.")
    capacity_factor: float = Field(1.0, gt=0, le=1024, allow_inf_nan=False,
        description="Expert capacity factor for token dropping.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) must be ≤ num_experts ({self.num_experts})"
            )
        return self

    @property
    def shared_ffn(self) -> int:
        return self.shared_expert_ffn_hidden_size or self.expert_ffn_hidden_size


class MLASpec(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank Q and a compressed, shared KV latent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    q_lora_rank: NonNegInt = Field(description="Rank of the query down-projection (0: full-rank query).")
    kv_lora_rank: PosInt = Field(description="Rank of the compressed KV latent (what the KV cache stores).")
    qk_nope_head_dim: PosInt = Field(description="Per-head query/key dimension without rotary embedding.")
    qk_rope_head_dim: PosInt = Field(description="Per-head query/key dimension with rotary (shared key part).")
    v_head_dim: PosInt = Field(description="Per-head value dimension.")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class ModelSpec(BaseModel):
    """A decoder-only transformer, as much of it as cost and memory depend on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Catalog name or the file it came from.")
    family: str = Field("custom", description="Model family (llama, gpt, opt, …).")
    num_layers: Annotated[int, Field(ge=1, le=MAX_LAYERS)] = Field(description="Transformer layers (blocks).")
    hidden_size: PosInt = Field(description="Model width h.")
    num_heads: PosInt = Field(description="Attention (query) heads a.")
    num_kv_heads: PosInt | None = Field(None, description="Key/value heads (MHA: = heads, MQA: 1, GQA: between).")
    head_dim: PosInt | None = Field(None, description="Per-head dimension (default hidden_size / num_heads).")
    ffn_hidden_size: PosInt = Field(description="Intermediate size of the dense MLP.")
    mlp: MlpKind = Field(MlpKind.GELU, description="MLP kind: plain gelu/relu or gated swiglu/geglu.")
    vocab_size: PosInt = Field(description="Vocabulary size V.")
    tied_embeddings: bool = Field(False, description="LM head shares the input embedding matrix.")
    position: PositionKind = Field(PositionKind.ROPE, description="Positional scheme.")
    max_position_embeddings: Annotated[int, Field(ge=1, le=MAX_CONTEXT)] = Field(2048,
        description="Context length the model was trained for.")
    norm: NormKind = Field(NormKind.RMSNORM, description="Norm kind.")
    norms_per_layer: NonNegInt = Field(2, description="Norm layers per block (Gemma-2: 4; Falcon-7B: 1).")
    qkv_bias: bool = Field(False, description="Bias on the Q/K/V projections.")
    out_bias: bool = Field(False, description="Bias on the attention output projection.")
    qk_norm: bool = Field(False, description="A norm over each head's query and key (Qwen3): 2·head_dim per layer.")
    mlp_bias: bool = Field(False, description="Biases on the MLP projections.")
    embedding_norm: bool = Field(False, description="A norm right after the word embedding (BLOOM).")
    parallel_block: bool = Field(False, description="Attention and MLP read the same input (GPT-J/NeoX/Falcon).")
    sliding_window: Annotated[int, Field(ge=1, le=MAX_CONTEXT)] | None = Field(None,
        description="Sliding-window attention span, if any.")
    moe: MoESpec | None = Field(None, description="Mixture-of-experts feed-forward, if any.")
    mla: MLASpec | None = Field(None, description="Multi-head latent attention, if any.")
    dtype: str = Field("bf16", description="Datatype of the released weights.")
    source: str = Field("", description="Where the shape comes from (paper, model card, config.json).")

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
        return self

    # --- derived shape facts -------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def attention_kind(self) -> str:
        if self.mla is not None:
            return "MLA"
        if self.kv_heads == self.num_heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    @property
    def num_moe_layers(self) -> int:
        if self.moe is None:
            return 0
        rest = self.num_layers - self.moe.first_dense_layers
        return -(-rest // self.moe.layer_freq)  # MoE at layers first_dense + j·freq (j = 0, 1, …)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def total_params(self) -> int:
        from shardplan.models.params import param_breakdown

        return sum(param_breakdown(self).values())

    @property
    def active_params(self) -> int:
        from shardplan.models.params import active_param_breakdown

        return sum(active_param_breakdown(self).values())

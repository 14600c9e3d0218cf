"""Sub-specs of ``ModelSpec``: MoE (with its router), MLA, DeepSeek sparse attention, Gated DeltaNet,
Mamba-2 and RoPE. Shapes only; each field names the config.json key it comes from where one exists.
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shardplan.models.kinds import RopeScaling, RouterScore

MAX_LAYERS = 10_000
"""Most transformer layers a model may have (the deepest published models have a few hundred)."""
MAX_DIM = 2**24
"""Largest width, head count, expert count or vocabulary (16,777,216; published models stay below 2^20)."""
MAX_CONTEXT = 2**31 - 1
"""Largest max_position_embeddings, sliding window or chunk."""

PosInt = Annotated[int, Field(ge=1, le=MAX_DIM)]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_DIM)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MoESpec(_Frozen):
    """Mixture-of-experts feed-forward (Mixtral, Qwen-MoE, DeepSeek, Llama 4, gpt-oss) and its router."""

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
    # --- router ---------------------------------------------------------------------------------
    score_function: RouterScore = Field(RouterScore.SOFTMAX, description="Router score: softmax or sigmoid.")
    router_bias: bool = Field(False, description="The router linear has a bias (gpt-oss): E parameters per layer.")
    expert_bias: bool = Field(
        False, description="Aux-loss-free load-balancing bias added to scores for selection (DeepSeek-V3 "
        "e_score_correction_bias): E parameters per layer."
    )
    topk_scaling_factor: float = Field(1.0, gt=0, description="Routed-expert output scale (routed_scaling_factor).")
    num_groups: NonNegInt = Field(0, description="Expert groups for group-limited routing (n_group; 0: none).")
    topk_groups: NonNegInt = Field(0, description="Groups each token may route to (topk_group).")
    norm_topk_prob: bool = Field(True, description="Renormalise the top-k weights to sum to 1.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) must be ≤ num_experts ({self.num_experts})"
            )
        if self.num_groups and (self.num_experts % self.num_groups or self.topk_groups > self.num_groups):
            raise ValueError(f"num_groups ({self.num_groups}) must divide num_experts ({self.num_experts}) and "
                             f"be ≥ topk_groups ({self.topk_groups})")
        return self

    @property
    def shared_ffn(self) -> int:
        return self.shared_expert_ffn_hidden_size or self.expert_ffn_hidden_size


class MLASpec(_Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank Q and a compressed, shared KV latent."""

    q_lora_rank: NonNegInt = Field(description="Rank of the query down-projection (0: full-rank query).")
    kv_lora_rank: PosInt = Field(description="Rank of the compressed KV latent (what the KV cache stores).")
    qk_nope_head_dim: PosInt = Field(description="Per-head query/key dimension without rotary embedding.")
    qk_rope_head_dim: PosInt = Field(description="Per-head query/key dimension with rotary (shared key part).")
    v_head_dim: PosInt = Field(description="Per-head value dimension.")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class SparseAttnSpec(_Frozen):
    """DeepSeek sparse attention (DeepSeek-V3.2): a lightning indexer picks the top-k keys per query."""

    index_heads: PosInt = Field(description="Indexer heads (index_n_heads).")
    index_head_dim: PosInt = Field(description="Indexer head dimension (index_head_dim).")
    index_topk: PosInt = Field(description="Keys each query attends to (index_topk).")


class LinearAttnSpec(_Frozen):
    """Gated DeltaNet linear attention (Qwen3-Next): per-head recurrent state d_k × d_v."""

    num_key_heads: PosInt = Field(description="Query/key heads (linear_num_key_heads).")
    num_value_heads: PosInt = Field(description="Value heads (linear_num_value_heads).")
    key_head_dim: PosInt = Field(description="Query/key head dimension (linear_key_head_dim).")
    value_head_dim: PosInt = Field(description="Value head dimension (linear_value_head_dim).")
    conv_kernel: PosInt = Field(4, description="Short causal convolution width (linear_conv_kernel_dim).")

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def state_elements(self) -> int:
        """Recurrent state per sequence: one d_k×d_v matrix per value head plus the conv window."""
        conv = (2 * self.key_dim + self.value_dim) * (self.conv_kernel - 1)
        return self.num_value_heads * self.key_head_dim * self.value_head_dim + conv


class MambaSpec(_Frozen):
    """Mamba-2 selective state-space mixer (Dao & Gu 2024, arXiv 2405.21060 §7)."""

    num_heads: PosInt = Field(description="SSM heads (mamba_num_heads / mamba_n_heads).")
    head_dim: PosInt = Field(description="Head dimension (mamba_head_dim / mamba_d_head).")
    d_state: PosInt = Field(description="State size N per head (ssm_state_size / mamba_d_state).")
    n_groups: PosInt = Field(1, description="B/C groups (n_groups / mamba_n_groups).")
    conv_kernel: PosInt = Field(4, description="Causal conv width (conv_kernel / mamba_d_conv).")
    expand: PosInt = Field(2, description="Inner width / hidden size, as configured (mamba_expand).")
    chunk_size: PosInt = Field(256, description="SSD chunk length (chunk_size / mamba_chunk_size).")
    proj_bias: bool = Field(False, description="Bias on in_proj/out_proj (use_bias / mamba_proj_bias).")
    conv_bias: bool = Field(True, description="Bias on the conv (use_conv_bias / mamba_conv_bias).")

    @property
    def inner(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.inner + 2 * self.n_groups * self.d_state

    @property
    def state_elements(self) -> int:
        """Recurrent state per sequence: the SSM state (heads·head_dim·N) plus the conv window."""
        return self.num_heads * self.head_dim * self.d_state + self.conv_dim * (self.conv_kernel - 1)


class RopeSpec(_Frozen):
    """Rotary position embedding: base, the rotated share of each head, and context-extension scaling."""

    theta: float = Field(10000.0, gt=0, description="RoPE base (rope_theta).")
    partial_rotary_factor: float = Field(1.0, gt=0, le=1, description="Share of head_dim that is rotated.")
    scaling: RopeScaling = Field(RopeScaling.NONE, description="rope_scaling.rope_type.")
    factor: float = Field(1.0, gt=0, description="rope_scaling.factor.")
    original_max_position_embeddings: Annotated[int, Field(ge=1, le=MAX_CONTEXT)] | None = Field(
        None, description="Context before extension.")
    low_freq_factor: float | None = Field(None, gt=0, description="llama3 scaling low_freq_factor.")
    high_freq_factor: float | None = Field(None, gt=0, description="llama3 scaling high_freq_factor.")
    beta_fast: float | None = Field(None, gt=0, description="YaRN beta_fast.")
    beta_slow: float | None = Field(None, gt=0, description="YaRN beta_slow.")
    mscale: float | None = Field(None, gt=0, description="YaRN mscale.")
    mscale_all_dim: float | None = Field(None, ge=0, description="YaRN mscale_all_dim (DeepSeek).")
    local_theta: float | None = Field(None, gt=0, description="Base of the local (sliding) layers (Gemma 3).")

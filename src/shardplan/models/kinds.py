"""Small enums that name the parts of a network: MLP, norm, position scheme, token mixer, MoE router score.

A leaf module: ``spec``, ``parts``, ``pattern`` and ``params`` import from here, never the reverse.
"""

from __future__ import annotations

from enum import StrEnum


class MlpKind(StrEnum):
    """Feed-forward block of a layer."""

    GELU = "gelu"
    """Plain two-matrix MLP with GeLU (GPT-2/3, OPT-style ReLU is its own member): 2·h·f weights."""
    RELU = "relu"
    """Plain two-matrix MLP with ReLU (OPT): 2·h·f weights."""
    RELU2 = "relu2"
    """Plain two-matrix MLP with squared ReLU (Nemotron-H): 2·h·f weights."""
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
    LAYERNORM_NO_BIAS = "layernorm-nobias"
    """LayerNorm without a bias (Cohere): a weight only, like RMSNorm."""
    RMSNORM = "rmsnorm"


class PositionKind(StrEnum):
    """Positional scheme: only learned absolute positions carry parameters."""

    LEARNED = "learned"
    ROPE = "rope"
    ALIBI = "alibi"
    NOPE = "none"
    """No positional encoding in attention (Nemotron-H, Granite 4.0-H: order comes from the SSM layers)."""


class Mixer(StrEnum):
    """The token mixer of one layer; the value is its one-letter code in ``ModelSpec.layer_pattern``."""

    FULL = "F"
    """Causal softmax attention over the whole context (MHA/GQA/MQA, or MLA when the model has it)."""
    SLIDING = "S"
    """Softmax attention over the last ``sliding_window`` tokens (Mistral, Gemma 2/3, gpt-oss, Cohere2)."""
    CHUNKED = "C"
    """Softmax attention inside fixed chunks of ``attention_chunk_size`` tokens (Llama 4 local layers)."""
    LINEAR = "L"
    """Linear attention with a recurrent state, Gated DeltaNet (Qwen3-Next): ``linear_attention`` shape."""
    MAMBA = "M"
    """Mamba-2 selective state-space layer (Nemotron-H, Granite 4.0): ``mamba`` shape."""
    NONE = "N"
    """No token mixer: an MLP-only layer (Nemotron-H's ``-`` layers)."""

    @property
    def is_attention(self) -> bool:
        """Softmax attention with a KV cache (full, sliding or chunked)."""
        return self in (Mixer.FULL, Mixer.SLIDING, Mixer.CHUNKED)

    @property
    def is_recurrent(self) -> bool:
        """A fixed-size recurrent state per sequence instead of a KV cache."""
        return self in (Mixer.LINEAR, Mixer.MAMBA)


class MlpSlot(StrEnum):
    """The feed-forward of one layer; the value is its lower-case code in ``ModelSpec.layer_pattern``."""

    DENSE = "d"
    MOE = "e"
    NONE = "n"


class RouterScore(StrEnum):
    """How an MoE router turns logits into expert weights."""

    SOFTMAX = "softmax"
    SIGMOID = "sigmoid"


class RopeScaling(StrEnum):
    """Context-extension scheme applied to RoPE frequencies."""

    NONE = "none"
    LINEAR = "linear"
    LLAMA3 = "llama3"
    YARN = "yarn"
    DYNAMIC = "dynamic"
    LONGROPE = "longrope"

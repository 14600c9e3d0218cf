"""What the networks are: ModelSpec, a catalog of presets, and offline Hugging Face config import."""

from shardplan.models.catalog import MODELS, get_model
from shardplan.models.kinds import Mixer, MlpKind, MlpSlot, NormKind, PositionKind, RopeScaling, RouterScore
from shardplan.models.load import resolve_model
from shardplan.models.params import (
    active_param_breakdown,
    layer_param_breakdown,
    mtp_param_breakdown,
    param_breakdown,
)
from shardplan.models.parts import LinearAttnSpec, MambaSpec, MLASpec, MoESpec, RopeSpec, SparseAttnSpec
from shardplan.models.spec import ModelSpec

__all__ = [
    "MODELS",
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
    "active_param_breakdown",
    "get_model",
    "layer_param_breakdown",
    "mtp_param_breakdown",
    "param_breakdown",
    "resolve_model",
]

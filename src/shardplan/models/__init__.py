"""What the networks are: ModelSpec, a catalog of presets, and offline Hugging Face config import."""

from shardplan.models.catalog import MODELS, get_model
from shardplan.models.load import resolve_model
from shardplan.models.params import active_param_breakdown, param_breakdown
from shardplan.models.spec import MLASpec, MlpKind, ModelSpec, MoESpec, NormKind, PositionKind

__all__ = [
    "MODELS",
    "MLASpec",
    "MlpKind",
    "MoESpec",
    "ModelSpec",
    "NormKind",
    "PositionKind",
    "active_param_breakdown",
    "get_model",
    "param_breakdown",
    "resolve_model",
]

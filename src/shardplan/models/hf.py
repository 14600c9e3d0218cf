"""Offline import of a Hugging Face ``config.json`` into a ``ModelSpec``.

One small reader per ``model_type`` (in ``hf_types``) maps that architecture's key names onto ModelSpec
fields, with the defaults of the matching transformers config class where a key may be left out.
Anything missing, of the wrong type or out of range becomes a one-line ``ConfigFileError`` naming the
key. Multimodal wrappers (gemma3, llama4, mistral3) are read through their ``text_config``; the vision
tower is counted apart (``vision_params``). Nothing here touches the network.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from shardplan.errors import ConfigFileError
from shardplan.models.hf_types import classic, decoders, hybrid, recent
from shardplan.models.hf_types.config import Fields, HFConfig
from shardplan.models.spec import ModelSpec

__all__ = ["READERS", "spec_from_hf_config"]

READERS: dict[str, Callable[[HFConfig], Fields]] = classic.READERS | decoders.READERS | recent.READERS | hybrid.READERS

def _dtype(c: HFConfig) -> str:
    """Datatype of the released weights: FP8 when quantization_config says so, else torch_dtype."""
    quant = c.data.get("quantization_config")
    method = str(quant.get("quant_method", "")).lower() if isinstance(quant, dict) else ""
    if method in ("fp8", "mxfp4"):  # gpt-oss: MXFP4 experts (each still counts as one parameter)
        return method
    d = str(c.data.get("torch_dtype") or c.data.get("dtype") or "bfloat16")
    return {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(d, "bf16")


def spec_from_hf_config(cfg: dict[str, Any], *, name: str) -> ModelSpec:
    """A ``ModelSpec`` from a parsed config.json; unknown ``model_type`` lists the supported ones."""
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str):
        raise ConfigFileError("config.json: 'model_type' is missing", field="model")
    reader = READERS.get(model_type)
    if reader is None:
        raise ConfigFileError(
            f"config.json: model_type '{model_type}' is not supported; supported: {', '.join(sorted(READERS))}",
            field="model",
        )
    c = HFConfig(cfg)
    fields = {k: v for k, v in reader(c).items() if v is not None}
    fields.setdefault("dtype", _dtype(c))
    try:
        return ModelSpec(name=name, source=f"config.json ({model_type})", **fields)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "model"
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigFileError(f"config.json: {loc}: {msg}", field="model") from None

"""Resolve ``--model NAME|PATH``: a catalog preset, a Hugging Face ``config.json``, or a folder holding one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shardplan.errors import ConfigFileError
from shardplan.models.catalog import MODELS, get_model
from shardplan.models.hf import spec_from_hf_config
from shardplan.models.spec import ModelSpec


def read_config_file(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (a file, or a folder with ``config.json``), or a one-line error."""
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigFileError(f"cannot read '{path}': {e.strerror or e}", field="model") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigFileError(f"'{path}' is not valid JSON: {e.msg} at line {e.lineno}", field="model") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"'{path}' must hold a JSON object", field="model")
    return data


def resolve_model(name_or_path: str) -> ModelSpec:
    """A catalog model by name, or a model read from a Hugging Face config.json (offline)."""
    key = name_or_path.strip().lower()
    if key in MODELS:
        return MODELS[key]
    path = Path(name_or_path).expanduser()
    if path.exists() or path.suffix.lower() == ".json" or "/" in name_or_path:
        if not path.exists():
            raise ConfigFileError(f"no such file or folder '{name_or_path}'", field="model")
        cfg = read_config_file(path)
        return spec_from_hf_config(cfg, name=path.stem if path.is_file() else path.name)
    return get_model(name_or_path)

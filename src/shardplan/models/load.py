"""Resolve ``--model NAME|PATH``: a catalog preset, a Hugging Face ``config.json``, or a folder holding one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardplan.errors import ConfigFileError
from shardplan.models.catalog import MODELS, get_model
from shardplan.models.hf import spec_from_hf_config
from shardplan.models.spec import ModelSpec
from shardplan.safeio import load_json, path_kind, read_text


def read_config_file(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (a file, or a folder with ``config.json``), or a one-line error."""
    if path_kind(path, field="model") == "dir":
        path = path / "config.json"
        if path_kind(path, field="model") == "missing":
            raise ConfigFileError(f"cannot read '{path}': the folder has no config.json", field="model")
    data = load_json(read_text(path, field="model"), where=f"'{path}'", field="model")
    if not isinstance(data, dict):
        raise ConfigFileError(f"'{path}' must hold a JSON object", field="model")
    return data


def model_name(path: Path, cfg: dict[str, Any]) -> str:
    """A name for a model read from a file: the file's stem, except for a file called ``config.json`` (the
    Hugging Face layout), which is named after ``_name_or_path`` (a hub id such as
    ``meta-llama/Llama-2-7b-hf`` → ``Llama-2-7b-hf``) when it has one, else after its folder."""
    if path_kind(path, field="model") == "dir":
        path = path / "config.json"
    if path.stem.lower() != "config":
        return path.stem
    hub = cfg.get("_name_or_path")
    if isinstance(hub, str) and 0 < len(hub.strip()) <= 200 and hub.isprintable():
        return hub.strip().rstrip("/").split("/")[-1] or hub.strip()
    return path.resolve().parent.name or path.stem


def resolve_model(name_or_path: str) -> ModelSpec:
    """A catalog model by name, or a model read from a Hugging Face config.json (offline)."""
    key = name_or_path.strip().lower()
    if key in MODELS:
        return MODELS[key]
    path = Path(name_or_path).expanduser()
    kind = path_kind(path, field="model")
    if kind != "missing" or path.suffix.lower() == ".json" or "/" in name_or_path:
        if kind == "missing":
            raise ConfigFileError(f"no such file or folder '{name_or_path}'", field="model")
        cfg = read_config_file(path)
        return spec_from_hf_config(cfg, name=model_name(path, cfg))
    return get_model(name_or_path)

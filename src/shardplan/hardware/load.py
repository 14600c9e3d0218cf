"""Resolve ``--hardware NAME|PATH`` to a ``SystemSpec``: a catalog preset, or a YAML/JSON file.

A file holds one system in the ``SystemSpec`` schema. Its ``gpu`` may be a GPU catalog name
(``gpu: h100-sxm``) or a full GPU description; a ``base`` key names a preset system to start from,
so a file can override a few fields (``base: dgx-h100`` plus ``gpus_per_node: 4``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shardplan.errors import ConfigFileError
from shardplan.hardware.catalog import GPUS, SYSTEMS, get_gpu, get_system
from shardplan.hardware.spec import SystemSpec


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigFileError(f"cannot read '{path}': {e.strerror or e}", field="hardware") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as e:  # yaml and json raise unrelated types; both mean "not parseable"
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigFileError(f"'{path}' is not valid {path.suffix.lstrip('.') or 'JSON'}: {first}",
                              field="hardware") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"'{path}' must hold a mapping of SystemSpec fields", field="hardware")
    return data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def system_from_mapping(data: dict[str, Any], *, origin: str) -> SystemSpec:
    """Validate a mapping (from a file) as a ``SystemSpec``, resolving ``base`` and a GPU by name."""
    data = dict(data)
    if "base" in data:
        data = _merge(get_system(str(data.pop("base"))).model_dump(), data)
    gpu = data.get("gpu")
    if isinstance(gpu, str):
        data["gpu"] = get_gpu(gpu).model_dump()
    elif isinstance(gpu, dict) and "base" in gpu:
        gpu = dict(gpu)
        data["gpu"] = _merge(get_gpu(str(gpu.pop("base"))).model_dump(), gpu)
    data.setdefault("name", Path(origin).stem)
    try:
        return SystemSpec.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "system"
        raise ConfigFileError(f"{origin}: {loc}: {err['msg']}", field="hardware") from None


def resolve_system(name_or_path: str) -> SystemSpec:
    """A system preset by name, a GPU name (as an 8-GPU generic node), or a YAML/JSON file."""
    key = name_or_path.strip().lower()
    if key in SYSTEMS:
        return SYSTEMS[key]
    if key in GPUS:
        from shardplan.hardware.catalog import generic_system

        return generic_system(GPUS[key])
    path = Path(name_or_path).expanduser()
    if path.suffix.lower() in (".yaml", ".yml", ".json") or path.exists():
        if not path.is_file():
            raise ConfigFileError(f"no such file '{name_or_path}'", field="hardware")
        return system_from_mapping(_read_mapping(path), origin=str(path))
    return get_system(name_or_path)  # raises UnknownNameError with suggestions

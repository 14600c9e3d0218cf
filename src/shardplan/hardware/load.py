"""Resolve ``--hardware NAME|PATH`` to a ``SystemSpec``: a catalog preset, or a YAML/JSON file.

A file holds one system in the ``SystemSpec`` schema. Its ``gpu`` may be a GPU catalog name
(``gpu: h100-sxm``), a full GPU description, or a GPU preset with overrides
(``gpu: {base: h100-sxm, memory_bytes: 64GiB}``); a ``base`` key names a preset system to start from,
so a file can override a few fields (``base: dgx-h100`` plus ``gpus_per_node: 4``). Byte fields
(``*_bytes``) accept sizes with units (``80GiB``, ``1.5TB``) and bandwidths (``*_bytes_per_s``) accept
``900GB/s``. Every problem becomes one ``ConfigFileError``/``UnknownNameError`` line naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shardplan.errors import ConfigFileError, UnknownNameError
from shardplan.hardware.catalog import GPUS, SYSTEMS, generic_system, get_system
from shardplan.hardware.spec import SystemSpec
from shardplan.safeio import load_json, load_yaml, path_kind, read_text
from shardplan.units import parse_size

_SUFFIXES = (".yaml", ".yml", ".json")


def _read_mapping(path: Path) -> dict[str, Any]:
    text = read_text(path, field="hardware")
    kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
    where = f"'{path}'"
    data = load_json(text, where=where, field="hardware") if kind == "JSON" else \
        load_yaml(text, where=where, field="hardware")
    if not isinstance(data, dict):
        raise ConfigFileError(f"'{path}' must hold a mapping of SystemSpec fields", field="hardware")
    return data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _parse_units(data: Any, *, path: str, origin: str) -> Any:
    """Turn size strings in ``*_bytes`` / ``*_bytes_per_s`` fields into numbers, recursively."""
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    for k, v in data.items():
        where = f"{path}.{k}" if path else str(k)
        if isinstance(v, str) and str(k).endswith("_bytes"):
            v = parse_size(v, field=f"hardware: {origin}: {where}")
        elif isinstance(v, str) and str(k).endswith("_bytes_per_s"):
            rate = v.strip()
            rate = rate[:-2] if rate.lower().endswith("/s") else rate
            v = parse_size(rate, field=f"hardware: {origin}: {where}")
        out[k] = _parse_units(v, path=where, origin=origin)
    return out


def _preset_name(value: Any, *, field: str, origin: str) -> str:
    if not isinstance(value, str):
        raise ConfigFileError(f"{origin}: {field}: must be a preset name, got {type(value).__name__}",
                              field="hardware")
    return value


def _preset(kind: str, name: str, catalog: dict[str, Any], *, field: str, origin: str) -> dict[str, Any]:
    """The fields of a catalog entry, or an ``UnknownNameError`` naming the file and the field."""
    key = name.strip().lower()
    if key not in catalog:
        raise UnknownNameError(kind, name, catalog, field=f"hardware: {origin}: {field}",
                               listing="`shardplan hardware list`")
    return catalog[key].model_dump()


def _resolve_gpu(gpu: Any, *, origin: str) -> tuple[Any, bool]:
    """``(gpu, whole)``: a GPU named, or given as ``{base: NAME, ...}``, becomes a whole mapping."""
    if isinstance(gpu, str):
        return _preset("GPU", gpu, GPUS, field="gpu", origin=origin), True
    if isinstance(gpu, dict) and "base" in gpu:
        over = dict(gpu)
        name = _preset_name(over.pop("base"), field="gpu.base", origin=origin)
        return _merge(_preset("GPU", name, GPUS, field="gpu.base", origin=origin), over), True
    return gpu, False


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "system"
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return f"{loc}: {err['msg']}{more}"


def system_from_mapping(data: dict[str, Any], *, origin: str) -> SystemSpec:
    """Validate a mapping (from a file) as a ``SystemSpec``, resolving ``base``, a GPU by name and units.

    Under a system ``base``, a GPU given by name (or with its own ``base``) replaces the base system's
    GPU; a ``gpu`` mapping without ``base`` overrides fields of the base system's GPU.
    """
    data = _parse_units(data, path="", origin=origin)
    stated = data.get("software")
    name = data.get("name", Path(origin).stem)
    whole_gpu = False
    if "gpu" in data:
        data["gpu"], whole_gpu = _resolve_gpu(data["gpu"], origin=origin)
    if "base" in data:
        base_name = _preset_name(data.pop("base"), field="base", origin=origin)
        base = _preset("system", base_name, SYSTEMS, field="base", origin=origin)
        if whole_gpu:
            base.pop("gpu")
        data = _merge(base, data)
    data["name"] = name
    try:
        spec = SystemSpec.model_validate(data)
    except ValidationError as e:
        raise ConfigFileError(f"{origin}: {_first_error(e)}", field="hardware") from None
    spec.software._stated = frozenset(stated) if isinstance(stated, dict) else frozenset()
    return spec


def resolve_system(name_or_path: str) -> SystemSpec:
    """A system preset by name, a GPU name (as an 8-GPU generic node), or a YAML/JSON file."""
    key = name_or_path.strip().lower()
    if key in SYSTEMS:
        return SYSTEMS[key]
    if key in GPUS:
        return generic_system(GPUS[key])
    path = Path(name_or_path).expanduser()
    kind = path_kind(path, field="hardware")
    if path.suffix.lower() in _SUFFIXES or kind != "missing":
        if kind == "dir":
            raise ConfigFileError(f"'{name_or_path}' is a directory, not a system file", field="hardware")
        if kind == "missing":
            raise ConfigFileError(f"no such file '{name_or_path}'", field="hardware")
        return system_from_mapping(_read_mapping(path), origin=str(path))
    return get_system(name_or_path)  # raises UnknownNameError with suggestions

"""A parsed config.json with typed getters that fail with one line naming the key."""

from __future__ import annotations

from typing import Any, NoReturn

from shardplan.errors import ConfigFileError
from shardplan.models.parts import MAX_CONTEXT, MAX_DIM, MAX_LAYERS

Fields = dict[str, Any]

# Upper bounds of integer keys (checked before anything iterates over layers); every other integer ≤ MAX_DIM.
_MAXIMUM = {"num_hidden_layers": MAX_LAYERS, "n_layer": MAX_LAYERS, "num_layers": MAX_LAYERS,
            "max_position_embeddings": MAX_CONTEXT, "n_positions": MAX_CONTEXT, "n_ctx": MAX_CONTEXT,
            "seq_length": MAX_CONTEXT, "sliding_window": MAX_CONTEXT, "attention_chunk_size": MAX_CONTEXT,
            "original_max_position_embeddings": MAX_CONTEXT}


def _short(v: float) -> str:
    """A number for a message, however many digits it has."""
    text = str(int(v)) if isinstance(v, int) else repr(v)
    return text if len(text) <= 15 else f"a {len(text)}-digit number"


class HFConfig:
    """A parsed config.json with typed getters; a JSON ``null`` counts as absent, as in transformers."""

    def __init__(self, data: dict[str, Any], prefix: str = "") -> None:
        self.data = data
        self.prefix = prefix

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ConfigFileError(f"config.json: '{self.prefix}{key}' {problem}", field="model")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def key(self, *keys: str) -> str:
        """The first of ``keys`` present (HF renames keys between families), else the first one."""
        return next((k for k in keys if self.has(k)), keys[0])

    def num(self, *keys: str, default: int | None = None, minimum: int = 1) -> int:
        k = self.key(*keys)
        if not self.has(k):
            if default is None:
                self.fail(k, "is missing")
            return default
        v = self.data[k]
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
            self.fail(k, f"must be an integer, got {v!r}")
        if v < minimum:
            self.fail(k, f"must be ≥ {minimum}, got {_short(v)}")
        top = _MAXIMUM.get(k, MAX_DIM)
        if v > top:
            self.fail(k, f"must be ≤ {top:,}, got {_short(v)}")
        return int(v)

    def opt_int(self, key: str, default: int | None = None) -> int | None:
        """For keys where null means "none": absent takes ``default``, null gives None."""
        if key not in self.data:
            return default
        return self.num(key) if self.has(key) else None

    def flag(self, key: str, default: bool) -> bool:
        v = self.data.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            self.fail(key, f"must be true or false, got {v!r}")
        return v

    def text(self, *keys: str, default: str) -> str:
        k = self.key(*keys)
        v = self.data.get(k, default)
        if v is None:
            return default
        if not isinstance(v, str):
            self.fail(k, f"must be a string, got {v!r}")
        return v

    def real(self, key: str, default: float) -> float:
        v = self.data.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < float("inf"):
            self.fail(key, f"must be a positive finite number, got {_short(v)}")
        try:
            return float(v)
        except OverflowError:  # an integer beyond a double
            self.fail(key, f"must be a positive finite number, got {_short(v)}")

    def sub(self, key: str) -> HFConfig:
        """A nested object (``text_config``, ``rope_scaling``) as its own HFConfig; absent or null: empty."""
        v = self.data.get(key)
        if v is None:
            return HFConfig({})
        if not isinstance(v, dict):
            self.fail(key, f"must be a JSON object, got {v!r}")
        return HFConfig(v, prefix=f"{self.prefix}{key}.")

    def str_list(self, key: str) -> list[str] | None:
        v = self.data.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(isinstance(i, str) for i in v):
            self.fail(key, f"must be a list of strings, got {v!r}")
        return v

    def int_list(self, key: str) -> list[int]:
        v = self.data.get(key) or []
        if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
            self.fail(key, f"must be a list of layer indices, got {v!r}")
        return v

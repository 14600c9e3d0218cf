"""Price files: dollars per GPU-hour per hardware, each figure with its source and the date it was read.

    currency: USD
    prices:
      dgx-h100:            # a system name (shardplan hardware list) or a GPU name (h100-sxm)
        usd_per_gpu_hour: 6.155
        source: https://www.coreweave.com/pricing
        read_on: 2026-09-20
        note: HGX H100 on-demand, $49.24/h per 8-GPU instance

A system's price is its own entry, else its GPU's entry. Every hardware in a sweep must have one.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shardplan.errors import ShardplanError


class Price(BaseModel):
    """One published price."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    usd_per_gpu_hour: Annotated[float, Field(gt=0)] = Field(description="Dollars per GPU per hour.")
    source: str = Field(description="Where the figure is published (URL).")
    read_on: dt.date = Field(description="The date the figure was read.")
    provider: str = ""
    note: str = ""


class PriceFile(BaseModel):
    """Prices by lower-case system or GPU name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    currency: str = "USD"
    prices: dict[str, Price]

    def lookup(self, hardware: str, gpu: str) -> Price | None:
        """The system's own price, else its GPU's."""
        return self.prices.get(hardware.lower()) or self.prices.get(gpu.lower())


def load_prices(path: Path) -> PriceFile:
    """Read and validate a price file (YAML or JSON); errors name the file and the entry."""
    import yaml

    if not path.is_file():
        raise ShardplanError(f"no such file '{path}'", field="prices")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ShardplanError(f"{path}: not valid YAML ({' '.join(str(e).split())})", field="prices") from None
    if isinstance(data, dict) and isinstance(data.get("prices"), dict):
        data = {**data, "prices": {str(k).lower(): v for k, v in data["prices"].items()}}
    try:
        return PriceFile.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "file"
        raise ShardplanError(f"{path}: {loc}: {err['msg']}", field="prices") from None


def check_prices(prices: PriceFile, systems: list[Any], *, path: str = "the price file") -> None:
    """Every system of the sweep must have a price (checked before any work)."""
    for s in systems:
        if prices.lookup(s.name, s.gpu.name) is None:
            raise ShardplanError(f"no price for '{s.name}' (GPU {s.gpu.name}) in {path}; add an entry named "
                                 f"{s.name} or {s.gpu.name}", field="prices")

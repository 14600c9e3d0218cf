"""Value ranges of the hardware and software files: physically plausible bounds, so that a typo is refused."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

# Physically plausible ranges, so that a typo (1e400, .inf, 5e-324) in a system file is refused instead of
# overflowing a time or a memory sum. Each is several orders of magnitude wider than any real machine.
Fraction = Annotated[float, Field(ge=1e-4, le=1.0, allow_inf_nan=False)]  # an efficiency of 0.01% … 100%
Positive = Annotated[float, Field(gt=0.0, le=1e30, allow_inf_nan=False)]  # a curve's size axis (FLOPs, bytes)
NonNeg = Annotated[float, Field(ge=0.0, le=1e3, allow_inf_nan=False)]  # fractions and overheads
Seconds = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]  # a latency or launch floor: 0 … 1 s
Flops = Annotated[float, Field(ge=1e9, le=1e18, allow_inf_nan=False)]  # 1 GFLOP/s … 1 EFLOP/s per device
Rate = Annotated[float, Field(ge=1e6, le=1e15, allow_inf_nan=False)]  # 1 MB/s … 1 PB/s
MaybeRate = Annotated[float, Field(ge=0.0, le=1e15, allow_inf_nan=False)]  # 0 = none, else as Rate
Bytes = Annotated[int, Field(ge=2**20, le=2**60)]  # 1 MiB … 1 EiB

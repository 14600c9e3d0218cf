"""The sweep functions of the notebook API (``shardplan.sweep_training``, ``shardplan.sweep_inference``):
``shardplan sweep train|infer`` as functions; every grid field takes a value, a list, or the CLI's text."""

from __future__ import annotations

from typing import Any

from shardplan.errors import ShardplanError


def _grid(values: dict[str, Any], ints: tuple[str, ...]) -> dict[str, list[Any]]:
    """Sweep axes from keyword values: a scalar, a list, or the CLI's list/range text (``"64:1024:x2"``)."""
    from shardplan.sweep.grid import parse_ints, parse_names, parse_rates

    axes: dict[str, list[Any]] = {}
    for key, v in values.items():
        if v is None:
            continue
        if key in ints:
            axes[key] = parse_ints(v, field=key)
        elif key == "request_rate":
            axes[key] = parse_rates(v if isinstance(v, list | str) else [v], field=key)
        else:
            axes[key] = parse_names(v, field=key)
    return axes


def _sweep_exec(prices: Any, workers: int | None, ray: bool, ray_address: str | None) -> dict[str, Any]:
    from pathlib import Path

    from shardplan.sweep.prices import PriceFile, load_prices

    price_file = load_prices(Path(prices)) if isinstance(prices, str | Path) else prices
    if price_file is not None and not isinstance(price_file, PriceFile):
        raise ShardplanError("give a price file path or a PriceFile", field="prices")
    return {"prices": price_file, "workers": workers, "backend": "ray" if ray else "pool", "ray_address": ray_address}


def sweep_training(model: Any, hardware: Any, *, seq_len: Any, global_batch: Any, gpus: Any = None,
                   dtype: Any = "bf16", tokens: float | str | None = None, deadline: float | str | None = None,
                   prices: Any = None, workers: int | None = None, ray: bool = False, ray_address: str | None = None,
                   **options: Any) -> Any:
    """``shardplan sweep train`` as a function: every field takes a value, a list, or list/range text.

    Returns a ``SweepResult`` whose ``points`` are the ``--json`` rows. ``tokens`` accepts ``"15T"``; ``deadline``
    ``"30d"``; ``prices`` a price-file path. ``options``: grad_dtype optimizer attention offload max_cp
    time_limit_s.

    >>> r = sweep_training("llama-3.1-8b", "dgx-h100,dgx-b200", gpus="8:64:x2", global_batch=256, seq_len=4096,
    ...                    tokens="1T", workers=2)
    >>> [(p["hardware"], p["num_gpus"], round(p["time_to_train_s"] / 86400, 1)) for p in r.points]  # doctest: +SKIP
    """
    from shardplan.sweep import run_sweep
    from shardplan.sweep.grid import parse_count, parse_duration

    axes = _grid({"model": model, "hardware": hardware, "gpus": gpus, "global_batch": global_batch, "seq_len": seq_len,
                  "dtype": dtype}, ("gpus", "global_batch", "seq_len"))
    n = parse_count(tokens, field="tokens") if tokens is not None else None
    d = parse_duration(deadline, field="deadline") if deadline is not None else None
    return run_sweep("train", axes, options, tokens=n, deadline_s=d, **_sweep_exec(prices, workers, ray, ray_address))


def sweep_inference(model: Any, hardware: Any, *, prompt_len: Any, gen_len: Any, gpus: Any = None, dtype: Any = "bf16",
                    request_rate: Any = None, max_ttft_s: float | None = None, max_tpot_s: float | None = None,
                    prices: Any = None, workers: int | None = None, ray: bool = False, ray_address: str | None = None,
                    **options: Any) -> Any:
    """``shardplan sweep infer`` as a function; rows carry ``fleet_gpus``/``copies`` with a ``request_rate``, and
    ``summary["picks"]`` the fewest GPUs per series. ``options``: weight_dtype kv_dtype time_limit_s.

    >>> r = sweep_inference("llama-3.1-70b", "dgx-h100,hgx-h200", gpus="2,4,8", prompt_len=1024, gen_len=256,
    ...                     request_rate=20, max_tpot_s=0.05, workers=2)
    >>> r.summary["picks"]  # doctest: +SKIP
    """
    from shardplan.sweep import run_sweep

    axes = _grid({"model": model, "hardware": hardware, "gpus": gpus, "prompt_len": prompt_len, "gen_len": gen_len,
                  "dtype": dtype, "request_rate": request_rate}, ("gpus", "prompt_len", "gen_len"))
    opts = {"max_ttft_s": max_ttft_s, "max_tpot_s": max_tpot_s, **options}
    return run_sweep("infer", axes, opts, **_sweep_exec(prices, workers, ray, ray_address))

"""`shardplan sweep train` and `shardplan sweep infer`: full plans over grids of request fields.

The list-valued options are the single commands' options (same flags and help) taking text: a comma list
and/or ranges (``shardplan.sweep.grid``). Everything is validated before the first plan starts.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated, Any

import typer

from shardplan.cli._app import app
from shardplan.cli.infer_cmds import Dtype as InferDtype
from shardplan.cli.infer_cmds import KvDtype, MaxTpot, MaxTtft, WDtype
from shardplan.cli.options import GenLen, GpusOpt, HardwareOpt, JsonOpt, ModelOpt, PromptLen, TimeLimitOpt
from shardplan.cli.train_options import Attention, GlobalBatch, GradDtype, Optimizer, SeqLen
from shardplan.cli.train_options import Dtype as TrainDtype
from shardplan.planner.training.knobs import OffloadPolicy
from shardplan.sweep.grid import RANGE_HELP

sweep_app = typer.Typer(
    help="Capacity planning: full plans over lists or ranges of models, hardware, GPU counts and workload fields; "
    "time to train, cost, scaling efficiency, the smallest serving fleet. Local process pool or Ray.",
    no_args_is_help=True,
)
app.add_typer(sweep_app, name="sweep")


def listed(alias: Any, note: str = RANGE_HELP) -> Any:
    """The single command's option ``alias`` (same flags and help) taking a list or range as text."""
    info = typing.get_args(alias)[1]
    return Annotated[str | None, typer.Option(info.default, *info.param_decls, help=f"{info.help} Sweep: {note}",
                                              show_default=False)]


NAMES = "a comma list."
Models = listed(ModelOpt, NAMES)
Hardware = listed(HardwareOpt, NAMES)
Gpus = listed(GpusOpt)
Batches = listed(GlobalBatch)
SeqLens = listed(SeqLen)
TrainDtypes = listed(TrainDtype, NAMES)
InferDtypes = listed(InferDtype, NAMES)
Prompts = listed(PromptLen)
Gens = listed(GenLen)
GridOpt = Annotated[Path | None, typer.Option(
    "--grid", help="YAML file of fields (model, hardware, gpus, …: a value, a list, or range text); "
    "command-line options override its fields.", dir_okay=False)]
PricesOpt = Annotated[Path | None, typer.Option(
    "--prices", help="YAML of $ per GPU-hour per hardware or GPU name (see examples/prices.yaml): adds cost.",
    dir_okay=False)]
WorkersOpt = Annotated[int | None, typer.Option(
    "--workers", "-j", min=1, max=1024, help="Parallel planners (default: all cores); 1 plans in this process.",
    show_default=False)]
RayOpt = Annotated[bool, typer.Option("--ray", help="Run the points as Ray tasks (the ray extra).")]
RayAddressOpt = Annotated[str | None, typer.Option(
    "--ray-address", help="Ray cluster to use with --ray (e.g. ray://head:10001 or auto); default: start a local "
    "Ray instance with --workers CPUs.")]
CsvOpt = Annotated[Path | None, typer.Option("--csv", metavar="FILE", help="Write the rows as CSV (dotted "
                                             "columns: plan.tp, metrics.mfu, cost.run_usd).", dir_okay=False)]
ParquetOpt = Annotated[Path | None, typer.Option("--parquet", metavar="FILE", help="Write the rows as Parquet "
                                                 "(the sweep extra: pyarrow).", dir_okay=False)]
SweepPlotOpt = Annotated[Path | None, typer.Option(
    "--plot", metavar="FILE", help="Write a figure (.png, .svg, .pdf; the plot extra): time (or throughput) vs "
    "GPUs per hardware, scaling efficiency, and the cost/time frontier or the fleet size.", dir_okay=False)]

TRAIN_FIELDS = ("model", "hardware", "gpus", "global_batch", "seq_len", "dtype", "tokens", "deadline", "grad_dtype",
                "optimizer", "attention", "offload", "max_cp")
INFER_FIELDS = ("model", "hardware", "gpus", "prompt_len", "gen_len", "dtype", "request_rate", "max_ttft_ms",
                "max_tpot_ms", "weight_dtype", "kv_dtype")


def _merged(grid: Path | None, allowed: tuple[str, ...], given: dict[str, Any]) -> dict[str, Any]:
    """The grid file's fields, overridden by the options given on the command line."""
    from shardplan.sweep.grid import load_grid_file

    base = load_grid_file(grid, allowed) if grid is not None else {}
    return base | {k: v for k, v in given.items() if v is not None}


def _axes(kind: str, f: dict[str, Any]) -> dict[str, list[Any]]:
    from shardplan.sweep.grid import parse_ints, parse_names, parse_rates

    ints = ("gpus", "global_batch", "seq_len") if kind == "train" else ("gpus", "prompt_len", "gen_len")
    axes: dict[str, list[Any]] = {}
    for k in ("model", "hardware", "dtype"):
        if f.get(k) is not None:
            axes[k] = parse_names(f[k], field=k)
    for k in ints:
        if f.get(k) is not None:
            axes[k] = parse_ints(f[k], field=k.replace("_", "-"))
    if kind == "infer" and f.get("request_rate") is not None:
        axes["request_rate"] = parse_rates(f["request_rate"], field="request-rate")
    return axes


def _check_outputs(csv: Path | None, parquet: Path | None, plot: Path | None, ray: bool) -> None:
    from shardplan.errors import ShardplanError

    for name, path in (("csv", csv), ("parquet", parquet), ("plot", plot)):
        if path is not None and not path.parent.exists():
            raise ShardplanError(f"folder '{path.parent}' does not exist", field=name)
    if parquet is not None:
        from shardplan.sweep.tabular import require_parquet

        require_parquet()
    if plot is not None:
        from shardplan.cli.plots import check_path, require_matplotlib

        check_path(plot)
        require_matplotlib()
    if ray:
        from shardplan.sweep.execute import require_ray

        require_ray()


def _run(kind: str, axes: dict[str, list[Any]], options: dict[str, Any], *, prices: Path | None,
         tokens: float | None, deadline_s: float | None, workers: int | None, ray: bool, ray_address: str | None,
         as_json: bool, csv: Path | None, parquet: Path | None, plot: Path | None) -> None:
    """Validate everything (grid, names, prices, outputs), then plan with a progress bar, then deliver."""
    from shardplan.cli.render_sweep import deliver, progress_bar
    from shardplan.sweep import expand, run_sweep
    from shardplan.sweep.prices import check_prices, load_prices

    if ray_address and not ray:
        from shardplan.errors import ShardplanError

        raise ShardplanError("names the cluster for --ray: add --ray", field="ray-address")
    _check_outputs(csv, parquet, plot, ray)
    exp = expand(kind, axes, options)  # type: ignore[arg-type]
    price_file = load_prices(prices) if prices is not None else None
    if price_file is not None:
        from shardplan.sweep.points import resolve_names

        check_prices(price_file, list(resolve_names(axes["hardware"], kind="hardware").values()), path=str(prices))
    with progress_bar(len(exp.requests), enabled=not as_json) as tick:
        result = run_sweep(kind, axes, options, tokens=tokens, prices=price_file, deadline_s=deadline_s,  # type: ignore[arg-type]
                           backend="ray" if ray else "pool", workers=workers, ray_address=ray_address,
                           progress=tick, expansion=exp)
    deliver(result, as_json=as_json, csv=csv, parquet=parquet, plot=plot)


@sweep_app.command("train")
def sweep_train(
    model: Models = None, hardware: Hardware = None, gpus: Gpus = None, global_batch: Batches = None,
    seq_len: SeqLens = None, dtype: TrainDtypes = None,
    tokens: Annotated[str | None, typer.Option(
        "--tokens", help="Tokens to train on (K, M, B, T suffixes: 15T = 15·10¹²): adds time_to_train_s = tokens / "
        "tokens_per_s and gpu_hours = GPUs · time / 3600.")] = None,
    deadline: Annotated[str | None, typer.Option(
        "--deadline", help="With --tokens: mark the cheapest point that trains within it (30d, 720h, 90m, 3600s); "
        "cost is run_usd with --prices, else GPU-hours.")] = None,
    grad_dtype: GradDtype = "fp32", optimizer: Optimizer = "adam", attention: Attention = None,
    offload: Annotated[OffloadPolicy, typer.Option(
        "--offload", help="CPU offload: auto (only if nothing fits), on, off.")] = OffloadPolicy.AUTO,
    max_cp: Annotated[int, typer.Option("--max-cp", min=1, max=2**20, help="Largest context-parallel degree.")] = 8,
    time_limit: TimeLimitOpt = 30.0, grid: GridOpt = None, prices: PricesOpt = None, workers: WorkersOpt = None,
    ray: RayOpt = False, ray_address: RayAddressOpt = None, as_json: JsonOpt = False, csv: CsvOpt = None,
    parquet: ParquetOpt = None, plot: SweepPlotOpt = None,
) -> None:
    """Plan training at every point of a grid (same solver and numbers as `shardplan train`).

    Cost with --prices: run_usd = $/GPU-hour · gpu_hours, usd_per_million_tokens = $/GPU-hour · GPUs / 3600 /
    tokens_per_s · 10⁶. Scaling efficiency: tokens/s per GPU relative to the smallest GPU count of the series.
    """
    from shardplan.sweep.grid import parse_count, parse_duration

    f = _merged(grid, TRAIN_FIELDS, {"model": model, "hardware": hardware, "gpus": gpus, "global_batch": global_batch,
                                     "seq_len": seq_len, "dtype": dtype, "tokens": tokens, "deadline": deadline})
    n_tokens = parse_count(f["tokens"], field="tokens") if f.get("tokens") is not None else None
    deadline_s = parse_duration(f["deadline"], field="deadline") if f.get("deadline") is not None else None
    if deadline_s is not None and n_tokens is None:
        from shardplan.errors import ShardplanError

        raise ShardplanError("needs --tokens (the time to train is tokens / throughput)", field="deadline")
    options = {"grad_dtype": f.get("grad_dtype", grad_dtype), "optimizer": f.get("optimizer", optimizer),
               "attention": f.get("attention", attention), "offload": f.get("offload", offload),
               "max_cp": f.get("max_cp", max_cp), "time_limit_s": time_limit}
    _run("train", _axes("train", f), options, prices=prices, tokens=n_tokens, deadline_s=deadline_s,
         workers=workers, ray=ray, ray_address=ray_address, as_json=as_json, csv=csv, parquet=parquet, plot=plot)


@sweep_app.command("infer")
def sweep_infer(
    model: Models = None, hardware: Hardware = None, gpus: Gpus = None, prompt_len: Prompts = None,
    gen_len: Gens = None, dtype: InferDtypes = None,
    request_rate: Annotated[str | None, typer.Option(
        "--request-rate", help="Requests per second to serve (a comma list sweeps it). A deployment meets it when "
        "its tokens_per_s ≥ rate · gen-len; copies = ⌈rate · gen-len / tokens_per_s⌉ deployments (fleet_gpus = "
        "copies · GPUs) meet it together, and the minimum per hardware is the least fleet_gpus over --gpus.")] = None,
    max_ttft_ms: MaxTtft = None, max_tpot_ms: MaxTpot = None, weight_dtype: WDtype = None, kv_dtype: KvDtype = None,
    time_limit: TimeLimitOpt = 10.0, grid: GridOpt = None, prices: PricesOpt = None, workers: WorkersOpt = None,
    ray: RayOpt = False, ray_address: RayAddressOpt = None, as_json: JsonOpt = False, csv: CsvOpt = None,
    parquet: ParquetOpt = None, plot: SweepPlotOpt = None,
) -> None:
    """Plan serving at every point of a grid (same solver and numbers as `shardplan infer`, objective throughput).

    Each point's plan is the highest-throughput layout and batch that fits and meets --max-ttft-ms/--max-tpot-ms;
    tokens_per_s = replicas · batch · gen-len / (TTFT + (gen-len − 1) · TPOT). Cost with --prices:
    usd_per_million_tokens = $/GPU-hour · GPUs / 3600 / tokens_per_s · 10⁶ at full load.
    """
    f = _merged(grid, INFER_FIELDS, {"model": model, "hardware": hardware, "gpus": gpus, "prompt_len": prompt_len,
                                     "gen_len": gen_len, "dtype": dtype, "request_rate": request_rate,
                                     "max_ttft_ms": max_ttft_ms, "max_tpot_ms": max_tpot_ms})
    options = {"max_ttft_s": _ms(f.get("max_ttft_ms"), "max-ttft-ms"), "max_tpot_s": _ms(f.get("max_tpot_ms"),
                                                                                         "max-tpot-ms"),
               "weight_dtype": f.get("weight_dtype", weight_dtype), "kv_dtype": f.get("kv_dtype", kv_dtype),
               "time_limit_s": time_limit}
    _run("infer", _axes("infer", f), options, prices=prices, tokens=None, deadline_s=None, workers=workers, ray=ray,
         ray_address=ray_address, as_json=as_json, csv=csv, parquet=parquet, plot=plot)


def _ms(value: Any, field: str) -> float | None:
    from shardplan.errors import ShardplanError

    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ShardplanError(f"'{value}' is not a number of milliseconds", field=field) from None
    if not v > 0:
        raise ShardplanError(f"must be > 0 ms (got {value})", field=field)
    return v / 1e3

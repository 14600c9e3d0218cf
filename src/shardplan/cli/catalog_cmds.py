"""`shardplan models list|show` and `shardplan hardware list|show`."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from shardplan.cli._app import hardware_app, models_app
from shardplan.cli.options import JsonOpt
from shardplan.cli.output import emit
from shardplan.units import format_bytes, format_count


def _model_row(m: Any) -> dict[str, Any]:
    return {
        "name": m.name, "family": m.family, "total_params": m.total_params, "active_params": m.active_params,
        "num_layers": m.num_layers, "hidden_size": m.hidden_size, "num_heads": m.num_heads,
        "num_kv_heads": m.kv_heads, "attention": m.attention_kind,
        "num_experts": m.moe.num_experts if m.moe else 0,
        "experts_per_token": m.moe.experts_per_token if m.moe else 0,
    }


@models_app.command("list")
def models_list(as_json: JsonOpt = False) -> None:
    """All model presets: size, shape and attention kind."""
    from shardplan.models import MODELS

    rows = [_model_row(m) for m in MODELS.values()]

    def render(con: Console) -> None:
        t = Table(title=f"Model catalog ({len(rows)} presets)", title_justify="left")
        for col in ("name", "family", "params", "active", "layers", "hidden", "heads/kv", "attn", "experts"):
            t.add_column(col, justify="left" if col in ("name", "family", "attn") else "right")
        for r in rows:
            experts = f"{r['experts_per_token']}/{r['num_experts']}" if r["num_experts"] else "-"
            t.add_row(r["name"], r["family"], format_count(r["total_params"]), format_count(r["active_params"]),
                      str(r["num_layers"]), str(r["hidden_size"]), f"{r['num_heads']}/{r['num_kv_heads']}",
                      r["attention"], experts)
        con.print(t)

    emit({"models": rows}, render, as_json=as_json)


@models_app.command("show")
def models_show(
    name: Annotated[str, typer.Argument(help="Catalog name, or a HF config.json (or a folder with one).")],
    as_json: JsonOpt = False,
) -> None:
    """Every field of one model, and its parameter count by component."""
    from shardplan.cli.model_view import describe, payload_extras
    from shardplan.models import active_param_breakdown, param_breakdown, resolve_model

    m = resolve_model(name)
    payload = m.model_dump(mode="json")
    payload.update(
        total_params=m.total_params, active_params=m.active_params, attention_kind=m.attention_kind,
        head_dim=m.head_size, num_kv_heads=m.kv_heads,
        param_breakdown=param_breakdown(m), active_param_breakdown=active_param_breakdown(m), **payload_extras(m),
    )

    def render(con: Console) -> None:
        t = Table(title=f"{m.name} ({m.family}, {m.attention_kind})", title_justify="left", show_header=False)
        t.add_column("field")
        t.add_column("value", overflow="fold")
        for k, v in describe(m):
            t.add_row(k, v)
        con.print(t)
        b = Table(title="Parameters by component", title_justify="left")
        b.add_column("component")
        b.add_column("params", justify="right")
        b.add_column("share", justify="right")
        b.add_column("active", justify="right")
        total, active = param_breakdown(m), active_param_breakdown(m)
        for k, v in total.items():
            b.add_row(k, format_count(v), f"{100 * v / m.total_params:.1f}%", format_count(active[k]))
        b.add_row("total", format_count(m.total_params), "100%", format_count(m.active_params), style="bold")
        con.print(b)

    emit(payload, render, as_json=as_json)


def _gpu_row(g: Any) -> dict[str, Any]:
    return {
        "name": g.name, "vendor": g.vendor, "memory_bytes": g.memory_bytes,
        "memory_bandwidth_bytes_per_s": g.memory_bandwidth_bytes_per_s, "peak_flops": dict(g.peak_flops),
    }


def _system_row(s: Any) -> dict[str, Any]:
    return {
        "name": s.name, "gpu": s.gpu.name, "gpus_per_node": s.gpus_per_node,
        "intra_node_bytes_per_s": s.intra_node.bandwidth_bytes_per_s,
        "inter_node_bytes_per_s": s.inter_node.bandwidth_bytes_per_s if s.inter_node else None,
        "host_memory_bytes": s.host_memory_bytes, "description": s.description,
    }


def _tflops(g: Any, dtype: str) -> str:
    v = g.peak_flops.get(dtype)
    return f"{v / 1e12:.4g}" if v else "-"


@hardware_app.command("list")
def hardware_list(as_json: JsonOpt = False) -> None:
    """All GPUs and system presets."""
    from shardplan.hardware import GPUS, SYSTEMS

    gpus = [_gpu_row(g) for g in GPUS.values()]
    systems = [_system_row(s) for s in SYSTEMS.values()]

    def render(con: Console) -> None:
        t = Table(title=f"GPUs ({len(gpus)})", title_justify="left")
        for col in ("name", "vendor", "memory", "HBM TB/s", "bf16/fp16 TFLOP/s", "fp8 TFLOP/s"):
            t.add_column(col, justify="left" if col in ("name", "vendor") else "right")
        for g in GPUS.values():
            half = _tflops(g, "bf16") if "bf16" in g.peak_flops else _tflops(g, "fp16")
            t.add_row(g.name, g.vendor, format_bytes(g.memory_bytes),
                      f"{g.memory_bandwidth_bytes_per_s / 1e12:.3g}", half, _tflops(g, "fp8"))
        con.print(t)
        s = Table(title=f"Systems ({len(systems)})", title_justify="left")
        for col in ("name", "GPU", "GPUs/node", "intra GB/s", "inter GB/s", "host mem", "description"):
            s.add_column(col, justify="right" if "GB/s" in col or col == "GPUs/node" else "left")
        for r, spec in zip(systems, SYSTEMS.values(), strict=True):
            inter = f"{r['inter_node_bytes_per_s'] / 1e9:.4g}" if r["inter_node_bytes_per_s"] else "-"
            s.add_row(r["name"], r["gpu"], str(r["gpus_per_node"]), f"{r['intra_node_bytes_per_s'] / 1e9:.4g}",
                      inter, format_bytes(spec.host_memory_bytes), r["description"])
        con.print(s)

    emit({"gpus": gpus, "systems": systems}, render, as_json=as_json)


@hardware_app.command("show")
def hardware_show(
    name: Annotated[str, typer.Argument(help="System preset, GPU name, or YAML/JSON system file.")],
    as_json: JsonOpt = False,
) -> None:
    """Every field of one system (or GPU) preset."""
    from shardplan.hardware import GPUS, resolve_system

    key = name.strip().lower()
    spec = GPUS[key] if key in GPUS else resolve_system(name)
    payload = spec.model_dump(mode="json")

    def render(con: Console) -> None:
        t = Table(title=spec.name, title_justify="left", show_header=False)
        t.add_column("field")
        t.add_column("value", overflow="fold")

        def add(prefix: str, d: dict[str, Any]) -> None:
            for k, v in d.items():
                if isinstance(v, dict) and k != "peak_flops":
                    add(f"{prefix}{k}.", v)
                else:
                    t.add_row(f"{prefix}{k}", _fmt_field(k, v))

        add("", payload)
        con.print(t)

    emit(payload, render, as_json=as_json)


def _fmt_field(key: str, v: Any) -> str:
    if key.endswith("_bytes") and isinstance(v, int | float):
        return f"{format_bytes(v)} ({v:.4g} B)"
    if key.endswith("bytes_per_s") and isinstance(v, int | float):
        return f"{v / 1e9:.4g} GB/s"
    if key == "peak_flops" and isinstance(v, dict):
        return ", ".join(f"{d} {f / 1e12:.4g} TFLOP/s" for d, f in v.items())
    if key.endswith("_s") and isinstance(v, int | float):
        return f"{v * 1e6:.3g} µs"
    if key == "cpu_flops":
        return f"{v / 1e12:.3g} TFLOP/s"
    return str(v)

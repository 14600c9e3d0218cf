"""NVIDIA's DGX Cloud v25.05.05 runs on GB200 (``validate --group optimum``, ids ``dgxc-v25.05.05-*-gb200-*``) priced
two ways: as the model lays a GB200 NVL72 job out (NVLink domains of 16 trays, 64 GPUs: ``hardware.domains``), and with
NVLink only inside each 4-GPU tray, every byte that crosses a tray on the network, and inside 8-GPU groups (two trays).
The later GB200/GB300 MoE recipes are priced tray-only beside them. The MoE runs (DeepSeek-V3, Llama 4
Maverick) dispatch with NCCL's all-to-all; Nemotron-4 340B runs TP 8 over two trays. Which layout of the fabric the
runs had is not stated in their recipe (benchmarks/RESULTS.md, wave 40).

Run: .venv/bin/python benchmarks/gb200_tray_domain.py   (a few seconds)
"""

from __future__ import annotations

from shardplan.validation.optimum import OptimumRun, load_records_tuned, parse_run
from shardplan.validation.runs import pinned_estimate

TRAY = 4  # GB200 compute tray: 4 GPUs on one board (hardware/systems.py gb200-nvl72 ``gpus_per_tray``)


def error_pct(run: OptimumRun, domain: int | None) -> float:
    """Throughput error of the published layout, positive where the model is faster than measured, with NVLink only
    inside groups of ``domain`` GPUs (None: as the model lays the job out)."""
    system = run.system
    if domain is not None:
        system = system.model_copy(update={"gpus_per_node": domain, "nvlink_domain_gpus": None, "gpus_per_tray": None})
    step = pinned_estimate(run.model, system, run.gpus, run.work, run.layout, run.stage_layers).metrics.step_time_s
    measured = run.work.global_batch * run.work.seq_len / run.gpus / run.measured_tokens_per_s_per_gpu
    return 100.0 * (measured / step - 1.0)


def main() -> None:
    print(f"{'run':48s} {'domain':>6s} {'as laid out':>12s} {'tray only':>10s} {'8 GPUs':>8s}")
    later = []
    for rec in load_records_tuned():
        gb = any(s in rec["id"] for s in ("gb200", "gb300"))
        if not gb:
            continue
        run = parse_run(rec)
        assert isinstance(run, OptimumRun), run
        if not rec["id"].startswith("dgxc-v25.05.05"):
            if run.model.moe is not None and run.gpus > TRAY:
                later.append((rec["id"], run))
            continue
        print(f"{rec['id'][15:]:48s} {run.system.gpus_per_node:6d} {error_pct(run, None):+11.1f}% "
              f"{error_pct(run, TRAY):+9.1f}% {error_pct(run, 2 * TRAY):+7.1f}%")
    print("\nlater GB200/GB300 MoE recipes (Megatron-Bridge, model cards, model zoo), the same two pricings")
    for rid, run in later:
        print(f"{rid[:56]:56s} {error_pct(run, None):+7.1f}% {error_pct(run, TRAY):+8.1f}%")


if __name__ == "__main__":
    main()

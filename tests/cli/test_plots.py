"""Plots (files in each format, the schedule behind the pipeline plot, the install hint without matplotlib) and the
progress display of long solves."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

from shardplan.cli.plots import parse_train_plot, pipeline_schedule

EST = ["estimate", "train", "--model", "gpt3-175b", "--hardware", "dgx-a100-80gb", "--gpus", "64",
       "--global-batch", "64", "--seq-len", "2048", "--tp", "8", "--pp", "8", "--microbatch", "1",
       "--interleave", "3", "--recompute", "selective", "--sequence-parallel"]


@pytest.mark.parametrize(("pp", "m", "v"), [(4, 8, 1), (8, 64, 1), (4, 8, 2), (8, 64, 3), (4, 4, 2), (1, 5, 1)])
def test_schedule_bubble_is_narayanans(pp: int, m: int, v: int) -> None:
    """Equal stages: the step lasts m·(f+b)·(1 + (p−1)/(v·m)) (Narayanan et al. 2021)."""
    f, b = 1.0, 2.0
    boxes = pipeline_schedule(pp, m, v, [f] * pp, [b] * pp)
    assert len(boxes) == 2 * pp * m * v
    span = max(x.end_s for x in boxes)
    assert span == pytest.approx(m * (f + b) * (1 + (pp - 1) / (v * m)))
    for s in range(pp):  # one pass at a time per stage
        mine = sorted((x.start_s, x.end_s) for x in boxes if x.stage == s)
        assert all(a[1] <= b_[0] + 1e-12 for a, b_ in itertools.pairwise(mine))


def test_schedule_respects_dependencies() -> None:
    boxes = {(x.forward, x.stage, x.chunk, x.microbatch): x for x in pipeline_schedule(4, 8, 2, [1.0] * 4, [2.0] * 4)}
    for (fw, s, c, mb), x in boxes.items():
        if fw and s > 0:
            assert x.start_s >= boxes[(True, s - 1, c, mb)].end_s
        if not fw and s < 3:
            assert x.start_s >= boxes[(False, s + 1, c, mb)].end_s


@pytest.mark.parametrize(("spec", "kind"), [("memory.png", "memory"), ("out/pipeline.svg", "pipeline"),
                                            ("pipeline:x.pdf", "pipeline"), ("llama_mem.png", "memory"),
                                            ("chart.png", "memory")])
def test_plot_kind_from_the_name(spec: str, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    assert parse_train_plot(spec)[0] == kind


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_cli_writes_both_plots(run_cli, tmp_path: Path, suffix: str) -> None:
    pytest.importorskip("matplotlib")
    mem, pipe = tmp_path / f"memory{suffix}", tmp_path / f"pipeline{suffix}"
    r = run_cli(*EST, "--plot", str(mem), "--plot", str(pipe), "--json")
    assert r.code == 0, r.err
    assert r.err == "" and r.out.startswith("{")
    head = {".png": b"\x89PNG", ".svg": b"<?xml", ".pdf": b"%PDF"}[suffix]
    for path in (mem, pipe):
        data = path.read_bytes()
        assert data.startswith(head) and len(data) > 5000


def test_png_size_and_pareto(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    from shardplan.cli.plots import pareto_plot

    out = tmp_path / "pareto.png"
    pareto_plot([(8.0, 1200.0), (14.0, 6800.0), (33.0, 17500.0)], out, labels=["TP8 B1", "TP4 B16", "TP2 B128"],
                chosen=1, max_tpot_ms=25)
    h, w = imread(out).shape[:2]
    assert w >= 1000 and h >= 600


@pytest.mark.parametrize(("plot", "message"), [("nowhere/memory.png", "does not exist"), (".", "is a folder"),
                                               ("x" * 300 + ".png", "too long"), ("chart.txt", "must end in")])
def test_bad_plot_file_is_bad_input(run_cli, plot: str, message: str, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = run_cli(*EST, "--plot", plot)
    assert r.code == 2 and message in r.err and r.err.count("\n") == 1


@pytest.mark.parametrize(("name", "kind_opt", "head"), [
    ("x.png", None, b"\x89PNG"), ("chart.svg", "pipeline", b"<?xml"), ("plot", "memory", b"\x89PNG"),
    ("m.jpg", None, b"\xff\xd8")])
def test_any_file_name_is_a_plot(run_cli, tmp_path: Path, name: str, kind_opt: str | None, head: bytes) -> None:
    """A name that says nothing about the kind gets --plot-kind (default memory); a name without a suffix gets PNG."""
    pytest.importorskip("matplotlib")
    out = tmp_path / name
    r = run_cli(*EST, "--plot", str(out), *(["--plot-kind", kind_opt] if kind_opt else []))
    assert r.code == 0, r.err
    assert out.read_bytes().startswith(head)
    assert f"wrote {out}" in r.err


def test_plot_to_dev_full_is_one_line(run_cli) -> None:
    pytest.importorskip("matplotlib")
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    r = run_cli(*EST, "--plot", "/dev/full")
    assert r.code == 2 and r.err.count("\n") == 1 and "cannot write" in r.err


def test_without_matplotlib_says_how_to_get_it(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    r = run_cli(*EST, "--plot", str(tmp_path / "memory.png"))
    assert r.code == 2
    assert r.err.strip().endswith("plots need matplotlib: pip install 'shardplan[plot]'")
    assert r.err.count("\n") == 1 and not (tmp_path / "memory.png").exists()


def _spinner_output(delay_s: float, work_s: float, *, enabled: bool = True) -> str:
    import io
    import time

    from rich.console import Console

    from shardplan.cli.progress import solving

    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True, width=80)
    with solving("planning", enabled=enabled, delay_s=delay_s, console=con):
        time.sleep(work_s)
    return buf.getvalue()


def test_progress_shows_only_for_long_solves() -> None:
    assert "planning" in _spinner_output(0.05, 0.4)
    assert _spinner_output(0.5, 0.0) == ""
    assert _spinner_output(0.0, 0.2, enabled=False) == ""


def test_progress_is_silent_when_piped_or_json(run_cli) -> None:
    r = run_cli("train", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "8", "--global-batch", "64",
                "--seq-len", "4096", "--json")
    assert r.code == 0 and r.err == ""


def test_a_pipeline_too_long_to_draw_is_skipped_with_a_note(run_cli, tmp_path: Path) -> None:
    """PP=4 with 2,048 microbatches is 16,384 passes, over MAX_PIPELINE_PASSES: a note, no file, exit 0."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "pipe.svg"
    r = run_cli("estimate", "train", "-m", "llama-2-7b", "-H", "dgx-h100", "-s", "2048", "-b", "2048", "--tp", "2",
                "--pp", "4", "--gpus", "8", "--plot", str(out), "--plot-kind", "pipeline")
    assert r.code == 0 and "16,384 passes" in r.err and not out.exists()

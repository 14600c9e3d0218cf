"""`shardplan sweep train|infer`: bad input is one line and exit 2 before any planning; JSON, CSV, prices."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardplan.sweep import tabular

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TRAIN = ("sweep", "train", "-m", "llama-3.1-8b", "-H", "dgx-h100", "-g", "8,16", "-b", "32", "-s", "2048", "-j", "1")


def assert_bad_input(r, *words: str) -> None:
    assert r.code == 2
    assert r.out == ""
    assert r.err.count("\n") == 1 and "Traceback" not in r.err
    for w in words:
        assert w in r.err, (w, r.err)


@pytest.fixture
def no_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning any request fails the test: bad input must be caught before the work starts."""
    import shardplan.sweep.execute as ex

    def boom(*_a, **_k):
        raise AssertionError("planning started")

    monkeypatch.setattr(ex, "plan_request", boom)


@pytest.mark.parametrize(("args", "words"), [
    (("-g", ","), ("gpus:", "empty")),
    (("-g", "64:8"), ("gpus:", "start 64 > end 8")),
    (("-g", "8:64:x1"), ("gpus:", "factor")),
    (("-H", "dgx-h100,dgx-h999"), ("hardware:", "dgx-h999")),
    (("-m", "llama-3.1-8b,nope-7b"), ("model:", "nope-7b")),
    (("--tokens", "15Q"), ("tokens:",)),
    (("--deadline", "30d"), ("deadline:", "--tokens")),
    (("--prices", "missing.yaml"), ("prices:", "no such file")),
    (("--csv", "/no/such/dir/x.csv"), ("csv:", "does not exist")),
    (("--plot", "x.txt"), ("plot:",)),
])
def test_bad_input_exit_2_before_work(run_cli, no_planning, args, words):
    assert_bad_input(run_cli(*TRAIN, *args), *words)


def test_missing_price_names_the_hardware(run_cli, no_planning, tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("prices:\n  b200: {usd_per_gpu_hour: 8.6, source: x, read_on: 2026-09-20}\n")
    assert_bad_input(run_cli(*TRAIN, "--prices", str(f)), "prices:", "dgx-h100", "h100-sxm")


def test_infer_needs_lengths(run_cli, no_planning):
    assert_bad_input(run_cli("sweep", "infer", "-m", "llama-3.1-8b", "-H", "dgx-h100"), "prompt-len")


def test_json_csv_and_example_prices(run_cli, tmp_path):
    csv = tmp_path / "rows.csv"
    r = run_cli(*TRAIN, "--tokens", "1T", "--deadline", "400d", "--prices", str(EXAMPLES / "prices.yaml"), "--json",
                "--csv", str(csv))
    assert r.code == 0, r.err
    data = r.json()
    rows = data["points"]
    assert [row["num_gpus"] for row in rows] == [8, 16]
    for row in rows:
        assert {"hardware", "model", "num_gpus", "global_batch", "seq_len", "status", "plan", "metrics",
                "time_to_train_s", "gpu_hours", "cost"} <= set(row)
        assert row["cost"]["usd_per_gpu_hour"] == 6.155  # examples/prices.yaml: CoreWeave HGX H100 $49.24/h ÷ 8
    assert sum(row["deadline_pick"] for row in rows) == 1
    # CSV round trip: the flat table reads back to exactly the same values
    assert tabular.read_csv(csv) == tabular.table(rows)[1]


def test_table_shows_points_and_summary(run_cli):
    r = run_cli(*TRAIN)
    assert r.code == 0, r.err
    assert "2 points, 2 distinct plans (0 infeasible)" in r.out


def test_grid_file_with_command_line_override(run_cli, tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text("model: llama-3.1-8b\nhardware: [dgx-h100]\ngpus: 8:32:x2\nglobal-batch: 32\nseq-len: 2048\n")
    r = run_cli("sweep", "train", "--grid", str(grid), "-g", "16", "-j", "1", "--json")
    assert r.code == 0, r.err
    assert [row["num_gpus"] for row in r.json()["points"]] == [16]  # -g overrides the file's gpus
    grid.write_text("model: llama-3.1-8b\nhardware: dgx-h100\nbogus: 1\n")
    assert_bad_input(run_cli("sweep", "train", "--grid", str(grid)), "grid:", "unknown field 'bogus'")


def test_parquet(run_cli, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "rows.parquet"
    r = run_cli(*TRAIN, "--parquet", str(out), "--json")
    assert r.code == 0, r.err
    _, flat = tabular.table(r.json()["points"])
    assert pq.read_table(out).to_pylist() == flat


def test_missing_extras_are_one_line(run_cli, no_planning, monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import fails as if the extra were not installed
    monkeypatch.setitem(sys.modules, "ray", None)
    assert_bad_input(run_cli(*TRAIN, "--parquet", str(tmp_path / "x.parquet")), "shardplan[sweep]")
    assert_bad_input(run_cli(*TRAIN, "--ray"), "shardplan[ray]")

"""`shardplan calibrate`: bad runs files are one line naming the run and field (exit 2); the written system
file loads everywhere and moves estimates in the direction of the fit."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from shardplan.hardware.spec import Calibration

from .conftest import synthetic_runs


def _write(tmp_path: Path, runs: Any, name: str = "runs.yaml") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"runs": runs}) if name.endswith(".json") else yaml.safe_dump({"runs": runs}))
    return str(path)


def _one(**over: Any) -> dict[str, Any]:
    run = synthetic_runs(Calibration())[0]
    for key, value in over.items():
        section, _, field = key.partition("__")
        if field:
            run[section][field] = value
        else:
            run[section] = value
    return run


@pytest.mark.parametrize(("run", "field", "words"), [
    (_one(model="llama-9z"), "runs[0] (run0).model", "unknown model"),
    (_one(layout={"tp": 2, "pp": 2, "dp": 4}), "runs[0] (run0).layout", "≠ gpus (8)"),
    (_one(measured={"tflops_per_gpu": 1200.0}), "runs[0] (run0).measured.tflops_per_gpu", "above the bf16 peak"),
    (_one(measured={"step_time_s": 0.01}), "runs[0] (run0).measured.step_time_s", "above the bf16 peak"),
    (_one(measured={"peak_memory_gib": 90.0}), "runs[0] (run0).measured.peak_memory_gib", "above the GPU's 79.6 GiB"),
    (_one(measured={"step_time_s": -1.0}), "runs[0] (run0).measured.step_time_s", "positive finite"),
    (_one(measured={"tokens_per_s": 0}), "runs[0] (run0).measured.tokens_per_s", "positive finite"),
    (_one(measured={"step_time_s": math.nan}), "runs[0] (run0).measured.step_time_s", "positive finite"),
    (_one(measured={}), "runs[0] (run0).measured", "needs one of"),
    (_one(gpus=0), "runs[0] (run0).gpus", "greater than or equal to 1"),
])
def test_bad_run_is_one_line_naming_run_and_field(run_cli: Any, tmp_path: Path, run: dict[str, Any], field: str,
                                                  words: str) -> None:
    res = run_cli("calibrate", "--hardware", "dgx-h100", "--runs", _write(tmp_path, [run], "runs.json"))
    assert res.code == 2 and res.out == ""
    assert res.err.count("\n") == 1 and res.err.startswith(f"shardplan: error: {field}: ")
    assert words in res.err


def test_second_run_is_named_by_index(run_cli: Any, tmp_path: Path) -> None:
    good, bad = _one(), _one(id="big-job", layout={"tp": 3})
    res = run_cli("calibrate", "-H", "dgx-h100", "--runs", _write(tmp_path, [good, bad]))
    assert res.code == 2 and "runs[1] (big-job).layout" in res.err


def test_empty_runs_list(run_cli: Any, tmp_path: Path) -> None:
    res = run_cli("calibrate", "-H", "dgx-h100", "--runs", _write(tmp_path, []))
    assert res.code == 2 and "runs: the list is empty" in res.err


def test_calibrated_file_loads_and_slows_estimates(run_cli: Any, tmp_path: Path) -> None:
    runs = synthetic_runs(Calibration(gemm_scale=0.8))[:1]
    out = tmp_path / "my-cluster.yaml"
    res = run_cli("calibrate", "-H", "dgx-h100", "--runs", _write(tmp_path, runs), "-o", str(out), "--json")
    assert res.code == 0, res.err
    fit = res.json()
    assert fit["fitted"] == ["gemm_scale"] and fit["calibration"]["gemm_scale"] == pytest.approx(0.8, rel=0.01)
    data = yaml.safe_load(out.read_text())
    assert data["base"] == "dgx-h100" and data["calibration"]["runs"] == [fit["runs"][0]["fingerprint"]]
    args = ["-m", "llama-3.1-70b", "--gpus", "16", "-b", "32", "-s", "4096", "--tp", "8", "--pp", "2", "--json"]
    base = run_cli("estimate", "train", "-H", "dgx-h100", *args).json()["metrics"]
    cal = run_cli("estimate", "train", "-H", str(out), *args).json()["metrics"]
    # a slower GEMM rate: a longer step, but never by more than 1/0.8 (not everything is a GEMM)
    assert base["step_time_s"] < cal["step_time_s"] < base["step_time_s"] / 0.8
    assert cal["step_time_s_range"][0] < cal["step_time_s"] < cal["step_time_s_range"][1]
    # the same file plans, serves and offloads
    assert run_cli("train", "-H", str(out), "-m", "llama-3.1-8b", "-b", "64", "-s", "4096", "--json").code == 0
    assert run_cli("infer", "-H", str(out), "-m", "llama-3.1-8b", "--prompt-len", "512", "--gen-len", "64",
                   "--json").code == 0
    assert run_cli("hardware", "show", str(out), "--json").code == 0


def test_json_output_is_the_api_object(run_cli: Any, tmp_path: Path) -> None:
    import shardplan

    runs = synthetic_runs(Calibration(gemm_scale=0.9))[:2]
    path = _write(tmp_path, runs)
    cli = run_cli("calibrate", "-H", "dgx-h100", "--runs", path, "--json").json()
    api = shardplan.calibrate("dgx-h100", path).model_dump(mode="json")
    assert cli == api

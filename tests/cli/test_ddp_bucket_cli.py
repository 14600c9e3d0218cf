"""A recipe's gradient bucket size (``software.ddp_bucket_params`` in a system file, Megatron-LM --ddp-bucket-size):
priced by ``estimate train``, launched by the Megatron export, and bad values refused on one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardplan.costmodel.training.evaluate import estimate_training
from shardplan.costmodel.training.layout import TrainLayout, TrainWorkload
from shardplan.hardware import get_system
from shardplan.models import get_model

FLAGS = Path(__file__).resolve().parents[1] / "data" / "export"
ARGS = ("-m", "llama-3.1-8b", "-b", "16", "-s", "4096", "-g", "16", "--dp", "16", "--zero", "1", "--dtype", "fp8")


def _file(tmp_path: Path, size: object) -> str:
    path = tmp_path / f"h100-{size}.json"
    path.write_text(json.dumps({"base": "dgx-h100", "name": "h100-buckets", "software": {"ddp_bucket_params": size}}))
    return str(path)


def test_estimate_prices_the_files_bucket(run_cli, tmp_path: Path) -> None:
    base = get_system("dgx-h100")
    system = base.model_copy(update={"software": base.software.model_copy(update={"ddp_bucket_params": 768_000_000})})
    work, lay = TrainWorkload(seq_len=4096, global_batch=16), TrainLayout(dp=16, zero_stage=1)
    want = estimate_training(get_model("llama-3.1-8b"), system, 16, work, lay).metrics
    default = estimate_training(get_model("llama-3.1-8b"), base, 16, work, lay).metrics
    r = run_cli("estimate", "train", "-H", _file(tmp_path, 768_000_000), *ARGS[:-2], "--json")  # bf16
    assert r.code == 0, r.err
    assert r.json()["metrics"]["dp_exposed_s"] == pytest.approx(want.dp_exposed_s, rel=1e-9)
    # 16-bit weights: the last bucket is 1.22B parameters at 768M (as Nebius's MLPerf log prints it), the
    # embedding's 525M alone at Megatron's 40M default
    assert want.dp_exposed_s > default.dp_exposed_s


def test_megatron_export_launches_the_bucket(run_cli, tmp_path: Path) -> None:
    assert json.loads((FLAGS / "megatron_flags.json").read_text())["flags"]["--ddp-bucket-size"] == "value"
    r = run_cli("train", "-H", _file(tmp_path, 768_000_000), *ARGS, "--export", "megatron")
    assert r.code == 0 and "--ddp-bucket-size 768000000\n" in r.out, r.err
    r = run_cli("train", "-H", "dgx-h100", *ARGS, "--export", "megatron")  # Megatron's default: no flag
    assert r.code == 0 and "--ddp-bucket-size" not in r.out


@pytest.mark.parametrize("size", [0, -5, "big"])
def test_a_bad_bucket_is_one_line(run_cli, tmp_path: Path, size: object) -> None:
    r = run_cli("estimate", "train", "-H", _file(tmp_path, size), *ARGS)
    assert r.code == 2 and "ddp_bucket_params" in r.err and len(r.err.strip().splitlines()) == 1, r.err

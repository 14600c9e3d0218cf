"""`shardplan hardware list|show`: tables, --json shapes, files, and bad input as exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardplan.hardware import GPUS, SYSTEMS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hardware"


def assert_bad_input(r, *words: str) -> None:
    assert r.code == 2
    assert r.out == ""
    assert r.err.count("\n") == 1 and "Traceback" not in r.err
    for w in words:
        assert w in r.err, (w, r.err)


def test_list_shows_every_gpu_and_system(run_cli):
    r = run_cli("hardware", "list")
    assert r.code == 0
    for name in [*GPUS, *SYSTEMS]:
        assert name in r.out


def test_list_json(run_cli):
    r = run_cli("hardware", "list", "--json")
    assert r.code == 0
    data = r.json()
    assert set(data) == {"gpus", "systems"}
    assert [g["name"] for g in data["gpus"]] == list(GPUS)
    assert [s["name"] for s in data["systems"]] == list(SYSTEMS)
    h100 = next(g for g in data["gpus"] if g["name"] == "h100-sxm")
    assert h100["peak_flops"]["bf16"] == pytest.approx(989.4e12)
    nvl = next(s for s in data["systems"] if s["name"] == "gb200-nvl72")
    assert nvl["gpus_per_node"] == 72 and nvl["gpu"] == "gb200"


def test_show_system_json(run_cli):
    r = run_cli("hardware", "show", "dgx-h100", "--json")
    assert r.code == 0
    d = r.json()
    assert d["name"] == "dgx-h100" and d["gpu"]["name"] == "h100-sxm" and d["gpus_per_node"] == 8
    assert d["intra_node"]["bandwidth_bytes_per_s"] == pytest.approx(450e9)


def test_show_system_table(run_cli):
    r = run_cli("hardware", "show", "mi300x-8")
    assert r.code == 0 and "mi300x-8" in r.out and "intra_node.bandwidth_bytes_per_s" in r.out


def test_show_gpu_json(run_cli):
    r = run_cli("hardware", "show", "mi300x", "--json")
    assert r.code == 0
    d = r.json()
    assert d["name"] == "mi300x" and d["vendor"] == "amd" and "fp8" in d["peak_flops"]


@pytest.mark.parametrize("fname", ["my-cluster.yaml", "dgx-h100-4gpu.yaml"])
def test_show_file(run_cli, fname: str):
    r = run_cli("hardware", "show", str(EXAMPLES / fname), "--json")
    assert r.code == 0
    assert r.json()["name"] == Path(fname).stem
    assert run_cli("hardware", "show", str(EXAMPLES / fname)).code == 0


def test_unknown_name(run_cli):
    assert_bad_input(run_cli("hardware", "show", "dgx-h10"), "dgx-h10", "dgx-h100")


def test_missing_file(run_cli, tmp_path: Path):
    assert_bad_input(run_cli("hardware", "show", str(tmp_path / "none.yaml")), "no such file")


def test_invalid_file(run_cli, tmp_path: Path):
    p = tmp_path / "bad.yaml"
    p.write_text("base: dgx-h100\ngpus_per_node: -1\n")
    assert_bad_input(run_cli("hardware", "show", str(p)), "gpus_per_node")
    p.write_text("base: dgx-h100\n  oops: [\n")
    assert_bad_input(run_cli("hardware", "show", str(p)), "not valid YAML")


def test_unknown_gpu_in_file(run_cli, tmp_path: Path):
    p = tmp_path / "g.yaml"
    p.write_text("base: dgx-h100\ngpu: h100-sx\n")
    assert_bad_input(run_cli("hardware", "show", str(p)), "gpu", "h100-sxm")

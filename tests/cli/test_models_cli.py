"""`shardplan models list|show`: every preset listed, JSON shapes, config.json files and folders, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from shardplan.models import MODELS, ModelSpec

CONFIGS = Path(__file__).parent.parent / "data" / "hf_configs"


def assert_bad_input(r, *needles: str) -> None:
    """Exit 2, nothing on stdout, exactly one line on stderr, no traceback."""
    assert r.code == 2
    assert r.out == ""
    assert r.err.count("\n") == 1 and r.err.startswith("shardplan: error: ")
    assert "Traceback" not in r.err
    for n in needles:
        assert n in r.err


def test_list_shows_every_preset(run_cli):
    r = run_cli("models", "list")
    assert r.code == 0
    assert len(MODELS) >= 28
    for name in MODELS:
        assert name in r.out
    assert f"{len(MODELS)} presets" in r.out


def test_list_json(run_cli):
    r = run_cli("models", "list", "--json")
    assert r.code == 0
    models = r.json()["models"]
    assert [m["name"] for m in models] == list(MODELS)
    mixtral = next(m for m in models if m["name"] == "mixtral-8x7b")
    assert mixtral["total_params"] == MODELS["mixtral-8x7b"].total_params
    assert mixtral["active_params"] < mixtral["total_params"]


@pytest.mark.parametrize("name", ["llama-3.1-405b", "deepseek-v3", "qwen3-30b-a3b"])
def test_show_json_has_every_spec_field_and_both_counts(run_cli, name: str):
    r = run_cli("models", "show", name, "--json")
    assert r.code == 0
    data = r.json()
    assert set(ModelSpec.model_fields) <= set(data)
    m = MODELS[name]
    assert (data["name"], data["total_params"], data["active_params"]) == (name, m.total_params, m.active_params)
    assert (data["active_params"] == data["total_params"]) == (m.moe is None)


def test_show_renders_the_breakdown(run_cli):
    r = run_cli("models", "show", "deepseek-v3")
    assert r.code == 0
    assert "Parameters by component" in r.out and "mlp/experts" in r.out and "MLA" in r.out


def test_show_names_a_clamped_activation(run_cli):
    """gpt-oss clamps the gate and up halves of its GLU at 7 (config.json swiglu_limit); Llama does not."""
    r = run_cli("models", "show", "gpt-oss-120b")
    assert r.code == 0 and "swiglu (gate ≤ 7, up within ±7)" in r.out
    assert "gate ≤" not in run_cli("models", "show", "llama-3.1-8b").out


def test_show_config_file_and_folder(run_cli, tmp_path: Path):
    r = run_cli("models", "show", str(CONFIGS / "mixtral.json"), "--json")
    assert r.code == 0
    assert r.json()["total_params"] == MODELS["mixtral-8x7b"].total_params
    assert r.json()["name"] == "mixtral"

    folder = tmp_path / "Mixtral-8x7B-v0.1"
    folder.mkdir()
    shutil.copy(CONFIGS / "mixtral.json", folder / "config.json")
    r = run_cli("models", "show", str(folder), "--json")
    assert r.code == 0
    assert r.json()["name"] == "Mixtral-8x7B-v0.1"
    assert r.json()["active_params"] == MODELS["mixtral-8x7b"].active_params


def test_unknown_name_suggests_close_ones(run_cli):
    assert_bad_input(run_cli("models", "show", "llama-3.1-7b"), "Did you mean", "llama-3.1-8b")


def test_missing_file_and_folder_without_config(run_cli, tmp_path: Path):
    assert_bad_input(run_cli("models", "show", str(tmp_path / "nope.json")), "no such file")
    assert_bad_input(run_cli("models", "show", str(tmp_path)), "cannot read", "config.json")


def test_invalid_json(run_cli, tmp_path: Path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama",')
    assert_bad_input(run_cli("models", "show", str(bad)), "not valid JSON")


def test_unknown_model_type(run_cli, tmp_path: Path):
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"model_type": "mamba", "hidden_size": 768}))
    assert_bad_input(run_cli("models", "show", str(f), "--json"), "model_type 'mamba' is not supported", "llama")


def test_missing_key(run_cli, tmp_path: Path):
    cfg = json.loads((CONFIGS / "llama.json").read_text())
    del cfg["num_hidden_layers"]
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    assert_bad_input(run_cli("models", "show", str(f)), "'num_hidden_layers' is missing")


def test_a_config_json_is_named_after_its_folder_or_hub_id(run_cli, tmp_path: Path) -> None:
    cfg = json.loads((CONFIGS / "deepseek_v3.json").read_text())
    cfg.pop("_name_or_path", None)
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    assert run_cli("models", "show", str(folder), "--json").json()["name"] == "my-model"
    assert run_cli("models", "show", str(folder / "config.json"), "--json").json()["name"] == "my-model"
    (folder / "config.json").write_text(json.dumps(cfg | {"_name_or_path": "acme/Tiny-7B"}))
    assert run_cli("models", "show", str(folder / "config.json"), "--json").json()["name"] == "Tiny-7B"
    (tmp_path / "other.json").write_text(json.dumps(cfg))
    assert run_cli("models", "show", str(tmp_path / "other.json"), "--json").json()["name"] == "other"

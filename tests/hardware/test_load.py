"""``resolve_system``: presets, GPU names, example files, overrides, units, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardplan.errors import ConfigFileError, ShardplanError, UnknownNameError
from shardplan.hardware import GPUS, SYSTEMS, resolve_system
from shardplan.units import GB, GiB, TiB

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hardware"


def write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_preset_and_gpu_names():
    assert resolve_system("dgx-h100") is SYSTEMS["dgx-h100"]
    s = resolve_system("H200-SXM")
    assert s.gpu is GPUS["h200-sxm"] and s.gpus_per_node == 8


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_file_loads(path: Path):
    s = resolve_system(str(path))
    assert s.name == path.stem


def test_full_example_file():
    s = resolve_system(str(EXAMPLES / "my-cluster.yaml"))
    assert s.gpu.name == "h100-sxm-inhouse" and s.gpus_per_node == 8
    assert s.gpu.memory_bytes == 81559 * 2**20  # "81559MiB"
    assert s.intra_node.bandwidth_bytes_per_s == 450 * GB  # "450GB/s"
    assert s.host_memory_bytes == TiB and s.max_nodes == 16
    assert s.software.step_overhead_fraction == 0.02


def test_base_example_overrides_a_few_fields():
    s = resolve_system(str(EXAMPLES / "dgx-h100-4gpu.yaml"))
    base = SYSTEMS["dgx-h100"]
    assert s.gpus_per_node == 4 and s.host_memory_bytes == TiB
    assert s.gpu == base.gpu and s.intra_node == base.intra_node and s.inter_node == base.inter_node


def test_base_with_gpu_by_name_replaces_the_gpu(tmp_path: Path):
    s = resolve_system(write(tmp_path, "x.yaml", "base: dgx-h100\ngpu: h200-sxm\n"))
    assert s.gpu == GPUS["h200-sxm"] and s.name == "x"


def test_gpu_with_its_own_base_and_overrides(tmp_path: Path):
    s = resolve_system(write(tmp_path, "x.yaml", "base: dgx-h100\ngpu: {base: a100-sxm-80gb, memory_bytes: 64GiB}\n"))
    assert s.gpu.memory_bytes == 64 * GiB
    assert s.gpu.peak_flops == GPUS["a100-sxm-80gb"].peak_flops, "the GPU's base wins over the system's GPU"


def test_partial_gpu_mapping_overrides_the_base_systems_gpu(tmp_path: Path):
    s = resolve_system(write(tmp_path, "x.yaml", "base: dgx-h100\ngpu: {attention_efficiency: 0.5}\n"))
    assert s.gpu.attention_efficiency == 0.5 and s.gpu.peak_flops == GPUS["h100-sxm"].peak_flops


def test_json_file_and_gpu_by_name(tmp_path: Path):
    data = {
        "gpu": "l40s", "gpus_per_node": 4,
        "intra_node": {"bandwidth_bytes_per_s": "31.5GB/s", "latency_s": 1.5e-5},
        "pcie": {"bandwidth_bytes_per_s": 32e9, "latency_s": 1e-5},
        "host_memory_bytes": "512GiB", "disk_bytes": "3.84TB",
    }
    s = resolve_system(write(tmp_path, "box.json", json.dumps(data)))
    assert s.name == "box" and s.gpu is not None and s.gpu.name == "l40s"
    assert s.host_memory_bytes == 512 * GiB and s.disk_bytes == 3.84e12 and s.inter_node is None


ERRORS = [
    # (file name, content, exception type, words the one-line message must contain)
    ("bad.yaml", "base: dgx-h100\n  x: [\n", ConfigFileError, ["not valid YAML", "line 2"]),
    ("bad.json", '{"base": "dgx-h100",}', ConfigFileError, ["not valid JSON"]),
    ("list.yaml", "- 1\n- 2\n", ConfigFileError, ["mapping"]),
    ("empty.yaml", "", ConfigFileError, ["mapping"]),
    ("type.yaml", "base: dgx-h100\ngpus_per_node: four\n", ConfigFileError, ["gpus_per_node", "integer"]),
    ("extra.yaml", "base: dgx-h100\ncolour: red\n", ConfigFileError, ["colour", "not permitted"]),
    ("nested.yaml", "base: dgx-h100\nintra_node: {speed: 1}\n", ConfigFileError, ["intra_node.speed"]),
    ("neg.yaml", "base: dgx-h100\nhost_memory_bytes: -5\n", ConfigFileError, ["host_memory_bytes", "1048576"]),
    ("negeff.yaml", "base: dgx-h100\npcie: {efficiency: -0.5}\n", ConfigFileError, ["pcie.efficiency"]),
    ("size.yaml", "base: dgx-h100\nhost_memory_bytes: 80 gigs\n", ShardplanError, ["host_memory_bytes", "not a size"]),
    ("gpu.yaml", "base: dgx-h100\ngpu: h100-sx\n", UnknownNameError, ["gpu", "'h100-sx'", "h100-sxm"]),
    ("gpubase.yaml", "gpu: {base: a100-sxm-80}\n", UnknownNameError, ["gpu.base", "'a100-sxm-80'", "a100-sxm-80gb"]),
    ("base.yaml", "base: dgx-h10\n", UnknownNameError, ["base", "'dgx-h10'", "dgx-h100"]),
    ("baselist.yaml", "base: [dgx-h100]\n", ConfigFileError, ["base", "preset name"]),
    ("missing.yaml", "gpu: h100-sxm\n", ConfigFileError, ["gpus_per_node", "required"]),
    ("dtype.yaml", "base: dgx-h100\ngpu: {peak_flops: {fp9: 1}}\n", ConfigFileError, ["gpu.peak_flops", "fp9"]),
]


@pytest.mark.parametrize(("fname", "text", "exc", "words"), ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_files_raise_one_line_errors_naming_the_field(tmp_path: Path, fname, text, exc, words):
    path = write(tmp_path, fname, text)
    with pytest.raises(exc) as e:
        resolve_system(path)
    msg = str(e.value)
    assert "\n" not in msg
    assert fname in msg
    for w in words:
        assert w in msg, (w, msg)


def test_missing_file_and_directory(tmp_path: Path):
    with pytest.raises(ConfigFileError, match="no such file"):
        resolve_system(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigFileError, match="directory"):
        resolve_system(str(tmp_path))


def test_unknown_name_suggests_systems_and_gpus():
    with pytest.raises(UnknownNameError) as e:
        resolve_system("mi300x-4")
    assert "mi300x-8" in str(e.value) and str(e.value).startswith("hardware:")

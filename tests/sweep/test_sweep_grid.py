"""Grid syntax: lists, arithmetic and geometric ranges, token counts, durations, and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardplan.errors import ShardplanError
from shardplan.sweep.grid import (
    MAX_POINTS,
    check_size,
    load_grid_file,
    parse_count,
    parse_duration,
    parse_ints,
    parse_names,
    parse_rates,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("512,1024,2048,4096", [512, 1024, 2048, 4096]),
    ("64:1024:x2", [64, 128, 256, 512, 1024]),
    ("64:1000:x2", [64, 128, 256, 512]),  # stops before passing the end
    ("8:64:8", [8, 16, 24, 32, 40, 48, 56, 64]),
    ("1:4", [1, 2, 3, 4]),
    ("3:27:x3", [3, 9, 27]),
    ("8, 16:64:x2, 32", [8, 16, 32, 64]),  # overlapping items: first-seen order, no repeats
    ("7", [7]),
])
def test_int_lists_and_ranges(text, expected):
    assert parse_ints(text, field="gpus") == expected


def test_yaml_lists_mix_numbers_and_ranges():
    assert parse_ints([8, "16:32:x2", 8], field="gpus") == [8, 16, 32]
    assert parse_ints(64, field="gpus") == [64]


@pytest.mark.parametrize(("text", "words"), [
    ("", "empty"),
    ("8,,16", "empty item"),
    ("8,", "empty item"),
    ("64:8", "start 64 > end 8"),
    ("8:64:x1", "factor must be ≥ 2"),
    ("8:64:0", "≥ 1"),
    ("0,8", "≥ 1"),
    ("eight", "not an integer"),
    ("8:16:32:64", "not a range"),
    ("1:100000", "more than"),
])
def test_bad_int_lists_name_the_field(text, words):
    with pytest.raises(ShardplanError) as e:
        parse_ints(text, field="gpus")
    assert str(e.value).startswith("gpus: ")
    assert words in str(e.value)


def test_names():
    assert parse_names(" dgx-h100, dgx-b200 ,dgx-h100", field="hardware") == ["dgx-h100", "dgx-b200"]
    with pytest.raises(ShardplanError, match=r"hardware: .*empty item"):
        parse_names("dgx-h100,,dgx-b200", field="hardware")


@pytest.mark.parametrize(("text", "value"), [
    ("15T", 15e12), ("300B", 300e9), ("2.5M", 2.5e6), ("40k", 40e3), ("1e9", 1e9), (7, 7.0), ("15 T", 15e12),
])
def test_token_counts(text, value):
    assert parse_count(text, field="tokens") == value


@pytest.mark.parametrize("text", ["15X", "T", "-3T", "0", "fifteen"])
def test_bad_token_counts(text):
    with pytest.raises(ShardplanError, match=r"^tokens: "):
        parse_count(text, field="tokens")


@pytest.mark.parametrize(("text", "seconds"), [
    ("30d", 30 * 86400), ("720h", 720 * 3600), ("90m", 5400), ("90min", 5400), ("3600s", 3600), ("2w", 14 * 86400),
    ("120", 120),
])
def test_durations(text, seconds):
    assert parse_duration(text, field="deadline") == seconds


def test_rates_and_bad_rates():
    assert parse_rates("5,10,2.5", field="request-rate") == [5.0, 10.0, 2.5]
    with pytest.raises(ShardplanError, match=r"request-rate: .*> 0"):
        parse_rates("5,0", field="request-rate")


def test_grid_size_limits():
    assert check_size({"a": [1, 2], "b": [1, 2, 3]}) == 6
    with pytest.raises(ShardplanError, match="empty"):
        check_size({"a": [1], "gpus": []})
    with pytest.raises(ShardplanError, match=f"at most {MAX_POINTS:,}"):
        check_size({"a": list(range(1000)), "b": list(range(1000))})


def test_grid_file_keys(tmp_path: Path):
    f = tmp_path / "grid.yaml"
    f.write_text("model: llama-3.1-8b\nglobal-batch: [64, 128]\ngpus: 8:64:x2\n")
    assert load_grid_file(f, ("model", "global_batch", "gpus")) == {
        "model": "llama-3.1-8b", "global_batch": [64, 128], "gpus": "8:64:x2"}
    f.write_text("modle: llama-3.1-8b\n")
    with pytest.raises(ShardplanError, match="unknown field 'modle'; allowed: model, gpus"):
        load_grid_file(f, ("model", "gpus"))

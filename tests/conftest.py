"""Shared test fixtures: run the CLI in-process and capture its streams."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import settings

# The same examples on every run, so a CI result can be reproduced; explore with ``--hypothesis-seed N``.
settings.register_profile("shardplan", derandomize=True, database=None)
settings.load_profile("shardplan")


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Call ``shardplan`` with a list of arguments; returns exit code, stdout and stderr."""
    from shardplan.cli import main

    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run

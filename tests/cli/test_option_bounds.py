"""Every integer option has an upper bound and every float option refuses nan/inf, before any work (issue 15)."""

from __future__ import annotations

import math

import pytest


def _params():
    import typer

    from shardplan.cli import app

    root = typer.main.get_command(app)

    def walk(cmd, path):
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])
        for p in getattr(cmd, "params", []):
            yield " ".join(path), p

    return list(walk(root, []))


PARAMS = _params()


def _of(kind: type) -> list[tuple[str, object]]:
    return [(c, p) for c, p in PARAMS if p.type_descriptor.annotation is kind]


def test_the_walk_finds_the_options() -> None:
    assert len(_of(int)) >= 40 and len(_of(float)) >= 5  # train, infer, offload and their estimates


@pytest.mark.parametrize(("cmd", "param"), _of(int), ids=lambda x: x if isinstance(x, str) else x.name)
def test_every_integer_option_has_an_upper_bound(cmd: str, param) -> None:
    assert param.max is not None, f"{cmd} {param.opts}: no upper bound"
    assert param.max <= 2**24, f"{cmd} {param.opts}: bound {param.max} above 2^24"


@pytest.mark.parametrize(("cmd", "param"), _of(float), ids=lambda x: x if isinstance(x, str) else x.name)
def test_every_float_option_refuses_non_finite_values(run_cli, cmd: str, param) -> None:
    assert param.max is not None and math.isfinite(param.max)
    for bad in ("nan", "inf"):
        r = run_cli(*cmd.split(), param.opts[0], bad)
        assert r.code == 2 and r.err.count("\n") == 1 and param.opts[0] in r.err, (cmd, param.opts, bad, r.err)

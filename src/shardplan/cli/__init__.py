"""Command-line interface: parse, call one library function, render (rich) or print JSON.

``main`` is the console-script entry point. It turns user errors (``ShardplanError``, bad options)
into one line on stderr and exit code 2, and anything unexpected into exit code 1.
"""

from __future__ import annotations

import os
import sys

import typer

from shardplan import __version__
from shardplan.cli import (  # noqa: F401  (importing registers the commands)
    calibrate_cmd,
    catalog_cmds,
    infer_cmds,
    notes,
    offload_cmds,
    sweep_cmds,
    train_cmds,
    validate_cmd,
)
from shardplan.cli._app import app
from shardplan.errors import ShardplanError


def _version(value: bool) -> None:
    if value:
        print(f"shardplan {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Exact LLM parallelism planning for training, serving and offloading."""


def _one_line(msg: str) -> str:
    return " ".join(msg.split())


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code (0 result, 2 bad input, 1 internal error)."""
    notes.flush(ok=False)
    try:
        rv = app(args=argv, prog_name="shardplan", standalone_mode=False)
        notes.flush(ok=rv in (None, 0))
    except ShardplanError as e:
        notes.flush(ok=False)
        print(f"shardplan: error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except Exception as e:
        notes.flush(ok=False)
        # typer ≥ 0.29 vendors click (typer._click); match its exception classes by name.
        kinds = {c.__name__ for c in type(e).__mro__}
        if "UsageError" in kinds:
            print(f"shardplan: error: {_one_line(e.format_message())}", file=sys.stderr)  # type: ignore[attr-defined]
            return 2
        if "Abort" in kinds:
            print("shardplan: aborted", file=sys.stderr)
            return 1
        if os.environ.get("SHARDPLAN_DEBUG"):
            raise
        print(f"shardplan: internal error: {type(e).__name__}: {_one_line(str(e))} "
              "(set SHARDPLAN_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())

"""The README's example outputs, regenerated from the tool itself so that they cannot drift.

A block in README.md between ``<!-- example: ARGS [| KEEP] -->`` and ``<!-- /example -->`` holds the output of
``shardplan ARGS`` (run in-process at 120 columns). ``KEEP`` selects lines: ``head N``, or ``grep A|B`` (lines
containing any of the words). ``python -m tests.readme_examples`` (from the repository root) rewrites every
block; ``tests/test_readme.py`` fails when a block differs from what the tool prints now, wall-clock figures
aside.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"<!-- example: (?P<spec>.+?) -->\n```\n(?P<body>.*?)```\n<!-- /example -->", re.S)
# Solver wall-clock figures differ run to run: on the "CP-SAT: ..." line, every duration ("in 868.3 ms").
_CLOCK = re.compile(r"[0-9][0-9.,]* ?(ms|s|µs)\b")


def run(args: list[str]) -> str:
    """``shardplan ARGS`` in-process: stdout then stderr, as a terminal shows them."""
    from shardplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "120"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(args)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return out.getvalue() + err.getvalue()


def render(spec: str) -> str:
    """The block body for one ``ARGS [| KEEP]`` spec: the command line, then the selected output lines."""
    args_text, _, keep = spec.partition(" | ")
    lines = [ln.rstrip() for ln in run(shlex.split(args_text)).splitlines()]
    keep = keep.strip()
    if keep.startswith("head "):
        lines = lines[: int(keep.split()[1])]
    elif keep.startswith("grep "):
        words = keep.removeprefix("grep ").split("|")
        lines = [ln for ln in lines if any(w in ln for w in words)]
    return "$ shardplan " + args_text + "\n" + "\n".join(lines) + "\n"


def masked(text: str) -> str:
    """The text with the solver line cut to its status (its timings vary) and its wrapped tail dropped (a timing's
    width moves where the terminal wraps the rest of that line)."""
    out: list[str] = []
    tail = False
    for ln in text.splitlines():
        if tail and ln[:1].islower():
            continue
        tail = "CP-SAT" in ln
        out.append(_CLOCK.sub("<t>", ln.split(";")[0]) if tail else ln)
    return "\n".join(out)


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m["spec"], m["body"]) for m in BLOCK.finditer(text)]


def update() -> None:
    text = README.read_text()
    new = BLOCK.sub(lambda m: f"<!-- example: {m['spec']} -->\n```\n{render(m['spec'])}```\n<!-- /example -->", text)
    README.write_text(new)
    print(f"{len(blocks(new))} README example(s) rewritten")


if __name__ == "__main__":
    update()

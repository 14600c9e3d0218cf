"""A spinner on stderr for solves that take more than a second (never under ``--json`` or when piped).

The planner does not know about it: the CLI wraps the one library call in ``solving(...)``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

DELAY_S = 1.0
"""Solves shorter than this show nothing."""


class _Elapsed:
    """Spinner text with the running time, re-rendered on every refresh."""

    def __init__(self, message: str, t0: float) -> None:
        self.message, self.t0 = message, t0

    def __rich__(self) -> str:
        return f"{self.message} {time.perf_counter() - self.t0:.1f} s"


@contextmanager
def solving(message: str, *, enabled: bool = True, delay_s: float = DELAY_S, console: Any = None) -> Iterator[None]:
    """Show ``message`` with a spinner and elapsed time on stderr if the block runs longer than ``delay_s``.

    Disabled when ``enabled`` is False (``--json``) or stderr is not a terminal, unless a ``console`` is given.
    """
    if console is None:
        from rich.console import Console

        console = Console(stderr=True)
        enabled = enabled and console.is_terminal
    if not enabled:
        yield
        return
    t0 = time.perf_counter()
    lock = threading.Lock()
    state: dict[str, Any] = {"status": None, "done": False}

    def start() -> None:
        with lock:
            if not state["done"]:
                state["status"] = console.status(_Elapsed(message, t0), spinner="dots")
                state["status"].start()

    timer = threading.Timer(delay_s, start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            if state["status"] is not None:
                state["status"].stop()

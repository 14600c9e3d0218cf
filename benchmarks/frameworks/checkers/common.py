"""What every checker shares: the framework's error as one line, and the stdin → stdout loop over exports.

Checkers run as scripts inside their framework's environment, so this module is imported from the script's folder.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable


def framework_error(e: BaseException, markers: tuple[str, ...], *, always: bool = False,
                    kinds: tuple[type[BaseException], ...] = (AssertionError,)) -> str:
    """``Type: message`` on one line (600 characters at most), with the framework's innermost frame (a file path
    containing one of ``markers``) when the message alone says little (``kinds`` or empty) or ``always``."""
    msg = f"{type(e).__name__}: {e}".strip()
    frames = [f for f in traceback.extract_tb(e.__traceback__) if any(m in f.filename for m in markers)]
    if frames and (always or isinstance(e, kinds) or not str(e)):
        msg += f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}: {frames[-1].line})"
    return " ".join(msg.split())[:600]


def run(check: Callable[[dict], dict], fmt: str, error: Callable[[BaseException], str],
        entries: list[dict] | None = None) -> None:
    """Check every export entry (read from stdin unless given); print one JSON list of results (an entry that raises
    outside the framework's own checks is an ``error`` result)."""
    results = []
    for entry in json.load(sys.stdin) if entries is None else entries:
        try:
            results.append(check(entry))
        except Exception as e:
            results.append({"case": entry["case"], "format": fmt, "status": "error", "message": error(e)})
    print(json.dumps(results, default=str))

"""User-facing errors. A leaf module: it imports nothing from the package.

Every error a user can cause is a ``ShardplanError`` (a ``ValueError``): the CLI prints its one-line
message and exits with code 2. Anything else escaping to the CLI is an internal error (exit 1).
An infeasible plan is *not* an error: it is a result with ``status == "infeasible"``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


class ShardplanError(ValueError):
    """Bad input: the message names the field and what is allowed."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def __str__(self) -> str:
        msg = super().__str__()
        return f"{self.field}: {msg}" if self.field and not msg.startswith(f"{self.field}:") else msg


class UnknownNameError(ShardplanError):
    """A preset name that is not in a catalog; the message suggests close matches."""

    def __init__(self, kind: str, name: str, known: Iterable[str], *, field: str | None = None,
                 listing: str = "") -> None:
        known = sorted(known)
        close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        where = f" ({listing} lists all {len(known)})" if listing else ""
        super().__init__(f"unknown {kind} '{name}'.{hint}{where}", field=field)


class ConfigFileError(ShardplanError):
    """A file given by the user could not be read or does not hold a valid description."""


def build(cls: Any, *, dashed: bool = False, **values: Any) -> Any:
    """``cls(**values)`` for a pydantic model, its first validation error turned into one ``ShardplanError``
    naming the field (``dashed``: as a command-line option spells it, ``seq-len``)."""
    from pydantic import ValidationError

    try:
        return cls(**values)
    except ValidationError as err:
        first_err = err.errors()[0]
        msg = first_err["msg"].removeprefix("Value error, ")
        first = msg.split(" ", 1)[0]  # cross-field validators name the field first ("dtype must be …")
        field = ".".join(str(x) for x in first_err["loc"]) or (first if first in cls.model_fields else cls.__name__)
        raise ShardplanError(msg, field=field.replace("_", "-") if dashed else field) from None

"""The parts every result schema shares (estimates and plans of all three jobs)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Status = Literal["optimal", "feasible", "infeasible"]


class Out(BaseModel):
    """A frozen, strict output record (what the CLI renders and ``--json`` prints)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ResultHead(Out):
    """The head of every result: status, and on ``infeasible`` the binding resource and fixes."""

    status: Status = Field(description="optimal / feasible, or infeasible (does not fit: a result, not an error).")
    reason: str | None = Field(None, description="On infeasible: one sentence naming the binding resource.")
    suggestions: list[str] = Field(default_factory=list, description="On infeasible: the cheapest fixes.")
    model: str
    hardware: str

"""Typed answers of the planner (what the CLI renders and ``--json`` prints)."""

from __future__ import annotations

from pydantic import Field

from shardplan.costmodel.core.result import Out, ResultHead, Status
from shardplan.costmodel.training.report import LayerRow, MemoryOut, StageRow, TrainMetrics, TrainPlanOut


class StageSearchOut(Out):
    status: Status = Field(description="optimal when every global layout was solved optimally or bounded out.")
    solved: int = Field(description="Global layouts whose per-stage CP-SAT model was solved.")
    bounded: int = Field(description="Global layouts whose lower bound could not beat the plan.")
    single_stage: int = Field(description="Global layouts without a pipeline (nothing to split).")
    skipped: int = Field(description="Global layouts left unexamined at the time limit.")
    solve_s: float = Field(description="Per-stage search time (bounds, CP-SAT, evaluation).")
    uniform_step_time_s: float = Field(description="Step time of the best layout with the uniform split "
                                       "(what --uniform-stages returns).")


class SolverOut(Out):
    status: Status = Field(description="CP-SAT status of the first solve: optimal, feasible (time limit), "
                           "or infeasible (no layout fits).")
    wall_time_s: float = Field(description="Whole planning time: enumerate, cost, solve, report.")
    build_s: float = Field(description="Enumerating and costing the candidate table (numpy).")
    solve_s: float = Field(description="CP-SAT model building and solving.")
    candidates: int = Field(description="Valid layouts enumerated (before memory).")
    evaluated: int = Field(description="Rows costed, including recompute-layer and offload variants.")
    feasible: int = Field(description="Rows that fit GPU and host memory.")
    selector_rows: int = Field(description="Rows handed to CP-SAT: the best distinct layouts (one row each), at "
                               "most planner.training.solve.SELECTOR_ROWS.")
    objective: float = Field(description="Optimised quantity in seconds (step time, or time per sequence).")
    best_bound: float = Field(description="CP-SAT's proven lower bound on it.")
    gap: float = Field(description="Relative gap between objective and bound (0 when optimal).")
    pruned: dict[str, int] = Field(default_factory=dict, description="Layouts removed by each rule.")
    stage_search: StageSearchOut | None = Field(None, description="The per-stage search over global layouts "
                                                "(None: --uniform-stages).")


class Alternative(Out):
    rank: int
    plan: TrainPlanOut
    step_time_s: float
    tokens_per_s: float
    delta_pct: float = Field(description="Step-time (or throughput) difference to the chosen plan, percent.")
    memory_bytes: float


class Comparison(Out):
    layout: str = Field(description="The obvious alternative named in full (every knob the cost model evaluates).")
    plan: TrainPlanOut | None = Field(None, description="That layout, when it fits (its numbers are its estimate).")
    fits: bool
    step_time_s: float | None = None
    delta_pct: float | None = None
    note: str = ""


class TrainPlan(ResultHead):
    num_gpus: int
    seq_len: int
    plan: TrainPlanOut | None = None
    metrics: TrainMetrics | None = None
    memory: MemoryOut | None = None
    stages: list[StageRow] = Field(default_factory=list)
    layers: list[LayerRow] = Field(default_factory=list)
    solver: SolverOut
    alternatives: list[Alternative] = Field(default_factory=list)
    comparisons: list[Comparison] = Field(default_factory=list)
    explanation: list[str] = Field(default_factory=list, description="Why this layout wins, in sentences.")

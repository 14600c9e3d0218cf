"""Shared by every planner: float→integer scaling, the CP-SAT row selector, pin checks."""

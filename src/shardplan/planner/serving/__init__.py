"""The serving planner: request, CP-SAT choice of layout and batch (``solve``), frontier and explanations."""

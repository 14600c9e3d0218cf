"""The training planner: request, cost table → CP-SAT choice (``solve``), schemas, explanations and fixes."""

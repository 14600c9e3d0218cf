"""Which layout to pick: CP-SAT models over cost tables, and brute-force references. Never renders.

``core/`` holds what every job's planner shares: the only float→integer scaling (``scaling``), the CP-SAT row
selector with top-k and infeasibility cores (``select``) and pin checks (``pins``). One package per job on top,
never importing each other: ``training/`` (``solve.plan_training``, request, schemas, explanations),
``serving/`` (``solve.plan_inference``, Pareto frontier) and ``offload/`` (``solve.plan_offload``, bounds, the
factored CP-SAT model per knob row).
"""

"""The offload planner: bounds over knob rows and a factored CP-SAT placement model per row (``solve``)."""

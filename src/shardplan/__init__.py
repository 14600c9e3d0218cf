"""shardplan: how should this model be laid out on this hardware?

An analytical cost model (time and memory per layer) and an exact OR-Tools CP-SAT planner for
LLM training, serving and single-GPU offloading. The notebook API lives in ``shardplan.api``.
"""

__version__ = "0.1.0"

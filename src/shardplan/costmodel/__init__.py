"""How much a layout costs: pure functions over numpy columns (one entry per layout row). Never imports
ortools, typer or rich.

``core/`` is shared by every job: the operator records (``ops``), kernel timing (``kernels``: roofline with
achievable efficiency and a launch floor), collectives over the cluster's links (``comm``), layout arithmetic
(``layouts``) and the result head every schema shares (``result``). On top of it, one package per job, which
never import each other: ``training/`` (forward/backward/recompute of a microbatch, pipeline and data-parallel
step, memory, the planner's cost table and ``estimate_training``), ``serving/`` (prefill and decode steps, paged
KV cache, ``estimate_inference``) and ``offload/`` (FlexGen's block schedule over GPU/CPU/disk tiers,
``estimate_offload``).
"""

"""Typed results of a training estimate: what the CLI renders and ``--json`` prints.

Field names follow the JSON contract of DESIGN.md (``status plan metrics memory`` plus ``layers`` and
``stages``); SI units, bytes per GPU.
"""

from __future__ import annotations

from pydantic import Field

from shardplan.costmodel.core.result import Out, ResultHead


class OffloadOut(Out):
    weights: float = Field(description="Fraction of weights kept on the CPU and streamed in.")
    optimizer: float = Field(description="Fraction of optimizer state (and its update) on the CPU.")
    activations: float = Field(description="Fraction of stored activations kept on the CPU.")


class TrainPlanOut(Out):
    tp: int
    pp: int
    dp: int
    ep: int
    cp: int
    microbatch_size: int
    num_microbatches: int
    schedules: int = Field(1, description="Pipeline schedules per step: global_batch/(dp·local_batch) when "
                           "gradient accumulation repeats whole schedules (--local-batch), each with its own fill "
                           "and drain; 1 otherwise.")
    global_batch: int
    mtp_layers: int = Field(0, description="Multi-token-prediction modules trained on the last stage (--mtp-layers); "
                            "part of the workload, echoed so the layout names what its numbers price.")
    interleave: int
    recompute: str
    recompute_layers: int | None = Field(description="Fully recomputed layers per stage (None: all).")
    zero_stage: int
    sequence_parallel: bool
    offload: OffloadOut
    etp: int | None = Field(None, description="Expert tensor parallelism (tp unless MoE parallel folding sets it "
                            "apart; None: tp).")
    stage_layers: list[int] | None = Field(None, description="Transformer layers per pipeline rank (rank 0 first); "
                                           "with interleave v, each rank's layers form v chunks, the first chunks "
                                           "taking the remainder. None: the uniform split.")
    stage_recompute_layers: list[int] | None = Field(None, description="Fully recomputed layers per pipeline rank "
                                                     "(--recompute full with a per-stage plan).")
    stage_offload_activations: list[float] | None = Field(None, description="Share of stored activations on the "
                                                          "CPU per pipeline rank (a per-stage plan).")
    recompute_modules: list[str] | None = Field(None, description="Under selective recompute: the modules recomputed "
                                                "in every layer (Megatron's --recompute-modules; core_attn is its "
                                                "default), or one other framework's policy (torchtitan_op, "
                                                "maxtext_save_dot_except_mlpwi). None without selective recompute.")
    cp_comm_type: str | None = Field(None, description="How context parallelism exchanges K/V in this plan's "
                                     "pricing (--cp-comm-type, or the system file's software.cp_comm_type): p2p, "
                                     "all_gather or a2a. None without context parallelism.")


class TrainMetrics(Out):
    step_time_s: float
    tokens_per_s: float
    mfu: float = Field(description="Model FLOPs utilisation: model FLOPs per step (6 per active weight per token, "
                       "12·L·s·a·d per token for attention over the full s×s matrix, causal masking not "
                       "discounted, 6·V·h for the LM head; no recompute) / (step time · GPUs · dense peak).")
    hfu: float = Field(description="Hardware FLOPs utilisation: the model FLOPs plus the forward work recompute "
                       "reruns, counted the same way, / (step time · GPUs · dense peak); HFU ≥ MFU.")
    tflops_per_gpu: float = Field(description="Hardware TFLOP/s per GPU, the HFU numerator (Narayanan et al. 2021 "
                                  "Eq. 3 convention, recompute included).")
    executed_tflops_per_gpu: float = Field(0.0, description="TFLOP/s per GPU the kernels execute (flash attention "
                                           "skips the masked half of causal attention).")
    bubble_fraction: float
    pipeline_s: float
    bubble_s: float
    tp_exposed_s: float
    pp_exposed_s: float
    dp_exposed_s: float
    zero3_exposed_s: float
    ep_exposed_s: float
    cp_exposed_s: float
    host_sync_s: float = Field(0.0, description="GPU idle per step on MoE token-count host synchronisations (the "
                               "slowest stage's, as the exposed collectives).")
    optimizer_s: float
    band_pct: float | None = Field(None, description="Error band half-width (±%) from the validation residuals "
                                   "of this GPU generation, or of the system's calibration (costmodel.bands).")
    step_time_s_range: list[float] | None = Field(None, description="[low, high] step time within the band.")
    tokens_per_s_range: list[float] | None = Field(None, description="[low, high] tokens/s within the band.")
    optimum_band_pct: list[float] | None = Field(
        None, description="Set on the layout `train` chose: [low, high] percent off its predicted tokens/s where the "
        "expert-tuned runs of the same jobs measured, when the planner chose every knob (validate --group optimum, the "
        "central 85%, this GPU generation and model class: costmodel.bands.optimum_band). An optimiser picks the "
        "layouts the model is most optimistic about, so this sits lower than the symmetric band. None for an "
        "estimate of a given layout, a plan with a single candidate, or a calibrated system.")
    optimum_band_runs: int | None = Field(None, description="Tuned runs the interval at the optimum comes from.")
    optimum_step_time_s_range: list[float] | None = Field(None, description="[low, high] step time within the "
                                                          "interval at the optimum.")
    optimum_tokens_per_s_range: list[float] | None = Field(None, description="[low, high] tokens/s within the "
                                                           "interval at the optimum.")


class MemoryOut(Out):
    stage: str = Field(description="The stage whose memory binds (first, middle, last).")
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    kv_cache_bytes: float = 0.0
    framework_bytes: float
    total_bytes: float
    capacity_bytes: float = Field(description="The GPU's memory.")
    headroom_bytes: float = Field(0.0, description="Left free for allocator fragmentation and spikes: a plan fits "
                                  "when total_bytes ≤ capacity_bytes − headroom_bytes.")
    cpu_bytes: float = Field(description="Offloaded bytes per GPU in host memory.")
    host_bytes_per_node: float
    host_capacity_bytes: float


class LayerRow(Out):
    stage: str
    kind: str = Field(description="Layer kind: embedding, attention (or sliding, chunked, linear, mamba), mlp, moe, "
                      "head; head+mtp when the workload trains MTP modules (the head row then carries them).")
    count: int
    recompute: str = Field("none", description="Recompute of these layers: none, selective or full (with "
                           "--recompute full on k layers per stage, the stage's layers split into two rows).")
    fwd_flops: float
    bwd_flops: float
    recompute_flops: float
    fwd_time_s: float
    bwd_time_s: float
    recompute_time_s: float
    hbm_bytes: float
    comm_tp_s: float
    comm_cp_s: float
    comm_ep_s: float
    host_s: float = Field(0.0, description="GPU idle on the host per layer, forward and backward (MoE token-count "
                          "synchronisations).")
    params: float
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float


class StageRow(Out):
    stage: str
    index: int
    layers: int
    moe_layers: int
    fwd_time_s: float = Field(description="Per microbatch, including pipeline sends.")
    bwd_time_s: float = Field(description="Per microbatch, including recompute and pipeline sends.")
    recompute_time_s: float
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    framework_bytes: float
    total_bytes: float
    capacity_bytes: float
    headroom_bytes: float = 0.0
    fits: bool = Field(description="total_bytes ≤ capacity_bytes − headroom_bytes.")


class TrainReport(ResultHead):
    num_gpus: int
    seq_len: int
    plan: TrainPlanOut
    metrics: TrainMetrics
    memory: MemoryOut
    stages: list[StageRow]
    layers: list[LayerRow]

"""``estimate_inference``: the full cost breakdown of one pinned serving layout, the float reference path.

It validates the layout (bad input raises ``ShardplanError``), evaluates it with ``infer_cost`` (the
same function the planner's tables use), and reports ``infeasible`` — naming the binding resource and
the cheapest single changes that fit — when the batch's KV cache or the weights do not fit.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from shardplan.costmodel.core import bands
from shardplan.costmodel.core.kernels import memory_time
from shardplan.costmodel.core.layouts import check_gpus, divisors, fmt_values, model_kind_counts
from shardplan.costmodel.core.ops import COMM, GEMM, Op
from shardplan.costmodel.core.result import Out, ResultHead
from shardplan.costmodel.serving.cost import InferCost, InferLayout, InferRows, InferWorkload, infer_cost
from shardplan.costmodel.serving.layers import ATTN
from shardplan.errors import ShardplanError
from shardplan.hardware.spec import SystemSpec
from shardplan.models.spec import ModelSpec
from shardplan.units import format_bytes


class InferPlanOut(Out):
    tp: int
    pp: int
    ep: int
    replicas: int
    batch_size: int = Field(description="Concurrent sequences per replica.")


class InferMetrics(Out):
    ttft_s: float = Field(description="Time to first token. continuous: one request's mean (queueing under "
                          "--request-rate, half a step, its prefill chunks); static: prefill of the whole batch.")
    tpot_s: float = Field(description="Time per output token: one decode step (continuous: the average mixed "
                          "step, decodes sharing it with prefill chunks) at the mean context.")
    tokens_per_s: float = Field(description="Output tokens per second over all GPUs (all replicas).")
    max_batch_size: int = Field(description="Largest batch per replica whose KV cache fits.")
    e2e_latency_s: float = Field(description="One request: TTFT + (gen − 1)·TPOT.")
    tokens_per_s_per_gpu: float
    prefill_chunks: int = Field(description="Prefill steps of at most max_num_batched_tokens tokens.")
    decode_micro_batches: int = Field(description="Micro-batches in flight over the pipeline during decode.")
    mean_context: float = Field(description="Context length at which TPOT is evaluated: prompt + gen/2.")
    mode: str = Field("static", description="continuous (engine steady state) or static (one batch).")
    request_rate: float | None = Field(None, description="Offered load, requests/s (None: saturation).")
    capacity_requests_per_s: float | None = Field(None, description="Saturation capacity of all replicas.")
    utilisation: float | None = Field(None, description="Offered load / capacity (1 at saturation).")
    queue_s: float | None = Field(None, description="Mean wait for admission (M/D/1), inside ttft_s.")
    ttft_p90_s: float | None = Field(None, description="90th-percentile TTFT (M/D/1 wait, Kingman's exponential tail).")
    decodes_per_step: float | None = Field(None, description="Average decode tokens per step (one micro-batch).")
    prefill_tokens_per_step: float | None = Field(None, description="Average prefill tokens per step.")
    goodput_tokens_per_s: float | None = Field(
        None, description="Output tokens/s of requests meeting the TTFT/TPOT limits (mean latencies under Poisson "
        "arrivals): tokens_per_s when the limits hold, else 0.")
    band_pct: float | None = Field(None, description="Error band half-width (±%) of tokens_per_s from the serving "
                                   "validation residuals of this GPU generation (costmodel.core.bands).")
    tokens_per_s_range: list[float] | None = Field(None, description="[low, high] tokens/s within the band.")


class InferMemory(Out):
    stage: str = Field(description="The pipeline stage with the fewest KV blocks (binds the batch).")
    weights_bytes: float
    gradients_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    activations_bytes: float = Field(description="Peak workspace of the profile forward pass and sampler.")
    kv_cache_bytes: float = Field(description="KV-cache blocks the batch occupies (static: prompt + generated tokens; "
                                  "continuous: prompt + half the output on average; TensorRT-LLM reserves prompt + "
                                  "output).")
    non_torch_bytes: float
    reserve_bytes: float = Field(description="What the engine keeps outside its budget (vLLM: (1 − "
                                 "gpu_memory_utilization) of the GPU; SGLang: 1 − mem_fraction_static, less "
                                 "activations; TRT-LLM: 10% of the free memory).")
    kv_pool_bytes: float = Field(description="Budget left for the paged KV cache (what vLLM allocates).")
    total_bytes: float = Field(description="weights + activations + batch KV cache + non-torch + reserve.")
    capacity_bytes: float
    kv_cache_tokens: int = Field(description="KV-cache token slots per replica (whole blocks).")
    kv_cache_blocks: int
    kv_bytes_per_token: float = Field(description="KV bytes per token position on one GPU of the stage.")


class PhaseLayerRow(Out):
    phase: str = Field(description="prefill (one chunk) or decode (one step of one micro-batch).")
    kind: str
    count: int = Field(description="Layers of this kind in the model (all stages).")
    flops: float
    hbm_bytes: float
    time_s: float
    comm_s: float
    bound: str = Field(description="What most of the layer's time waits on: compute, memory or communication.")


class SloOut(Out):
    max_ttft_s: float | None
    max_tpot_s: float | None
    met: bool = Field(description="TTFT and TPOT are within the limits given.")


class InferReport(ResultHead):
    num_gpus: int
    prompt_len: int
    gen_len: int
    weight_dtype: str
    kv_dtype: str
    plan: InferPlanOut
    metrics: InferMetrics
    memory: InferMemory
    prefill_layers: list[PhaseLayerRow]
    decode_layers: list[PhaseLayerRow]
    slo: SloOut | None = None


def valid_tp(model: ModelSpec) -> list[int]:
    """TP must divide the query heads; KV heads are split or replicated (kv % t == 0 or t % kv == 0, vLLM)."""
    kv = model.num_heads if model.mla else model.kv_heads
    return [t for t in divisors(model.num_heads) if kv % t == 0 or t % kv == 0]


def valid_ep(model: ModelSpec, replicas: int) -> list[int]:
    """EP spreads experts over replicas: it divides the expert count and the replica count (1 if dense)."""
    if model.moe is None:
        return [1]
    return [e for e in divisors(model.moe.num_experts) if replicas % e == 0]


def validate_layout(model: ModelSpec, num_gpus: int, lay: InferLayout) -> None:
    """Raise ``ShardplanError`` naming the first rule the pinned layout breaks."""
    for name in ("tp", "pp", "ep", "replicas", "batch"):
        if getattr(lay, name) < 1:
            raise ShardplanError(f"must be ≥ 1 (got {getattr(lay, name)})", field=name)
    tps = valid_tp(model)
    if lay.tp not in tps:
        raise ShardplanError(f"tp ({lay.tp}) must divide num_heads ({model.num_heads}) and divide or be a multiple of "
                             f"num_kv_heads ({model.kv_heads}); allowed: {fmt_values(tps)}", field="tp")
    if num_gpus % (lay.tp * lay.pp) or lay.num_gpus != num_gpus:
        raise ShardplanError(f"tp·pp ({lay.tp}·{lay.pp}) must divide --gpus ({num_gpus}): GPUs = replicas·tp·pp",
                             field="tp")
    if lay.pp > model.num_layers:
        raise ShardplanError(f"pp ({lay.pp}) must be ≤ num_layers ({model.num_layers})", field="pp")
    if lay.ep > 1 and model.moe is None:
        raise ShardplanError(f"ep ({lay.ep}) needs a mixture-of-experts model; {model.name} is dense", field="ep")
    if lay.ep not in valid_ep(model, lay.replicas):
        raise ShardplanError(f"ep ({lay.ep}) must divide num_experts and the replicas ({lay.replicas}); allowed: "
                             f"{fmt_values(valid_ep(model, lay.replicas))}", field="ep")


def _f(x: np.ndarray, i: int) -> float:
    return float(np.asarray(x)[i])


def _bound(cost: InferCost, ops: list[Op], i: int) -> str:
    """Largest share of the ops' time: compute-bound kernels, memory-bound kernels, or collectives."""
    gpu = cost.ctx.system.gpu
    shares = {"compute": 0.0, "memory": 0.0, "communication": 0.0}
    for op in ops:
        t = _f(op.time, i)
        if op.kind == COMM:
            shares["communication"] += t
        elif op.kind in (GEMM, ATTN):
            # the priced time against its memory roofline: above it (beyond the one launch), the math binds
            tm = float(memory_time(gpu, _f(op.nbytes, i)))
            shares["compute" if t > (tm + max(gpu.kernel_fixed_s, gpu.kernel_launch_s)) * (1 + 1e-9) else "memory"] += t
        else:
            shares["memory"] += t
    return max(shares, key=lambda k: shares[k])


def _layer_rows(cost: InferCost, i: int) -> tuple[list[PhaseLayerRow], list[PhaseLayerRow]]:
    m = cost.ctx.model
    counts = {"embedding": 1, **{k: int(n) for k, n in model_kind_counts(m).items()}, "head": 1}
    out: tuple[list[PhaseLayerRow], list[PhaseLayerRow]] = ([], [])
    for rows, phase in zip(out, (cost.prefill, cost.decode), strict=True):
        for kind, s in phase.sums.items():
            if counts[kind] == 0:
                continue
            rows.append(PhaseLayerRow(
                phase=phase.step.phase, kind=kind, count=counts[kind], flops=_f(s.flops, i), hbm_bytes=_f(s.nbytes, i),
                time_s=_f(s.time, i), comm_s=_f(s.comm_tp + s.comm_ep, i), bound=_bound(cost, phase.ops[kind], i)))
    return out


def _steady_metrics(cost: InferCost, i: int, work: InferWorkload) -> dict:
    st = cost.steady
    if st is None:
        return {}
    return dict(mode="continuous", request_rate=work.request_rate,
                capacity_requests_per_s=_f(st.capacity_rps, i) * int(cost.rows.dp[i]),
                utilisation=min(_f(st.utilisation, i), 1e9), queue_s=_f(st.queue_s, i), ttft_p90_s=_f(st.ttft_p90_s, i),
                decodes_per_step=_f(st.decodes, i), prefill_tokens_per_step=_f(st.prefill_tokens, i),
                goodput_tokens_per_s=_f(cost.tokens_per_s, i))


def report_row(cost: InferCost, i: int, *, model: ModelSpec, system: SystemSpec, work: InferWorkload,
               num_gpus: int) -> InferReport:
    """The report of row ``i`` of an evaluated batch of layouts (status ``feasible``)."""
    r = cost.rows
    lay = r.row(i)
    cap = float(system.gpu.memory_bytes)
    b = int(cost.binding_stage[i])
    st = cost.memory[b]
    kv_need = lay.batch * cost.blocks_held * work.block_size * _f(st.kv_token, i)
    reserve = _f(st.reserve, i)
    total = _f(st.weights, i) + _f(st.activations, i) + kv_need + _f(st.non_torch, i) + reserve
    memory = InferMemory(
        stage=st.shape.name, weights_bytes=_f(st.weights, i), activations_bytes=_f(st.activations, i),
        kv_cache_bytes=kv_need, non_torch_bytes=_f(st.non_torch, i), reserve_bytes=reserve,
        kv_pool_bytes=max(_f(st.kv_pool, i), 0.0), total_bytes=total, capacity_bytes=cap,
        kv_cache_tokens=int(_f(cost.kv_tokens, i)), kv_cache_blocks=int(_f(cost.kv_blocks, i)),
        kv_bytes_per_token=_f(st.kv_token, i))
    tps = _f(cost.tokens_per_s, i)
    half = bands.band(system, "serve")
    metrics = InferMetrics(
        ttft_s=_f(cost.ttft_s, i), tpot_s=_f(cost.tpot_s, i), tokens_per_s=tps,
        max_batch_size=int(_f(cost.max_batch, i)), e2e_latency_s=_f(cost.e2e_s, i),
        tokens_per_s_per_gpu=tps / num_gpus, prefill_chunks=int(_f(cost.chunks, i)),
        decode_micro_batches=int(_f(cost.micro_batches, i)), mean_context=work.prompt_len + work.gen_len / 2,
        band_pct=None if half is None else 100 * half, tokens_per_s_range=bands.around(tps, half),
        **_steady_metrics(cost, i, work))
    prefill, decode = _layer_rows(cost, i)
    return InferReport(
        status="feasible", model=model.name, hardware=system.name, num_gpus=num_gpus, prompt_len=work.prompt_len,
        gen_len=work.gen_len, weight_dtype=work.weights(model), kv_dtype=work.kv(),
        plan=InferPlanOut(tp=lay.tp, pp=lay.pp, ep=lay.ep, replicas=lay.replicas, batch_size=lay.batch),
        metrics=metrics, memory=memory, prefill_layers=prefill, decode_layers=decode)


def infeasibility(report: InferReport, work: InferWorkload) -> str:
    """One sentence naming the binding resource."""
    mem = report.memory
    budget = work.gpu_memory_utilization * mem.capacity_bytes
    if mem.kv_cache_blocks < -(-(work.prompt_len + work.gen_len) // work.block_size):
        return (f"GPU memory: on the {mem.stage} stage, weights {format_bytes(mem.weights_bytes)} + activations "
                f"{format_bytes(mem.activations_bytes)} + non-torch {format_bytes(mem.non_torch_bytes)} leave "
                f"{format_bytes(max(mem.kv_pool_bytes, 0.0))} of the {format_bytes(budget)} budget "
                f"({work.gpu_memory_utilization:g} × {format_bytes(mem.capacity_bytes)}): not one sequence's KV cache")
    return (f"KV cache: batch {report.plan.batch_size} needs {format_bytes(mem.kv_cache_bytes)} per GPU but the pool "
            f"holds {mem.kv_cache_tokens:,} token slots ({format_bytes(mem.kv_pool_bytes)}) per replica: at most "
            f"{report.metrics.max_batch_size} sequences of {work.prompt_len + work.gen_len} tokens")


def _variants(model: ModelSpec, lay: InferLayout, work: InferWorkload, max_batch: int
              ) -> list[tuple[str, InferLayout, InferWorkload]]:
    """Single changes that free memory, each described as the user would apply it."""
    out: list[tuple[str, InferLayout, InferWorkload]] = []
    if 1 <= max_batch < lay.batch:
        out.append((f"--batch {max_batch}", InferLayout(tp=lay.tp, pp=lay.pp, ep=lay.ep, replicas=lay.replicas,
                                                         batch=max_batch), work))
    for k in (2, 4, 8):
        if lay.replicas % k == 0:
            if lay.tp * k in valid_tp(model):
                tp_k = InferLayout(tp=lay.tp * k, pp=lay.pp, ep=1, replicas=lay.replicas // k, batch=lay.batch)
                out.append((f"--tp {lay.tp * k}", tp_k, work))
            if lay.pp * k <= model.num_layers:
                out.append((f"--pp {lay.pp * k}", InferLayout(tp=lay.tp, pp=lay.pp * k, ep=1,
                                                               replicas=lay.replicas // k, batch=lay.batch), work))
    if work.kv() != "fp8":
        out.append(("--kv-dtype fp8", lay, work.model_copy(update={"kv_dtype": "fp8"})))
    if work.weights(model) in ("bf16", "fp16"):
        out.append(("--weight-dtype fp8", lay, work.model_copy(update={"weight_dtype": "fp8"})))
    if work.weights(model) != "int4" and work.dtype != "fp8":
        out.append(("--weight-dtype int4", lay, work.model_copy(update={"weight_dtype": "int4"})))
    if work.gpu_memory_utilization < 0.95:
        out.append(("--gpu-memory-utilization 0.95", lay, work.model_copy(update={"gpu_memory_utilization": 0.95})))
    return out


def estimate_inference(model: ModelSpec, system: SystemSpec, num_gpus: int, work: InferWorkload,
                       layout: InferLayout | None = None, *, max_batch: bool = False, max_ttft_s: float | None = None,
                       max_tpot_s: float | None = None) -> InferReport:
    """Validate and evaluate one layout; a batch whose KV cache does not fit is ``infeasible`` with fixes.

    ``max_batch`` replaces the layout's batch by the largest that fits; the TTFT/TPOT limits are checked
    and reported (``slo``), not enforced: the status says only whether the layout fits in memory.
    """
    layout = layout or InferLayout(replicas=num_gpus)
    check_gpus(system, num_gpus)
    validate_layout(model, num_gpus, layout)
    cost = infer_cost(model, system, work, InferRows.from_layouts([layout]))
    if max_batch:
        layout = InferLayout(tp=layout.tp, pp=layout.pp, ep=layout.ep, replicas=layout.replicas,
                             batch=max(int(cost.max_batch[0]), 1))
        cost = infer_cost(model, system, work, InferRows.from_layouts([layout]))
    report = report_row(cost, 0, model=model, system=system, work=work, num_gpus=num_gpus)
    if max_ttft_s is not None or max_tpot_s is not None:
        met = (max_ttft_s is None or report.metrics.ttft_s <= max_ttft_s) and (
            max_tpot_s is None or report.metrics.tpot_s <= max_tpot_s)
        report = report.model_copy(update={"slo": SloOut(max_ttft_s=max_ttft_s, max_tpot_s=max_tpot_s, met=met)})
        if not met and report.metrics.goodput_tokens_per_s is not None:
            report = report.model_copy(update={"metrics": report.metrics.model_copy(
                update={"goodput_tokens_per_s": 0.0})})
    if bool(cost.fits[0]):
        return report
    fixes: list[tuple[float, str]] = []
    for text, lay, w in _variants(model, layout, work, report.metrics.max_batch_size):
        c = infer_cost(model, system, w, InferRows.from_layouts([lay]))
        if bool(c.fits[0]):
            fixes.append((-float(c.tokens_per_s[0]), f"{text} ({float(c.tokens_per_s[0]):,.0f} tokens/s)"))
    suggestions = [text for _, text in sorted(fixes)[:4]] or [
        "use more GPUs, or a shorter --prompt-len/--gen-len (`shardplan infer` finds a layout that fits)"]
    return report.model_copy(update={"status": "infeasible", "reason": infeasibility(report, work),
                                     "suggestions": suggestions})

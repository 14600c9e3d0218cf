"""One MoE layer as NVIDIA times it on a DGX H100, against the model's price of that layer.

Megatron-LM's MoE performance regression test (NVIDIA/Megatron-LM ``tests/functional_tests/test_cases/common/moe_perf/``
at d98e8a6: ``test_cases.py`` the cases, ``baseline.json`` the times, recorded at cf39a4d (2025-12-17), run on
``dgx_h100`` per ``tests/test_utils/recipes/h100/module_performance.yaml``) builds one ``MoELayer`` with Transformer
Engine's grouped GEMM, permute and router fusions and forced load balancing, and times its forward and its backward
with CUDA events (5 warm-up, the mean of 20 measured iterations on rank 0, manual GC; each iteration behind an fp32
8192³ dummy matmul that hides the launches) on 8 H100 at TP 1, EP 8, one sequence of 4,096 tokens per GPU, bf16
parameters:

- Mixtral proxy: hidden 4,096, 8 experts of 14,336, top-2 (Mixtral 8x7B's MoE block);
- DeepSeek proxy: hidden 7,168, 32 experts of 2,048, top-8 (8 groups, top-4 groups, sigmoid, expert bias); its
  config names a shared expert of 2,048 but the harness never passes it to ``TransformerConfig``, so none is built;

each with the alltoall dispatcher, DeepEP and HybridEP, in bf16 and in fp8 with blockwise scaling (1×128 activation,
128×128 weight blocks).

The model prices the same layer: the ``moe`` kind of a one-microbatch training table (router, the dropless host
synchronisation, dispatch, experts, combine; without the pre-MLP norm and the residual add, which the test's layer
does not run). No clock was recorded: "GEMMs at boost" prices them at the isolated grid rate, undoing the model's
in-job clock, an assumption about the test, not a measurement. The model has no blockwise FP8 recipe, so the fp8
rows print the measured fp8/bf16 ratio beside the model's per-tensor (current scaling) one for reference only. DeepEP
and HybridEP are both the model's ``deepep`` dispatcher (their NVLink kernels at the measured rate of
``hardware/ep_data.py``).

Run: .venv/bin/python benchmarks/moe_layer_perf.py   (a few seconds)
"""

from __future__ import annotations

from shardplan.costmodel.core.ops import GEMM
from shardplan.costmodel.training.ctx import Ctx
from shardplan.costmodel.training.layout import LayoutArrays, TrainLayout, TrainWorkload
from shardplan.costmodel.training.stages import kind_cost
from shardplan.hardware import get_system
from shardplan.hardware.curves import HOPPER_SUSTAINED_CLOCK
from shardplan.models import get_model

# Megatron-LM@d98e8a6 tests/functional_tests/test_cases/common/moe_perf/baseline.json: (forward ms, backward ms)
MEASURED: dict[str, tuple[float, float]] = {
    "mixtral_a2a_tp1ep8_bf16": (4.32688798904419, 7.684332823753357),
    "mixtral_deepep_tp1ep8_bf16": (4.635550403594971, 7.854356813430786),
    "mixtral_hybridep_tp1ep8_bf16": (4.342604804039001, 7.740782427787781),
    "deepseek_a2a_tp1ep8_bf16": (7.119169592857361, 10.482670497894286),
    "deepseek_deepep_tp1ep8_bf16": (5.681718397140503, 9.055137538909912),
    "deepseek_hybridep_tp1ep8_bf16": (5.390828824043274, 8.795001602172851),
    "mixtral_a2a_tp1ep8_fp8": (3.7876319885253906, 6.618246412277221),
    "mixtral_deepep_tp1ep8_fp8": (4.101150441169739, 6.82720000743866),
    "mixtral_hybridep_tp1ep8_fp8": (3.7007392168045046, 6.57167682647705),
    "deepseek_a2a_tp1ep8_fp8": (7.609272027015686, 10.126460886001587),
    "deepseek_deepep_tp1ep8_fp8": (6.034772801399231, 8.60211353302002),
    "deepseek_hybridep_tp1ep8_fp8": (5.142886424064637, 7.6874864339828495),
}
OUTSIDE = ("moe.norm", "moe.residual")  # the test times MoELayer alone: no pre-MLP norm, no residual add


def proxy(name: str):
    if name == "mixtral":
        return get_model("mixtral-8x7b")
    v3 = get_model("deepseek-v3")
    assert v3.moe is not None
    # the test's config passes no moe_shared_expert_intermediate_size to TransformerConfig: no shared expert is built
    moe = v3.moe.model_copy(update={"num_experts": 32, "num_shared_experts": 0})
    return v3.model_copy(update={"moe": moe, "layer_pattern": None})


def priced(model_name: str, dispatcher: str, dtype: str, *, boost: bool = False) -> tuple[float, float]:
    """The model's forward and backward ms of one MoE layer, one 4,096-token microbatch per GPU, TP 1, EP 8;
    ``boost``: its GEMMs at the boost clock an isolated benchmark runs at (the model prices the clock a 700 W Hopper
    sustains in a job, ``hardware.curves.HOPPER_SUSTAINED_CLOCK``, 1575/1980 MHz)."""
    system = get_system("dgx-h100")
    system = system.model_copy(update={"software": system.software.model_copy(update={
        "ep_dispatcher": "alltoall" if dispatcher == "a2a" else "deepep"})})
    model = proxy(model_name)
    work = TrainWorkload(seq_len=4096, global_batch=8, dtype=dtype)
    ctx = Ctx(model, system, work, LayoutArrays.from_layouts([TrainLayout(dp=8, ep=8)], 8))
    kc = kind_cost(ctx, "moe")
    def t(o) -> float:
        return float(o.time[0]) * (HOPPER_SUSTAINED_CLOCK if boost and o.kind == GEMM else 1.0)

    fwd = sum(t(o) for o in kc.fwd_ops if o.name not in OUTSIDE)
    bwd = sum(t(o) for o in kc.bwd_ops if not o.name.startswith(OUTSIDE))
    return fwd * 1e3, bwd * 1e3


def main() -> int:
    print("One MoE layer on 8 H100 (TP 1, EP 8, 4,096 tokens per GPU): measured (Megatron-LM moe_perf baseline) "
          "against priced, ms")
    print(f"{'case':32s} {'fwd meas':>9s} {'priced':>7s} {'err':>7s}   {'bwd meas':>9s} {'priced':>7s} {'err':>7s}"
          f"   {'f+b err':>7s}   {'GEMMs at boost':>14s}")
    rows, boosted = [], []
    for case, (f_m, b_m) in MEASURED.items():
        if not case.endswith("bf16"):
            continue
        model_name, dispatcher = case.split("_")[:2]
        f_p, b_p = priced(model_name, dispatcher, "bf16")
        f_b, b_b = priced(model_name, dispatcher, "bf16", boost=True)
        tot, tot_b = (f_p + b_p) / (f_m + b_m) - 1, (f_b + b_b) / (f_m + b_m) - 1
        rows.append(tot)
        boosted.append(tot_b)
        print(f"{case:32s} {f_m:9.2f} {f_p:7.2f} {f_p / f_m - 1:+7.1%}   {b_m:9.2f} {b_p:7.2f} {b_p / b_m - 1:+7.1%}"
              f"   {tot:+7.1%}   {tot_b:+14.1%}")
    print(f"mean forward+backward error over the six bf16 cases: {sum(rows) / len(rows):+.1%} as priced, "
          f"{sum(boosted) / len(boosted):+.1%} with the GEMMs at the boost clock")
    print()
    print("fp8 with blockwise scaling (not a recipe the model prices): measured fp8/bf16 speed-up of the layer, "
          "and the model's per-tensor current-scaling one for reference")
    for case, (f_m, b_m) in MEASURED.items():
        if not case.endswith("fp8"):
            continue
        model_name, dispatcher = case.split("_")[:2]
        bf_m = MEASURED[case.replace("fp8", "bf16")]
        f16, b16 = priced(model_name, dispatcher, "bf16")
        f8, b8 = priced(model_name, dispatcher, "fp8")
        print(f"{case:32s} measured {sum(bf_m) / (f_m + b_m):5.3f}x   "
              f"model (per-tensor) {(f16 + b16) / (f8 + b8):5.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

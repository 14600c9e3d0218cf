"""HBM traffic of the elementwise operators as a software stack runs them: fused kernels or eager PyTorch.

One row per operator kind, forward and backward, in passes over the op's ``elements`` (tensors of the activation
datatype read or written) plus extra bytes per element (fp32 intermediates of eager code, int64 indices), and the
number of kernels streaming it (kernels on per-row statistics only are left out). ``FUSED`` is what Megatron-Core /
Transformer Engine (or a compiled graph) runs: one kernel each way; its backward ``None`` is the job's generic rule
(training: ``MEM_BWD_TRAFFIC`` × forward). ``EAGER`` is what PyTorch eager mode runs for the same math (every op
its own kernel streaming the tensor through HBM, and autograd's backward kernels), counted from the framework source
named on each row and from the autograd formulas of PyTorch's ``tools/autograd/derivatives.yaml``@d327a787 (``mul``:
two products; ``pow``: ``grad·e·x^(e−1)``; ``mean``: the expanded gradient ÷ n; a cast: the reverse cast). A kind
absent from ``EAGER`` runs the same kernel either way (residual add, GeLU: one native kernel, 1.5× backward rule).
Counts assume 16-bit activations.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Traffic:
    """Per element: forward passes (activation dtype) and ``extra`` bytes (fp32 intermediates, int64 indices) over
    ``kernels`` kernels; the same backward (``bwd_passes`` None: the job's generic backward rule, one kernel); and
    ``saved``, the activation memory the eager graph holds beyond the fused kernel's (``training.memory``)."""

    passes: float
    extra: float = 0.0
    kernels: int = 1
    bwd_passes: float | None = None
    bwd_extra: float = 0.0
    bwd_kernels: int = 1
    saved: float = 0.0  # bytes per element autograd keeps for backward beyond what the fused kernel keeps

    def fwd_bytes(self, e: float) -> float:
        return self.passes * e + self.extra

    def bwd_bytes(self, e: float) -> float | None:
        return None if self.bwd_passes is None else self.bwd_passes * e + self.bwd_extra


FUSED: dict[str, Traffic] = {
    "norm": Traffic(2),  # LayerNorm/RMSNorm: read x, write y (fp32 row statistics negligible)
    "residual": Traffic(3),  # (bias-dropout-)add: read x and the residual, write the sum
    "rope": Traffic(2),  # fused rotary (Megatron apply_rope_fusion): read and write q and k
    "act": Traffic(2),  # GeLU/ReLU: read, write
    "gated_act": Traffic(3),  # act(gate)·up: read gate and up, write
    # Megatron-Core fused_vocab_parallel_cross_entropy (megatron/core/fusions/fused_cross_entropy.py@d98e8a64dd, three
    # jit-fused kernels): cast + max (read 16-bit, write fp32: 1 pass + 4 B), shift + exp + sum in place (8 B),
    # divide by the sum in place (8 B). Backward (calculate_gradients: ``grad_2d[arange, target] -= update`` then
    # ``mul_``, tensor_parallel/cross_entropy.py l.111-114, under torch.compile, Megatron's jit_fuser: core/jit.py
    # l.16-33): the compiled graph keeps the mutation of its input, the saved fp32 softmax, so it copies the softmax
    # (4 + 4 B), scatters the target's update into the copy, then reads it (4 B) and writes the 16-bit gradient and
    # the product back over the input (4 B): inductor reinplaces an update of an input's view only when the
    # write-back stores that same op's result (torch/_inductor/fx_passes/reinplace.py ``can_inplace``), so the copy
    # stays (the generated code of this function, checked with torch 2.13's inductor on CPU).
    "cross_entropy": Traffic(1, 20.0, 3, bwd_passes=1, bwd_extra=16.0, bwd_kernels=3),
    # Transformer Engine's Triton cross entropy (``SoftwareSpec.cross_entropy_fusion`` "te"; TransformerEngine v2.8
    # transformer_engine/pytorch/triton/cross_entropy.py, the same through v2.17): online_softmax_kernel reads the
    # 16-bit logits for the running max and sum, cross_entropy_kernel reads them again and writes the gradient over
    # them; backward element_mul_kernel scales it in place by the per-token loss gradient (Megatron reduces no loss
    # in the kernel, so grad_output is a tensor and the kernel runs). v2.18 (01bbe3e, 2026-07-09) writes an fp32
    # gradient instead (8 B forward, 8 B + a 6 B cast backward): not priced.
    "cross_entropy.te": Traffic(3, 0.0, 2, bwd_passes=2, bwd_kernels=1),
    # Megatron-Core TEGroupedMLP._apply_bias (megatron/core/transformer/moe/experts.py@core_v0.15.0 and d98e8a6's
    # list path; FC2 runs with skip_bias_add): per expert ``t + b·p`` on its split of the FC2 output, promoted to fp32
    # by the fp32 probabilities (b·p writes 4 B, the add reads the 16-bit t and 4 B, writes 4 B), ``torch.cat``
    # (4 + 4 B), ``.to(16-bit)`` (4 B + 1 pass). Backward: the cast's inverse (1 pass + 4 B), the add's gradient to t
    # cast back (4 B + 1 pass), b's and p's gradients each a product with the fp32 gradient and a sum (4 + 4 + 4 B
    # each), the splits' gradient concatenated (2 passes). Per-expert launches counted as one kernel per op.
    "expert_bias": Traffic(2, 24.0, 4, bwd_passes=4, bwd_extra=32.0, bwd_kernels=7),
    # A clamped GLU (gpt-oss, activation_clamp) under Megatron-Core's fused weighted_bias_quick_geglu_impl
    # (megatron/core/fusions/fused_bias_geglu.py at core_v0.15.0 and d98e8a6; TEGroupedMLP's bias_activation_fusion
    # path): chunk, ``clamp`` of the gate and of the up half, ``torch.cat`` as eager kernels before the fused GLU.
    # Per element of the activation's output (one of each half): the clamps 2 + 2 passes, the cat 4. Backward
    # (PyTorch FunctionsManual.cpp clamp_backward: ``where(self <= max, grad, 0)``; with both bounds
    # ``where((self >= min).logical_and_(self <= max), grad, 0)``): the gate's compare and where (3 passes, 2 B of
    # bool), the up half's two compares, and, where (4 passes, 6 B of bool), the chunk's gradient concatenated (4).
    # Memory: the clamps keep the FC1 output and the GLU keeps the cat's copy: 2 × 16 bit more per element.
    "glu_clamp": Traffic(8, 0.0, 3, bwd_passes=11, bwd_extra=8.0, bwd_kernels=7, saved=4.0),
    # NeMo AutoModel GroupedExpertsDeepEP._apply_bias on FC1's output (nemo_automodel/components/moe/layers.py@79d0ccf,
    # no probabilities: 16-bit throughout): per expert ``t + b`` (2 passes), ``torch.cat`` (2). Backward: b's gradient
    # a sum over the expert's tokens (1 pass), the splits' gradient concatenated (2). Per element of FC1's output.
    "expert_fc1_bias": Traffic(4, 0.0, 2, bwd_passes=3, bwd_kernels=2),
}

EAGER: dict[str, Traffic] = {
    # torchtitan RMSNorm (torchtitan/models/norms.py@9dec370 RMSNorm: ``self._norm(x.float()).type_as(x) *
    # self.weight``, _norm = x·rsqrt(x.pow(2).mean(-1) + eps)): x.float() 1 pass + 4 B, pow 8, mean 4, x·rsqrt 8,
    # type_as 4 B + 1 pass, ·weight 2 passes. Backward: ·weight (g·w 2 passes, g·y 3 passes, Σ over tokens 1 pass),
    # type_as⁻¹ 1 pass + 4, x·r (g·r 8, g·x 12, Σ_h 4), mean⁻¹ 4, pow⁻¹ (x.pow(1) 8, ·2 8, g· 12), the two
    # gradients of the fp32 x summed 12, float⁻¹ 4 + 1 pass.
    # Memory: autograd keeps the fp32 x for pow and x·rsqrt (derivatives.yaml@d327a787 ``pow``: saves self; ``mul``:
    # saves each operand the other's gradient needs) and the 16-bit normalized y for ·weight: 4 + 2 B per element
    # where the fused norm keeps its 16-bit input (already counted): 4 B more.
    "norm.composite": Traffic(4, 28.0, 6, bwd_passes=8, bwd_extra=76.0, bwd_kernels=13, saved=4.0),
    # PyTorch's native layer_norm (llm-foundry LPLayerNorm, llmfoundry/models/layers/norm.py@495218376 with
    # norm_type low_precision_layernorm: F.layer_norm in 16 bit): one forward kernel; backward the input-gradient
    # kernel (read x and g, write dx) and the weight/bias-gradient kernel re-reading x and g.
    "norm.native": Traffic(2, 0.0, 1, bwd_passes=5, bwd_kernels=2),
    # torchtitan apply_rotary_emb (torchtitan/models/llama/model.py@1ea476e9f): xq.float() 1 pass + 4 B, complex
    # product with freqs_cis (read 4, write 4), type_as 4 + 1 pass; backward the reverse cast, the product with
    # conj(freqs_cis), the cast back.
    "rope": Traffic(2, 16.0, 3, bwd_passes=2, bwd_extra=16.0, bwd_kernels=3),
    # torchtitan FeedForward (model.py@1ea476e9f: ``F.silu(self.w1(x)) * self.w3(x)``): silu 2 passes, mul 3;
    # backward: mul's two products (3 passes each), silu_backward (read x and g, write: 3 passes).
    # Memory: silu keeps its input (w1·x) and mul both operands (silu's output and w3·x), where the fused SwiGLU
    # keeps its two inputs: the silu output more, 2 B per (output) element.
    "gated_act": Traffic(5, 0.0, 2, bwd_passes=9, bwd_kernels=3, saved=2.0),
    # torchtitan loss (model.py@1ea476e9f ``self.output(h).float()``, train.py@1ea476e9f ``F.cross_entropy``):
    # cast 1 pass + 4 B, log_softmax over the fp32 row (aten/src/ATen/native/cuda/SoftMax.cu@000cace5a
    # cunn_SoftMaxForward, rows over 1024: max, Σexp and the write each read the row: 12 B + write 4 B); nll_loss
    # reads one value per row. Backward: nll_loss_backward zero-fills the
    # fp32 gradient (4 B), log_softmax_backward reads the gradient for its sum and again with the output to write
    # (16 B), the cast back (read 4 B, write 1 pass).
    "cross_entropy": Traffic(1, 20.0, 2, bwd_passes=1, bwd_extra=24.0, bwd_kernels=3),
}


# The packing copies around a variable-length flash-attention call (``SoftwareSpec.attention_unpad``): flash-attn
# flash_attn/bert_padding.py@2d64d7a5, as llm-foundry's flash_attn_fn (llmfoundry/models/layers/attention.py@495218376)
# calls it on every layer. IndexFirstAxis gathers each of q, k, v with ``repeat(indices, "z -> z d")``, an int64 index
# per element (written 8 B, read 8 B) besides reading and writing the values; backward zero-fills the input gradient,
# builds the index again and scatters. pad_input's IndexPutFirstAxis zero-fills the output and writes it (read,
# write); backward indexes the gradient back (read, write).
UNPAD: dict[str, Traffic] = {
    "attn.unpad_qkv": Traffic(2, 16.0, 2, bwd_passes=3, bwd_extra=16.0, bwd_kernels=3),
    "attn.pad_out": Traffic(3, 0.0, 2, bwd_passes=2, bwd_kernels=1),
}


def traffic(kind: str, kernels: str = "fused", norm: str = "fused") -> Traffic:
    """The row of ``kind`` for a stack (``SoftwareSpec.elementwise_kernels`` fused or eager; norms by
    ``SoftwareSpec.norm_kernel``: fused, native or composite; the unpadding copies of ``UNPAD``)."""
    if kind in UNPAD:
        return UNPAD[kind]
    if kind == "norm":
        return FUSED["norm"] if norm == "fused" else EAGER[f"norm.{norm}"]
    return EAGER.get(kind, FUSED[kind]) if kernels == "eager" else FUSED[kind]

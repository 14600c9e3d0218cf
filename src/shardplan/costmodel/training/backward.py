"""The backward phase of a layer from its forward operators: a GEMM's backward is its two GEMMs at their own
shapes (activation and weight gradients), an elementwise kernel's backward moves 1.5× the bytes (or what its stack's
row gives), fused attention's backward does ``ctx.BWD_ATTN_FLOPS``× the forward FLOPs, and a collective in forward
has its mirror in backward (Megatron's f/g operators) unless the forward op states its own backward (an identity
backward, the loss's all-reduces, the CP ring's K/V with their gradients). Selective recompute reruns the forward ops
``selective_part`` keeps."""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.core.ops import ATTN, COMM, GEMM, HOST, MEM, Op
from shardplan.costmodel.training.ctx import BWD_ATTN_FLOPS, Ctx

# Megatron-LM overlaps the backward all-reduce of the TP input gradient with the weight-gradient GEMM
# (``--async-tensor-model-parallel-allreduce``, on by default since 2021). NCCL kernels share SMs with
# the GEMM, so overlapped communication still costs this fraction of its time (fitted to Korthikanti et
# al. 2022 Table 4: 22B layer backward 11.9 ms without SP).
ASYNC_TP_CONTENTION = 0.4
# An elementwise kernel's backward reads its saved input and the output gradient and writes the input
# gradient: three tensors where the forward moved two (norms, softmax, GeLU, dropout); an op whose stack's row in
# ``core.passes`` gives its backward (eager PyTorch kernels, the fused cross entropy) moves that instead.
MEM_BWD_TRAFFIC = 1.5


def backward(ctx: Ctx, fwd: list[Op]) -> list[Op]:
    """Backward-pass ops of a layer from its forward ops."""
    out: list[Op] = []
    entry = next((op for op in fwd if op.kind == GEMM), None)
    for op in fwd:
        if op.kind == HOST:  # the backward reuses the counts the forward copied to the host: no sync
            continue
        if op.kind == COMM and op.name.endswith("tp_allreduce") and entry is not None:
            wgrad = entry.time if entry.grads is None else entry.grads.wgrad_time
            ar = op.time if op.bwd_time is None else op.bwd_time  # the LM head's: none forward, one backward
            t = np.maximum(ar - wgrad, 0.0) + ASYNC_TP_CONTENTION * np.minimum(ar, wgrad)
            nbytes = op.nbytes if op.bwd_nbytes is None else op.bwd_nbytes
            out.append(Op(f"{op.name}.bwd(async)", COMM, op.flops, nbytes, t, dim=op.dim))
            continue
        if op.kind == GEMM:
            g = op.grads
            d_t, d_b, w_t, w_b = (op.time, op.nbytes, op.time, op.nbytes) if g is None else \
                (g.dgrad_time, g.dgrad_nbytes, g.wgrad_time, g.wgrad_nbytes)
            out.append(Op(f"{op.name}.dgrad", GEMM, op.flops, d_b, d_t, selective=op.selective))
            out.append(Op(f"{op.name}.wgrad", GEMM, op.flops, w_b, w_t, selective=op.selective))
        elif op.kind == MEM:
            if op.bwd_nbytes is None:
                nbytes, t = MEM_BWD_TRAFFIC * op.nbytes, ctx.mem_time(MEM_BWD_TRAFFIC * op.nbytes)
            elif op.bwd_time is not None:  # the forward priced its own backward (a gradient's quantization)
                nbytes, t = op.bwd_nbytes, op.bwd_time
            else:  # the row's own backward kernels, none where the forward op is masked out
                nbytes = op.bwd_nbytes
                t = np.where(nbytes > 0, ctx.mem_time(nbytes, op.bwd_kernels), 0.0)
            out.append(Op(f"{op.name}.bwd", MEM, op.flops, nbytes, t))
        elif op.kind == ATTN:
            flops = BWD_ATTN_FLOPS * op.flops
            t = op.bwd_time if op.bwd_time is not None else ctx.flash_time(flops, 2.0 * op.nbytes, backward=True)
            out.append(Op(f"{op.name}.bwd", ATTN, flops, 2.0 * op.nbytes, t))
        else:  # the mirror collective, unless the forward knows its backward (the loss's all-reduces have none)
            nbytes = op.nbytes if op.bwd_nbytes is None else op.bwd_nbytes
            out.append(Op(f"{op.name}.bwd", COMM, op.flops, nbytes, op.time if op.bwd_time is None else op.bwd_time,
                          dim=op.dim))
    return out


def selective_part(fwd: list[Op]) -> list[Op]:
    """The forward ops selective recompute reruns by default (Megatron's core_attn): core attention, the unfused
    path's kernels or the flash kernel with its CP ring. Other modules: ``recompute_modules``."""
    return [op for op in fwd if op.selective]

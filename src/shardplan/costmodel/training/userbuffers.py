"""Transformer Engine's userbuffers comm+GEMM overlap: which layers it covers and how it splits their GEMMs.

To hide a sequence-parallel collective, TE runs the GEMM beside it as several smaller GEMMs over row chunks of the
tokens, one per piece of the collective (TransformerEngine@d0067d0 ``common/comm_gemm_overlap/
comm_gemm_overlap.cpp``): a ring-exchange all-gather (``split_overlap_ag``, ``aggregate=False``) runs ``tp`` GEMMs
of ``tokens/tp`` rows, each on the shard that has just arrived; a pipelined reduce-scatter (``split_overlap_rs``)
runs ``num_splits`` GEMMs of ``tokens/num_splits`` rows and reduce-scatters each chunk behind the next. Each chunk
is a kernel of its own: it pays its own launch and tail and runs at the efficiency of its smaller shape. TE's layer
defaults (``pytorch/module/base.py`` ``initialize_ub`` at d0067d0: ``methods``), which NeMo and Megatron-Bridge's
H100 configurations keep for these GEMMs (Megatron-Bridge@067f987 ``training/comm_overlap.py``):

- forward: QKV and FC1 behind the ring-exchange all-gather (``qkv_fprop``, ``fc1_fprop``): ``tp`` chunks; the
  output projection and FC2 ahead of the pipelined reduce-scatter (``proj_fprop``, ``fc2_fprop``): 4 chunks;
- backward: the output projection's and FC2's input gradient (``proj_dgrad``, ``fc2_dgrad``) behind the
  ring-exchange all-gather of the output gradient: ``tp`` chunks; QKV's and FC1's input and weight gradients and
  the other weight gradients run whole beside bulk collectives (``bulk``, ``external``).
"""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.training.layout import LayoutArrays
from shardplan.hardware.software import SoftwareSpec

UB_KINDS = ("attention", "sliding", "chunked", "mlp")  # layers Transformer Engine's userbuffers cover
UB_PIPELINE_SPLITS = 4  # PipelineOverlapCfg(num_splits=4): TE's default and every NeMo/Megatron-Bridge H100 config
RING_FPROP = ("attn.qkv", "mlp.fc1")  # qkv_fprop, fc1_fprop: ring-exchange all-gather, tp chunks
PIPELINE_FPROP = ("attn.out", "mlp.fc2")  # proj_fprop, fc2_fprop: pipelined reduce-scatter, 4 chunks
RING_DGRAD = ("attn.out", "mlp.fc2")  # proj_dgrad, fc2_dgrad: ring-exchange all-gather, tp chunks


def ub_on(rows: LayoutArrays, sw: SoftwareSpec) -> np.ndarray:
    """Rows whose sequence-parallel TP collectives run through userbuffers."""
    on = (rows.sp == 1) & (rows.tp > 1)
    return on & bool(sw.tp_comm_overlap and sw.tp_overlap_method == "userbuffers")


def ub_chunks(rows: LayoutArrays, sw: SoftwareSpec, name: str) -> tuple[np.ndarray | float, np.ndarray | float]:
    """Row chunks the GEMM ``name`` runs as, forward and input-gradient (1 where userbuffers leave it whole)."""
    if name not in RING_FPROP + PIPELINE_FPROP:
        return 1.0, 1.0
    on = ub_on(rows, sw)
    tp = rows.tp.astype(float)
    fwd = np.where(on, tp if name in RING_FPROP else float(UB_PIPELINE_SPLITS), 1.0)
    dgrad = np.where(on, tp, 1.0) if name in RING_DGRAD else 1.0
    return fwd, dgrad

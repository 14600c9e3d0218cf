"""Transformer Engine's userbuffers comm+GEMM overlap: where it runs and how it splits the GEMMs beside it.

To hide a sequence-parallel collective, TE runs the GEMM beside it as several smaller GEMMs, one per piece of the
collective (TransformerEngine@d0067d0 ``common/comm_gemm_overlap/comm_gemm_overlap.cpp``), each a kernel of its own
that pays its own launch and tail and runs at the efficiency of its smaller shape:

- a ring-exchange all-gather (``CommOverlapP2PBase::split_overlap_ag``, ``aggregate=False``) runs ``tp`` GEMMs of
  ``tokens/tp`` rows, each on the shard that has just arrived and each reading the whole weight;
- a pipelined reduce-scatter (``CommOverlapBase::split_overlap_rs``) runs ``num_splits`` GEMMs over column chunks
  (``m = A.size(0)``, A the weight: every token, ``out_features/num_splits`` columns, each reading the whole input
  and its share of the weight) and reduce-scatters each chunk behind the next.

TE's layer defaults (``pytorch/module/base.py`` ``initialize_ub`` at d0067d0: ``methods``), which Megatron-LM keeps
and NeMo's bf16 H100 configurations keep for these GEMMs:

- forward: QKV and FC1 behind the ring-exchange all-gather (``qkv_fprop``, ``fc1_fprop``): ``tp`` row chunks; the
  output projection and FC2 ahead of the pipelined reduce-scatter (``proj_fprop``, ``fc2_fprop``): 4 column chunks;
- backward: the output projection's and FC2's input gradient (``proj_dgrad``, ``fc2_dgrad``) behind the
  ring-exchange all-gather of the output gradient: ``tp`` row chunks; QKV's and FC1's input and weight gradients and
  the other weight gradients run whole beside bulk collectives (``bulk``, ``external``).

Megatron-Bridge's fp8 configurations (8 of its 9, Megatron-Bridge@067f987 ``training/comm_overlap.py``; some of its
bf16 B200 ones too) reduce-scatter ``proj_fprop``/``fc2_fprop`` by ring exchange instead (``RingExchangeOverlapCfg``;
``CommOverlapP2PBase::split_overlap_rs``): ``tp`` row chunks, each reading the whole weight, each chunk's partial sum
sent on while the next computes, then one kernel reducing the received chunks (``SoftwareSpec.tp_overlap_rs``; its
2·tp − 1 buffer chunks: ``memory.framework_memory``).

Where userbuffers do not run, Megatron's sequence-parallel collectives block:

- MLA models: Megatron-Core turns ``config.tp_comm_overlap`` off on the model's shared config when it builds a TE
  linear whose buffer name is not qkv/proj/fc1/fc2 (Megatron-LM@d98e8a6 ``extensions/transformer_engine.py``
  l.1176-1186), which MLA's down/up projections are, in the first layer;
- NVFP4: TE's userbuffers take Float8 and MXFP8 tensors only (``base.py`` ``fill_userbuffers_buffer_for_all_gather``:
  "Unsupported quantizer for Userbuffers").

Left whole (not modelled): MoE shared experts and Mamba/Gated DeltaNet projections, which Megatron builds with the
fc1/fc2 buffers; MTP layers, which run without userbuffers (their ``eh_proj`` buffer turns the overlap off).
"""

from __future__ import annotations

import numpy as np

from shardplan.costmodel.training.layout import LayoutArrays
from shardplan.hardware.software import SoftwareSpec
from shardplan.models.spec import ModelSpec

UB_KINDS = ("attention", "sliding", "chunked", "mlp")  # layers whose userbuffers overlap the model prices
UB_PIPELINE_SPLITS = 4  # PipelineOverlapCfg(num_splits=4): TE's default (initialize_ub ``get_default_config``)
RING_FPROP = ("attn.qkv", "mlp.fc1")  # qkv_fprop, fc1_fprop: ring-exchange all-gather, tp row chunks
PIPELINE_FPROP = ("attn.out", "mlp.fc2")  # proj_fprop, fc2_fprop: pipelined reduce-scatter, 4 column chunks (or ring)
RING_DGRAD = ("attn.out", "mlp.fc2")  # proj_dgrad, fc2_dgrad: ring-exchange all-gather, tp row chunks


def ub_blocked(model: ModelSpec, dtype: str, sw: SoftwareSpec) -> bool:
    """A Megatron + TE stack asked for userbuffers that cannot run them: its SP collectives block (MLA, NVFP4)."""
    return bool(sw.tp_comm_overlap) and sw.tp_overlap_method == "userbuffers" and (
        model.mla is not None or dtype == "fp4")


def ub_on(rows: LayoutArrays, sw: SoftwareSpec, model: ModelSpec, dtype: str) -> np.ndarray:
    """Rows whose sequence-parallel TP collectives run through userbuffers."""
    on = (rows.sp == 1) & (rows.tp > 1)
    return on & bool(sw.tp_comm_overlap and sw.tp_overlap_method == "userbuffers"
                     and not ub_blocked(model, dtype, sw))


def ub_chunks(rows: LayoutArrays, sw: SoftwareSpec, model: ModelSpec, dtype: str,
              name: str) -> tuple[np.ndarray | float, np.ndarray | float, np.ndarray | float]:
    """Chunks the GEMM ``name`` runs as (1 where userbuffers leave it whole): forward row chunks (tokens), forward
    column chunks (output features) and input-gradient row chunks."""
    if name not in RING_FPROP + PIPELINE_FPROP:
        return 1.0, 1.0, 1.0
    on = ub_on(rows, sw, model, dtype)
    tp = rows.tp.astype(float)
    ring_rs = sw.tp_overlap_rs == "ring_exchange"
    rows_f = np.where(on, tp, 1.0) if name in RING_FPROP or (ring_rs and name in PIPELINE_FPROP) else 1.0
    cols_f = np.where(on, float(UB_PIPELINE_SPLITS), 1.0) if name in PIPELINE_FPROP and not ring_rs else 1.0
    dgrad = np.where(on, tp, 1.0) if name in RING_DGRAD else 1.0
    return rows_f, cols_f, dgrad

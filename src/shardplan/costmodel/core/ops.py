"""Operator records shared by every job: one kernel or collective, and sums over a phase's operators.

An ``Op`` is a kernel or a collective with its FLOPs, bytes and time as numpy arrays (one entry per layout row);
``PhaseCost`` sums a list of them. Training, serving and offload contexts build ``Op`` lists from the layer
operators and time them with ``core.kernels`` and ``core.comm``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GEMM, MEM, ATTN, COMM = "gemm", "mem", "attn", "comm"
# The GPU idle while the host catches up after a host-device synchronisation: no FLOPs, no bytes, forward only.
HOST = "host"


@dataclass(frozen=True, slots=True)
class GemmGrads:
    """A training GEMM's two backward GEMMs, each timed at its own (M, N, K) shape and traffic: the input gradient
    (dgrad) and the weight gradient (wgrad)."""

    dgrad_time: np.ndarray
    dgrad_nbytes: np.ndarray
    wgrad_time: np.ndarray
    wgrad_nbytes: np.ndarray

    def scaled(self, factor: np.ndarray | float) -> GemmGrads:
        """Both GEMMs' times ``factor`` times as long (the busiest EP rank's share of the routed tokens)."""
        return GemmGrads(self.dgrad_time * factor, self.dgrad_nbytes, self.wgrad_time * factor, self.wgrad_nbytes)

    def where(self, when: np.ndarray) -> GemmGrads:
        """Zero where ``when`` is false."""
        z = np.zeros_like(self.dgrad_time)
        return GemmGrads(*(np.where(when, x, z) for x in (self.dgrad_time, self.dgrad_nbytes, self.wgrad_time,
                                                           self.wgrad_nbytes)))


@dataclass(frozen=True, slots=True)
class Op:
    """One kernel or collective: per-GPU FLOPs, bytes (HBM traffic, or message size for comm), seconds."""

    name: str
    kind: str
    flops: np.ndarray
    nbytes: np.ndarray
    time: np.ndarray
    dim: str = ""  # parallel dimension of a collective: tp, cp, ep
    selective: bool = False  # part of core attention that selective recompute reruns
    bwd_nbytes: np.ndarray | None = None  # an elementwise op's backward traffic when its stack's row gives it
    bwd_kernels: int = 1  # kernels that backward traffic is spread over
    bwd_time: np.ndarray | None = None  # the backward's time when the forward op knows it (a quantization's gradient)
    grads: GemmGrads | None = None  # a GEMM's backward GEMMs at their own shapes (else both priced as the forward)


@dataclass(frozen=True, slots=True)
class PhaseCost:
    """Sums over a list of ops: FLOPs, HBM bytes, compute time, collective time per dimension, and the time the
    GPU idles on the host (MoE token-count synchronisations)."""

    flops: np.ndarray
    nbytes: np.ndarray
    time: np.ndarray
    comm_tp: np.ndarray
    comm_cp: np.ndarray
    comm_ep: np.ndarray
    host: np.ndarray

    @classmethod
    def of(cls, ops: list[Op], like: np.ndarray) -> PhaseCost:
        zero = np.zeros(np.shape(like), dtype=float)

        def total(sel) -> np.ndarray:
            return zero + sum((op_val for op in ops if (op_val := sel(op)) is not None), start=zero)

        return cls(
            flops=total(lambda o: o.flops if o.kind != COMM else None),
            nbytes=total(lambda o: o.nbytes if o.kind != COMM else None),
            time=total(lambda o: o.time),
            comm_tp=total(lambda o: o.time if o.dim == "tp" else None),
            comm_cp=total(lambda o: o.time if o.dim == "cp" else None),
            comm_ep=total(lambda o: o.time if o.dim == "ep" else None),
            host=total(lambda o: o.time if o.kind == HOST else None),
        )

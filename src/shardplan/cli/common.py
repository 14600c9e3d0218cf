"""Helpers shared by the job commands: resolving inputs and parsing percentages."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from shardplan.errors import ShardplanError


def model_notes(spec: Any, job: str = "train") -> list[str]:
    """What of this model the cost model does not yet cost exactly: said on stderr, never left silent. Training and
    serving cost every layer kind (sliding, chunked, Gated DeltaNet, Mamba-2, sinks, output gate); the offload job
    still prices one average attention layer."""
    from shardplan.models import Mixer

    counts = spec.mixer_counts()
    notes = []
    if job == "offload":
        windowed = [f"{counts[k]} {name}" for k, name in ((Mixer.SLIDING, "sliding-window"),
                                                          (Mixer.CHUNKED, "chunked")) if counts.get(k)]
        if windowed:
            notes.append(f"{' and '.join(windowed)} attention layers are costed as full attention by the offload "
                         "job (FLOPs and KV cache over the whole context: FlexGen's runtime keeps no windowed cache)")
        other = [f"{counts[k]} {name}" for k, name in ((Mixer.LINEAR, "linear-attention"),
                                                     (Mixer.MAMBA, "Mamba-2"), (Mixer.NONE, "MLP-only"))
                 if counts.get(k)]
        if other:
            notes.append(f"{' and '.join(other)} layers are costed by the offload job as attention layers of the "
                         "model's attention shape")
        extras = [name for flag, name in ((spec.attention_sinks, "attention sinks"),
                                          (spec.attn_output_gate, "the attention output gate")) if flag]
        if extras:
            notes.append(f"{' and '.join(extras)} not costed by the offload job")
    if spec.sparse_attention is not None:
        notes.append("DeepSeek sparse attention: the indexer is not costed and attention is costed dense")
    if spec.mtp_layers and job == "train":
        notes.append(f"{spec.mtp_layers} MTP layer(s) in the checkpoint ({spec.mtp_params / 1e9:.3g}B params "
                     "apart): trained only as --mtp-layers says")
    elif spec.mtp_layers:
        notes.append(f"{spec.mtp_layers} MTP layer(s) not planned ({spec.mtp_params / 1e9:.3g}B params apart)")
    if spec.vision_params:
        notes.append(f"vision tower not planned ({spec.vision_params / 1e9:.3g}B params apart); the text model is")
    if spec.dtype not in ("bf16", "fp16", "fp32", "fp8"):
        if job == "train" and spec.dtype in ("mxfp4", "nvfp4") and spec.moe is not None:
            notes.append(f"released experts are {spec.dtype}: serving keeps them so unless --weight-dtype says "
                         "otherwise; training costs the datatype --dtype gives")
        else:
            notes.append(f"released weights are {spec.dtype}; costed in the datatype the options give")
    return notes


def warn_model(spec: Any, job: str = "train") -> None:
    """Queue the model's notes for ``job`` (printed on stderr when the command succeeds)."""
    from shardplan.cli.notes import note

    for text in model_notes(spec, job):
        note(text)


def resolve_inputs(model: str, hardware: str, gpus: int | None, tokens: int | None = None) -> tuple[Any, Any, int]:
    """ModelSpec, SystemSpec and the GPU count (default: one node); notes on a bare GPU name and on sequences of
    ``tokens`` beyond the model's trained context."""
    from shardplan.cli.notes import context_note, hardware_note
    from shardplan.hardware import resolve_system
    from shardplan.hardware.domains import job_system
    from shardplan.models import resolve_model

    spec = resolve_model(model)
    warn_model(spec)
    system = resolve_system(hardware)
    hardware_note(hardware)
    if tokens is not None:
        context_note(spec, tokens)
    n = gpus if gpus is not None else system.gpus_per_node
    if n < 1:
        raise ShardplanError(f"must be ≥ 1 (got {n})", field="gpus")
    return spec, job_system(system, n), n


def parse_fraction(text: str | None, *, field: str) -> float:
    """A fraction from ``20%``, ``20`` (percent) or ``0.2``; must lie in [0, 1]."""
    if text is None:
        return 0.0
    t = text.strip()
    try:
        v = float(t.rstrip("%"))
    except ValueError:
        raise ShardplanError(f"'{text}' is not a percentage (use e.g. 20% or 0.2)", field=field) from None
    if t.endswith("%") or v > 1:
        v /= 100
    if not 0 <= v <= 1:  # also refuses nan and inf
        raise ShardplanError(f"must be between 0% and 100% (got {text})", field=field)
    return v


def parse_triplet(text: str, *, field: str) -> tuple[float, float, float]:
    """``G,C,D`` percentages on GPU, CPU and disk summing to 100, as fractions."""
    parts = [p.strip() for p in text.split(",")]
    try:
        vals = [float(p.rstrip("%")) for p in parts]
    except ValueError:
        vals = []
    if len(vals) != 3 or any(not 0 <= v <= 100 for v in vals):  # `not 0 ≤ v ≤ 100` also refuses nan
        raise ShardplanError(f"'{text}' must be three percentages GPU,CPU,DISK such as 20,80,0", field=field)
    if abs(sum(vals) - 100) > 1e-6:
        raise ShardplanError(f"'{text}' must sum to 100 (got {sum(vals):g})", field=field)
    return vals[0] / 100, vals[1] / 100, vals[2] / 100


def check_writable(path: Path, *, field: str) -> None:
    """Refuse an output file that cannot be written, before any work: a folder, a missing or read-only folder,
    a read-only file, a name too long. (A device such as /dev/full passes; its write error is caught later.)"""
    if any(len(part) > 255 for part in path.parts) or len(str(path)) > 4096:
        raise ShardplanError("file name too long (at most 255 characters per component)", field=field)
    if "\x00" in str(path):
        raise ShardplanError("file name contains a NUL character", field=field)
    if path.is_dir():
        raise ShardplanError(f"'{path}' is a folder; name a file", field=field)
    folder = path.parent
    if not folder.is_dir():
        raise ShardplanError(f"folder '{folder}' does not exist", field=field)
    if path.exists():
        if not os.access(path, os.W_OK):
            raise ShardplanError(f"cannot write '{path}': permission denied", field=field)
    elif not os.access(folder, os.W_OK | os.X_OK):
        raise ShardplanError(f"cannot write in folder '{folder}': permission denied", field=field)


def write_output(path: Path, text: str, *, field: str = "output") -> None:
    """Write ``text`` to ``path``; a write error (disk full, /dev/full) is one line, exit 2."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise ShardplanError(f"cannot write '{path}': {e.strerror or e}", field=field) from None

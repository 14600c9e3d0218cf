"""Offloaded generation on one GPU (FlexGen's block schedule): workload and placement inputs (``policy``), the
per-layer lane and memory terms linear in the placement (``terms``), their table over knob rows (``table``), and
``estimate_offload`` (``evaluate``, schemas in ``report``)."""

"""Training cost: a microbatch's forward, backward and recompute operators per layer kind (``layers``, ``ctx``),
how layers fall onto pipeline stages (``stages``), activation and parameter memory (``memory``), the step
(pipeline bubble, DP/ZeRO communication, optimizer: ``step``), the valid layouts (``space``), the planner's cost
table (``table``) and the float reference ``estimate_training`` (``evaluate``, schemas in ``report``)."""

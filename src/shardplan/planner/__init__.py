"""Which layout to pick: CP-SAT models over cost tables, and a brute-force reference. Never renders."""

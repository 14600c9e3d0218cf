"""The physics every job shares: operator records, kernel timing, collectives, layout arithmetic, result head."""

"""EdgeDrift."""

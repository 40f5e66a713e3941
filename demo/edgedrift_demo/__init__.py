"""The EdgeDrift end-to-end demo."""

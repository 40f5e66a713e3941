"""Bounded per-device structures: recent ids and samples, warm-up rows, score windows, the gateway's
fair queue. Plain data and numpy, no I/O."""

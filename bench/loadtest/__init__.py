"""The cloud trainer load benchmark (``bench/trainer_load.py``): windows, the in-process peer, the load
clients, the per-section breakdown, py-spy sections and the report."""

"""Parts of ``bench/shrub_ensembles.py``."""

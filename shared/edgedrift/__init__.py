"""EdgeDrift learning core: the code both the edge agent and the cloud trainer run."""

__version__ = "0.1.0"

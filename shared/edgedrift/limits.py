"""Limits the edge and the cloud share, in a module that imports nothing (the agent's settings read it
before numpy is loaded, whose BLAS thread count the command sets first)."""

from __future__ import annotations

#: The widest sample anywhere: the agent's ``n_features`` setting, a width locked from the data, and the
#: cloud's windows (``max_features`` defaults to it) all stop here, so a width the edge accepts is one the
#: cloud trains (a wider sample is rejected at the edge with a reason that names this limit).
MAX_FEATURES = 4096

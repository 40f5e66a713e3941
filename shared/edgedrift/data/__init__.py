"""Data streams for EdgeDrift: real data sets, CSV files and the synthetic drifting streams of the paper.

Everything returns a :class:`Stream` (rows in arrival order; class labels coded as :mod:`edgedrift.labels`
says: ±1 for two classes, 0..C−1 beyond). The
generators based on river import it lazily, so this package imports without river installed.
"""

from edgedrift.data.datasets import (
    KNOWN_DATASETS,
    load_covtype,
    load_dataset,
    load_elec2,
    load_image_segments,
)
from edgedrift.data.download import ChecksumError, cache_dir, data_dir, fetch
from edgedrift.data.drift_streams import load_drift_stream
from edgedrift.data.files import load_arff, load_csv
from edgedrift.data.generators import hyperplane, rbf_drift, ridge_stream, sea, sine1plus
from edgedrift.data.sine_multiclass import sine_mc
from edgedrift.data.stream import Stream

__all__ = [
    "KNOWN_DATASETS",
    "ChecksumError",
    "Stream",
    "cache_dir",
    "data_dir",
    "fetch",
    "hyperplane",
    "load_arff",
    "load_covtype",
    "load_csv",
    "load_dataset",
    "load_drift_stream",
    "load_elec2",
    "load_image_segments",
    "rbf_drift",
    "ridge_stream",
    "sea",
    "sine1plus",
    "sine_mc",
]

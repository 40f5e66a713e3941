"""Real drift-benchmark streams: outdoor objects, keystroke dynamics and the two Usenet streams.

In development each is read from its converted copy in ``EDGEDRIFT_DATA_DIR`` (``outdoor.csv`` …, a
header ``x1..xd,target``); on a user's machine the public original is downloaded into the cache once
(``outdoor`` and ``keystroke`` from the driftDatasets repository of Losing et al., as a text matrix and
a label file; ``usenet1``/``usenet2`` from the ConceptDriftDatasets repository, as ARFF, which needs the
``arff`` extra). Either way the parsed values are checked against a SHA-256 of their float64 bytes, so
every copy yields the same stream whatever its text format.

* ``outdoor`` (Losing, Hammer, Wersing 2015): 4,000 images of 40 objects taken outdoors while the light
  and the weather changed, 21 colour-histogram features, 40 classes recorded in order: gradual drift.
* ``keystroke`` (Souza et al. 2015): 1,600 typing samples of 4 typists, 10 timing features; the rhythm
  drifts over the sessions.
* ``usenet1``, ``usenet2`` (Katakis et al. 2008): 1,500 posts, 99 word-presence features; the user's
  interest (the label) changes every 300 posts: recurring abrupt drift.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgedrift.data.download import ChecksumError, data_dir, fetch
from edgedrift.data.files import load_arff, load_csv
from edgedrift.data.stream import Stream
from edgedrift.labels import ClassLabels
from edgedrift.models.losses import FloatArray

__all__ = ["DRIFT_STREAMS", "content_sha256", "load_drift_stream"]

_LOSING = "https://raw.githubusercontent.com/vlosing/driftDatasets/{commit}/{path}"
_LIU = "https://raw.githubusercontent.com/Anjin-Liu/ConceptDriftDatasets/{commit}/{path}"


def content_sha256(X: FloatArray, labels: FloatArray) -> str:
    """SHA-256 of a stream's values: the features, then the original labels, as little-endian float64."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(X, dtype="<f8").tobytes())
    h.update(np.ascontiguousarray(labels, dtype="<f8").tobytes())
    return h.hexdigest()


def _matrix_and_labels(paths: list[Path]) -> tuple[FloatArray, FloatArray]:
    """A whitespace-separated feature matrix and a label file of one number per line."""
    X = np.loadtxt(paths[0], dtype=np.float64, ndmin=2)
    labels = np.loadtxt(paths[1], dtype=np.float64, ndmin=1)
    if len(labels) != len(X):
        raise ValueError(f"{paths[1]}: {len(labels)} labels for {len(X)} rows of {paths[0]}")
    return X, labels


def _arff_rows(paths: list[Path]) -> tuple[FloatArray, FloatArray]:
    stream = load_arff(paths[0])
    return stream.X, np.asarray(stream.labels.decode(stream.y), dtype=np.float64)


@dataclass(frozen=True)
class DriftStream:
    """Where one stream comes from and what its values must hash to."""

    name: str
    csv_name: str
    #: (name for ``fetch`` and its ``EDGEDRIFT_<NAME>_URL`` override, file name, URL of the public original)
    sources: tuple[tuple[str, str, str], ...]
    parse: Callable[[list[Path]], tuple[FloatArray, FloatArray]]
    values_sha256: str


def _losing(name: str, folder: str, stem: str, commit: str) -> tuple[tuple[str, str, str], ...]:
    """The matrix and label files of one stream in the driftDatasets repository (pinned commit)."""
    return tuple(
        (f"{name}-{ext}", f"{stem}.{ext}", _LOSING.format(commit=commit, path=f"{folder}/{stem}.{ext}"))
        for ext in ("data", "labels")
    )


def _liu(name: str) -> tuple[tuple[str, str, str], ...]:
    """The ARFF file of one Usenet stream in the ConceptDriftDatasets repository (pinned commit)."""
    path = f"RealWorld/usenet1_2/{name}.arff"
    url = _LIU.format(commit="ae10fa8b35d2964235478731b70d7b9354335c65", path=path)
    return ((name, f"{name}.arff", url),)


DRIFT_STREAMS: dict[str, DriftStream] = {
    s.name: s
    for s in (
        DriftStream(
            "outdoor",
            "outdoor.csv",
            _losing(
                "outdoor", "realWorld/outdoor", "outdoorStream", "89f1665ed89af78caecabec62c680a57a4f16646"
            ),
            _matrix_and_labels,
            "e6addfd6c94ea57ce1c1f60c7314bfff3c6ecb1759d5fbc40bb74657a6f22b08",
        ),
        DriftStream(
            "keystroke",
            "keystroke.csv",
            _losing("keystroke", "artificial/souza", "keystroke", "7c25ef901425fc2ef61a7449b0c540f21e0a24a4"),
            _matrix_and_labels,
            "e46fbcace4f43bfbf11d485921e51496e1edeeb2a2351769917394a304d1284b",
        ),
        DriftStream(
            "usenet1",
            "usenet1.csv",
            _liu("usenet1"),
            _arff_rows,
            "98e9231da39ffa1f063732a9cb63ab2832cf81df1ccbe711bb7faaba31896a9b",
        ),
        DriftStream(
            "usenet2",
            "usenet2.csv",
            _liu("usenet2"),
            _arff_rows,
            "fc4ae8fc7d3d96b13c38d6a2ba213946f13387f11a6d79bf3abe1ea264261d60",
        ),
    )
}


def load_drift_stream(name: str) -> Stream:
    """One of :data:`DRIFT_STREAMS` as a classification stream (classes named by the original labels)."""
    spec = DRIFT_STREAMS[name]
    local = data_dir()
    if local is not None and (local / spec.csv_name).is_file():
        path = local / spec.csv_name
        copy = load_csv(path, "target", task="classification")
        X, raw = copy.X, np.asarray(copy.labels.decode(copy.y), dtype=np.float64)
        source = str(path)
    else:
        paths = [fetch(key, url, None, filename) for key, filename, url in spec.sources]
        X, raw = spec.parse(paths)
        source = ", ".join(str(p) for p in paths)
    actual = content_sha256(X, raw)
    if actual != spec.values_sha256:
        raise ChecksumError(
            f"{name}: the values read from {source} hash to {actual}, expected {spec.values_sha256}"
        )
    labels = ClassLabels.from_values(raw.tolist())
    return Stream(
        name=name,
        X=X,
        y=labels.encode(raw.tolist()),
        task="classification",
        feature_names=tuple(f"x{j + 1}" for j in range(X.shape[1])),
        meta={"source": source},
        classes=labels.names,
    )

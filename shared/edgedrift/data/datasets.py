"""Real data sets (ELEC2, Covertype) and the ``load_dataset`` spec dispatcher over every stream.

Files come through :func:`~edgedrift.data.download.fetch`: the local data directory, the cache, or a
verified download of the public original.
"""

from __future__ import annotations

import csv
import gzip
import inspect
import os
import sys
import tempfile
import zipfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from edgedrift.data import generators
from edgedrift.data.download import cache_dir, fetch, resolve_source
from edgedrift.data.drift_streams import DRIFT_STREAMS, load_drift_stream
from edgedrift.data.files import load_arff, load_csv
from edgedrift.data.sine_multiclass import sine_mc
from edgedrift.data.stream import Stream
from edgedrift.models.losses import FloatArray

ELEC2_URL = "https://raw.githubusercontent.com/scikit-multiflow/streaming-datasets/master/elec.csv"
ELEC2_SHA256 = "cdf901433885f29eca6911f70c0eeafb50d90596c879c30c5b99f5a2e8e734ff"
ELEC2_COLUMNS = ("period", "nswprice", "nswdemand", "vicprice", "vicdemand", "transfer", "class")

#: The figshare copy of UCI's covtype.data.gz that scikit-learn's ``fetch_covtype`` downloads.
COVTYPE_URL = "https://ndownloader.figshare.com/files/5976039"
COVTYPE_SHA256 = "614360d0257557dd1792834a85a1cdebfadc3c4f30b011d56afee7ffb5b15771"
COVTYPE_FEATURES: tuple[str, ...] = (
    "Elevation",
    "Aspect",
    "Slope",
    "Horizontal_Distance_To_Hydrology",
    "Vertical_Distance_To_Hydrology",
    "Horizontal_Distance_To_Roadways",
    "Hillshade_9am",
    "Hillshade_Noon",
    "Hillshade_3pm",
    "Horizontal_Distance_To_Fire_Points",
    *(f"Wilderness_Area_{i}" for i in range(1, 5)),
    *(f"Soil_Type_{i}" for i in range(1, 41)),
)
#: Bumped whenever the layout of the parsed covtype ``.npz`` cache changes.
_COVTYPE_NPZ_VERSION = 1


#: The demand and transfer columns of ELEC2: the features of ``elec2-noprice``.
ELEC2_NOPRICE = ("nswdemand", "vicdemand", "transfer")


def load_elec2(drop_period: bool = True, drop_prices: bool = False) -> Stream:
    """ELEC2 (Harries 1999; DRUiD paper Section 5.2): 45,312 half-hourly NSW price moves, UP = +1.

    The normalised scikit-multiflow copy has the date and day already removed. ``drop_period=True`` gives
    the paper's 5 features (nswprice, nswdemand, vicprice, vicdemand, transfer); False keeps ``period``
    first (6 features, as in the Online-BLS paper).

    The class is exactly "nswprice above its mean over the previous 48 samples" (0 errors on the scored
    samples), so a learner that tracks recent prices rebuilds the label. ``drop_prices=True`` gives
    ``elec2-noprice``: the three demand/transfer columns only (:data:`ELEC2_NOPRICE`), where the label
    must be predicted rather than recomputed.
    """
    path = fetch("elec2", ELEC2_URL, ELEC2_SHA256, "elec.csv")
    with path.open(newline="") as f:
        header = tuple(c.strip() for c in next(csv.reader(f), []))
    if header != ELEC2_COLUMNS:
        raise ValueError(f"{path}: unexpected ELEC2 header {header}, expected {ELEC2_COLUMNS}")
    data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
    labels = data[:, -1]
    if not np.isin(labels, (0.0, 1.0)).all():
        raise ValueError(f"{path}: ELEC2 class column must be 0/1, found {np.unique(labels)[:10]}")
    if drop_prices:
        names: tuple[str, ...] = ELEC2_NOPRICE
        name = "elec2-noprice"
    else:
        names = ELEC2_COLUMNS[0 if not drop_period else 1 : -1]
        name = "elec2" if drop_period else "elec2-6"
    columns = [ELEC2_COLUMNS.index(c) for c in names]
    return Stream(
        name=name,
        X=np.ascontiguousarray(data[:, columns]),
        y=np.where(labels == 1.0, 1.0, -1.0),
        task="classification",
        feature_names=names,
        meta={"source": str(path)},
        classes=("DOWN", "UP"),
    )


def _parse_covtype(path: Path) -> tuple[FloatArray, np.ndarray[Any, np.dtype[np.int8]]]:
    """Parse covtype.data(.gz): 54 integer features and the cover type 1..7 per line."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = np.loadtxt(f, delimiter=",", dtype=np.float64, ndmin=2)
    if data.shape[1] != len(COVTYPE_FEATURES) + 1:
        raise ValueError(f"{path}: expected {len(COVTYPE_FEATURES) + 1} columns, got {data.shape[1]}")
    cover = data[:, -1]
    if not np.isin(cover, np.arange(1.0, 8.0)).all():
        raise ValueError(f"{path}: cover type must be 1..7, found {np.unique(cover)[:10]}")
    return np.ascontiguousarray(data[:, :-1]), cover.astype(np.int8)


def _compact(X: FloatArray) -> np.ndarray[Any, Any]:
    """The smallest lossless dtype for the npz cache (covtype's features are small integers)."""
    if X.size and np.array_equal(X, np.round(X)):
        lo, hi = X.min(), X.max()
        for dtype in (np.int16, np.int32):
            info = np.iinfo(dtype)
            if info.min <= lo and hi <= info.max:
                return X.astype(dtype)
    return X


def load_covtype(binary: bool = True) -> Stream:
    """Forest Covertype (Blackard & Dean 1999): 581,012 samples, 54 attributes.

    ``binary=True`` (``covtype``, DRUiD paper Section 5.3): Lodgepole Pine (class 2) = +1, the other six
    cover types = −1 (nearly balanced). ``binary=False`` (``covtype-7``, Online-BLS paper Table 7): the
    seven cover types as classes 1..7 (codes 0..6). The parsed arrays are cached as ``covtype.npz`` in the
    cache directory, tagged with the archive's SHA-256, so later loads skip both the download and the slow
    text parsing.
    """
    _, sha256 = resolve_source("covtype", COVTYPE_URL, COVTYPE_SHA256)
    npz_path = cache_dir() / "covtype" / "covtype.npz"
    X: FloatArray | None = None
    cover: np.ndarray[Any, Any] | None = None
    if npz_path.is_file():
        try:
            with np.load(npz_path, allow_pickle=False) as npz:
                if int(npz["version"]) == _COVTYPE_NPZ_VERSION and str(npz["source_sha256"]) == str(sha256):
                    X = npz["X"].astype(np.float64)
                    cover = npz["cover"]
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            print(f"edgedrift: covtype: ignoring unreadable cache {npz_path}: {exc}", file=sys.stderr)
            X = cover = None
    source = str(npz_path)
    if X is None or cover is None:
        gz = fetch("covtype", COVTYPE_URL, COVTYPE_SHA256, "covtype.data.gz")
        source = str(gz)
        X, cover = _parse_covtype(gz)
        npz_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=npz_path.parent, prefix=".covtype.", suffix=".npz.part")
        try:
            with os.fdopen(fd, "wb") as out:
                np.savez(
                    out,
                    X=_compact(X),
                    cover=cover,
                    source_sha256=np.str_(sha256),
                    version=np.int64(_COVTYPE_NPZ_VERSION),
                )
            os.replace(tmp_name, npz_path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
    counts = {int(c): int(k) for c, k in zip(*np.unique(cover, return_counts=True), strict=True)}
    if binary:
        return Stream(
            name="covtype",
            X=X,
            y=np.where(cover == 2, 1.0, -1.0),
            task="classification",
            feature_names=COVTYPE_FEATURES,
            meta={"source": source, "cover_type_counts": counts},
            classes=("cover types 1, 3-7", "Lodgepole Pine (2)"),
        )
    return Stream(
        name="covtype-7",
        X=X,
        y=cover.astype(np.float64) - 1.0,
        task="classification",
        feature_names=COVTYPE_FEATURES,
        meta={"source": source, "cover_type_counts": counts},
        classes=tuple(range(1, 8)),
    )


def load_image_segments() -> Stream:
    """UCI Image Segmentation (Online-BLS paper Table 3, "IS"): 2,310 3×3 pixel regions of 7 outdoor
    images, 7 classes coded 0..6 in alphabetical order of their names, in the file's order.

    The copy river ships (``river.datasets.ImageSegments``, no download) has 18 of UCI's 19 attributes:
    ``region-pixel-count`` is 9 in every row and is left out. Needs the ``river`` extra.
    """
    from river.datasets import ImageSegments

    rows = list(ImageSegments())
    names = tuple(rows[0][0])
    classes = tuple(sorted({str(label) for _, label in rows}))
    code = {name: float(i) for i, name in enumerate(classes)}
    return Stream(
        name="image-segment",
        X=np.array([[x[k] for k in names] for x, _ in rows], dtype=np.float64),
        y=np.array([code[str(label)] for _, label in rows]),
        task="classification",
        feature_names=names,
        meta={"source": "river.datasets.ImageSegments (UCI Image Segmentation)"},
        classes=classes,
    )


_GENERATORS: dict[str, tuple[Callable[..., Stream], dict[str, Any]]] = {
    "sine1": (generators.sine1plus, {"d": 2, "sigma": 1.0}),
    "sine1+": (generators.sine1plus, {}),
    "sine-mc": (sine_mc, {}),
    "ridge": (generators.ridge_stream, {}),
    "sea": (generators.sea, {}),
    "hyperplane": (generators.hyperplane, {}),
    "rbf": (generators.rbf_drift, {}),
    "rbf-imbalanced": (generators.rbf_imbalanced, {}),
}
_REAL: dict[str, Callable[[], Stream]] = {
    "elec2": lambda: load_elec2(drop_period=True),
    "elec2-6": lambda: load_elec2(drop_period=False),
    "elec2-noprice": lambda: load_elec2(drop_prices=True),
    "covtype": load_covtype,
    "covtype-7": lambda: load_covtype(binary=False),
    **{name: partial(load_drift_stream, name) for name in DRIFT_STREAMS},
    "image-segment": load_image_segments,
}
KNOWN_DATASETS: tuple[str, ...] = (*_REAL, "csv:PATH", "arff:PATH", *_GENERATORS)


def _coerce(spec: str, key: str, text: str, default: Any) -> Any:
    """Convert a spec parameter to the type of the generator's default value."""
    try:
        if isinstance(default, tuple):
            item = default[0] if default else 0  # parts take the type of the default's items
            return tuple(_coerce(spec, key, part, item) for part in text.split(";") if part.strip())
        if isinstance(default, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if isinstance(default, int):
            value = float(text)
            if not value.is_integer():
                raise ValueError(text)
            return int(value)
        return float(text)
    except ValueError:
        expected = type(default).__name__ if default is not None else "float"
        raise ValueError(
            f"dataset spec {spec!r}: parameter {key}={text!r} is not a valid {expected}"
        ) from None


def _parse_params(spec: str, text: str, func: Callable[..., Stream], fixed: dict[str, Any]) -> dict[str, Any]:
    signature = inspect.signature(func).parameters
    allowed = [k for k in signature if k not in fixed]
    params: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"dataset spec {spec!r}: expected key=value, got {item!r}")
        if key not in allowed:
            raise ValueError(f"dataset spec {spec!r}: unknown parameter {key!r}; allowed: {allowed}")
        if key in params:
            raise ValueError(f"dataset spec {spec!r}: parameter {key!r} given twice")
        params[key] = _coerce(spec, key, value.strip(), signature[key].default)
    return params


def load_dataset(spec: str, target: str | None = None, seed: int = 0) -> Stream:
    """A stream from a spec string: a real data set (``elec2``, ``elec2-6``, ``elec2-noprice``, ``covtype``,
    ``covtype-7``, ``outdoor``, ``keystroke``, ``usenet1``, ``usenet2``, ``image-segment``), ``csv:PATH``
    (with ``target``), ``arff:PATH`` (``target`` optional: the last attribute), or a generator ``sine1``,
    ``sine1+``, ``sine-mc``, ``ridge``, ``sea``, ``hyperplane``, ``rbf``, ``rbf-imbalanced`` with optional
    ``:key=value,...`` parameters (e.g. ``sine1+:d=10,sigma=100``, ``rbf-imbalanced:mean=20000,var=50``;
    tuples as ``drift_at=100;200``).

    ``seed`` seeds the generators unless the spec sets ``seed`` itself; real data sets ignore it.
    """
    name, _, rest = spec.strip().partition(":")
    name = name.strip().lower()
    if name == "csv":
        if not rest:
            raise ValueError(f"dataset spec {spec!r}: expected csv:PATH")
        if target is None:
            raise ValueError(f"dataset spec {spec!r}: a CSV data set needs a target column (target=...)")
        return load_csv(rest, target)
    if name == "arff":
        if not rest:
            raise ValueError(f"dataset spec {spec!r}: expected arff:PATH")
        return load_arff(rest, target)
    if target is not None:
        raise ValueError(f"dataset spec {spec!r}: target={target!r} only applies to csv:PATH and arff:PATH")
    if name in _REAL:
        if rest.strip():
            raise ValueError(f"dataset spec {spec!r}: {name} takes no parameters")
        return _REAL[name]()
    if name in _GENERATORS:
        func, fixed = _GENERATORS[name]
        params = {"seed": seed, **fixed, **_parse_params(spec, rest, func, fixed)}
        return func(**params)
    raise ValueError(f"unknown dataset {spec!r}; known: {', '.join(KNOWN_DATASETS)}")

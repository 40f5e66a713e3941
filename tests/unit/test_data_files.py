"""Loading a user's own CSV and ARFF files: binary, multi-class and regression targets, precise errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgedrift.data import load_arff, load_csv
from edgedrift.data.files import MAX_INFERRED_CLASSES

SHARED_DATA = os.environ.get("EDGEDRIFT_DATA_DIR", "")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_csv_classification_with_string_labels(tmp_path: Path) -> None:
    f = write(
        tmp_path / "d.csv", "date,a,b,label\n2020-01-01,1,2,UP\n2020-01-02,3,4,DOWN\n2020-01-03,5,6,UP\n"
    )
    s = load_csv(f, "label")
    assert s.task == "classification" and s.feature_names == ("a", "b")
    np.testing.assert_array_equal(s.y, [1.0, -1.0, 1.0])
    assert s.classes == ("DOWN", "UP") and s.n_classes == 2
    assert s.meta["skipped_columns"] == ("date",)
    np.testing.assert_array_equal(s.X, [[1, 2], [3, 4], [5, 6]])


def test_csv_multiclass(tmp_path: Path) -> None:
    """Text labels, or a few integer values, are classes: sorted, coded 0..C-1, names kept."""
    f = write(tmp_path / "m.csv", "a,t\n1,oak\n2,ash\n3,elm\n4,ash\n")
    s = load_csv(f, "t")
    assert s.task == "classification" and s.classes == ("ash", "elm", "oak") and s.n_classes == 3
    np.testing.assert_array_equal(s.y, [2.0, 0.0, 1.0, 0.0])
    ints = write(tmp_path / "i.csv", "a,t\n1,10\n2,3\n3,7\n4,3\n")
    s = load_csv(ints, "t")
    assert s.classes == (3, 7, 10)
    np.testing.assert_array_equal(s.y, [2.0, 0.0, 1.0, 0.0])
    assert load_csv(ints, "t", task="regression").task == "regression"
    rows = "".join(f"{i},{i}\n" for i in range(MAX_INFERRED_CLASSES + 1))
    many = write(tmp_path / "many.csv", "a,t\n" + rows)
    assert load_csv(many, "t").task == "regression"  # more integer values than a class column has


@pytest.mark.skipif(not SHARED_DATA, reason="EDGEDRIFT_DATA_DIR is not set")
@pytest.mark.parametrize(
    ("name", "n_classes", "d"), [("outdoor", 40, 21), ("keystroke", 4, 10), ("usenet1", 2, 99)]
)
def test_csv_real_multiclass_streams(name: str, n_classes: int, d: int) -> None:
    """The multi-class streams of the data directory load as classes (the acceptance's csv: command)."""
    s = load_csv(Path(SHARED_DATA) / f"{name}.csv", "target")
    assert s.task == "classification" and s.n_classes == n_classes and s.n_features == d
    counts = np.bincount(s.y.astype(int) if n_classes > 2 else (s.y > 0).astype(int))
    assert counts.sum() == len(s) and len(counts) == n_classes


def test_csv_numeric_targets(tmp_path: Path) -> None:
    f = write(tmp_path / "d.csv", "a,b,t\n1,2,10\n3,4,2\n5,6,2.0\n7,8,3.5\n")
    reg = load_csv(f, "t")
    assert reg.task == "regression"
    np.testing.assert_array_equal(reg.y, [10, 2, 2, 3.5])
    two = write(tmp_path / "two.csv", "a,t\n1,10\n2,2\n3,2.0\n")
    clf = load_csv(two, "t", features=["a"])
    np.testing.assert_array_equal(clf.y, [1.0, -1.0, -1.0])  # numeric order: 2 < 10, and 2 == 2.0
    assert clf.classes == (2, 10)
    assert load_csv(two, "t", task="regression").task == "regression"
    swapped = load_csv(f, "a", features=["t", "b"])
    assert swapped.feature_names == ("t", "b")


@pytest.mark.parametrize(
    ("text", "kw", "message"),
    [
        ("a,b\n1,2\n", {"target": "c"}, r"unknown target column 'c'; columns are \['a', 'b'\]"),
        (
            "a,b\n1,2\n3,x\n",
            {"target": "a"},
            r"non-numeric value 'x' in feature column 'b', data row 2 \(line 3\)",
        ),
        ("a,b,c\n1,2,3\n", {"target": "a", "features": ["b", "z"]}, r"unknown feature column\(s\) \['z'\]"),
        (
            "a,b\n1,x\n2,y\n3,z\n",
            {"target": "b", "task": "regression"},
            r"numeric target, but column 'b' has 'x' at data row 1",
        ),
        ("a,b\n1,1\n2,1\n", {"target": "b", "task": "classification"}, "at least two classes in target 'b'"),
        ("a,b\n1,1\n2,nan\n", {"target": "b"}, r"NaN/inf value 'nan' in target column 'b', data row 2"),
        ("a,b\n1,1\ninf,0\n", {"target": "b"}, r"NaN/inf value 'inf' in feature column 'a', data row 2"),
        ("a,b\n1,1\n2\n", {"target": "b"}, "line 3 has 1 fields, the header has 2"),
        ("a,b\n", {"target": "b"}, "no data rows"),
    ],
)
def test_csv_errors(tmp_path: Path, text: str, kw: dict[str, Any], message: str) -> None:
    f = write(tmp_path / "bad.csv", text)
    with pytest.raises(ValueError, match=message):
        load_csv(f, **kw)


def test_csv_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"CSV file not found: .*nothing\.csv"):
        load_csv(tmp_path / "nothing.csv", "y")


# ---------------------------------------------------------------------------------------------- ARFF

ARFF = """% a comment
@relation 'sensors'
@attribute temp numeric
@attribute door {0,1}
@attribute room {kitchen,hall}
@attribute note string
@attribute gas {none,co,smoke}

@data
21.5,1,hall,'x',co
19.0,0,kitchen,'y',none
22.25,1,kitchen,'z',smoke
"""


def test_arff_dense_nominal_target_keeps_the_declared_order(tmp_path: Path) -> None:
    s = load_arff(write(tmp_path / "s.arff", ARFF))
    assert s.task == "classification" and s.classes == ("none", "co", "smoke")
    assert s.feature_names == ("temp", "door", "room")  # the string attribute is skipped
    np.testing.assert_array_equal(s.y, [1.0, 0.0, 2.0])
    np.testing.assert_array_equal(s.X, [[21.5, 1, 1], [19.0, 0, 0], [22.25, 1, 0]])


def test_arff_sparse_rows_and_a_numeric_target(tmp_path: Path) -> None:
    text = "@relation r\n@attribute a numeric\n@attribute b numeric\n@attribute y numeric\n@data\n"
    text += "{0 1.5, 2 3.25}\n{1 2}\n{0 -1, 1 1, 2 0.5}\n"
    s = load_arff(write(tmp_path / "r.arff", text))
    assert s.task == "regression"
    np.testing.assert_array_equal(s.X, [[1.5, 0], [0, 2], [-1, 1]])
    np.testing.assert_array_equal(s.y, [3.25, 0.0, 0.5])


@pytest.mark.parametrize(
    ("text", "kw", "message"),
    [
        (ARFF.replace("22.25,1", "?,1"), {}, r"missing value \(\?\) in attribute 'temp', data row 3"),
        (ARFF, {"target": "nope"}, "unknown target attribute 'nope'"),
        (ARFF, {"features": ["note"]}, r"\['note'\] are neither numeric nor nominal"),
        (ARFF, {"task": "regression"}, "is nominal: it cannot be regression"),
        ("@relation r\n@attribute a numeric\n@data\n1,2\n", {}, "not a readable ARFF file"),
    ],
)
def test_arff_errors(tmp_path: Path, text: str, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_arff(write(tmp_path / "bad.arff", text), **kw)

"""The real drift streams (outdoor, keystroke, usenet1/2): from the data directory, or downloaded from
their public originals' formats (served by a real local HTTP server) and checked by the values' hash."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support.file_server import FileServer, serve_files

from edgedrift.data import ChecksumError, load_csv, load_dataset

SHARED_DATA = os.environ.get("EDGEDRIFT_DATA_DIR", "")
pytestmark = pytest.mark.skipif(not SHARED_DATA, reason="EDGEDRIFT_DATA_DIR is not set")


@pytest.fixture(autouse=True)
def no_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEDRIFT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EDGEDRIFT_DATA_DIR", raising=False)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FileServer]:
    with serve_files(tmp_path / "www") as files:
        yield files


def original(name: str) -> tuple[np.ndarray, np.ndarray]:
    copy = load_csv(Path(SHARED_DATA) / f"{name}.csv", "target", task="classification")
    return copy.X, np.asarray(copy.labels.decode(copy.y), dtype=np.float64)


@pytest.mark.parametrize(
    ("name", "stem", "n_classes"), [("outdoor", "outdoorStream", 40), ("keystroke", "keystroke", 4)]
)
def test_matrix_and_label_originals(
    server: FileServer, monkeypatch: pytest.MonkeyPatch, name: str, stem: str, n_classes: int
) -> None:
    """The driftDatasets format: a %.18e matrix (numpy's savetxt) and a label file."""
    X, labels = original(name)
    np.savetxt(server.root / f"{stem}.data", X, fmt="%.18e")
    np.savetxt(server.root / f"{stem}.labels", labels, fmt="%d")
    monkeypatch.setenv(f"EDGEDRIFT_{name.upper()}_DATA_URL", f"{server.url}/{stem}.data")
    monkeypatch.setenv(f"EDGEDRIFT_{name.upper()}_LABELS_URL", f"{server.url}/{stem}.labels")
    s = load_dataset(name)
    assert s.n_classes == n_classes and len(s) == len(X)
    np.testing.assert_array_equal(s.X, X)
    load_dataset(name)
    assert len(server.requests) == 2  # the second load reads the cache


def test_arff_original_and_a_tampered_copy(server: FileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    X, labels = original("usenet1")
    head = "@relation usenet\n" + "".join(f"@attribute w{j} {{0,1}}\n" for j in range(X.shape[1]))
    rows = "\n".join(",".join(str(int(v)) for v in (*x, c)) for x, c in zip(X, labels, strict=True))
    text = head + "@attribute interesting {0,1}\n@data\n" + rows + "\n"
    (server.root / "usenet1.arff").write_text(text)
    monkeypatch.setenv("EDGEDRIFT_USENET1_URL", f"{server.url}/usenet1.arff")
    s = load_dataset("usenet1")
    assert s.classes == (0, 1) and s.n_features == 99
    np.testing.assert_array_equal(s.y, np.where(labels == 1, 1.0, -1.0))
    (server.root / "usenet2.arff").write_text(text.replace("\n1,", "\n0,", 1))  # one value changed
    monkeypatch.setenv("EDGEDRIFT_USENET2_URL", f"{server.url}/usenet2.arff")
    with pytest.raises(ChecksumError, match=r"usenet2: the values read from .* hash to"):
        load_dataset("usenet2")


def test_the_data_directory_copy_is_checked_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = tmp_path / "data"
    local.mkdir()
    text = (Path(SHARED_DATA) / "keystroke.csv").read_text()
    (local / "keystroke.csv").write_text(text.replace("0.0978", "0.0979", 1))
    monkeypatch.setenv("EDGEDRIFT_DATA_DIR", str(local))
    with pytest.raises(ChecksumError, match="keystroke"):
        load_dataset("keystroke")

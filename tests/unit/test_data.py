"""Tests of edgedrift.data: Stream, the real-data loaders and downloads, the CSV loader, the generators."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.file_server import FileServer, serve_files

from edgedrift.data import (
    ChecksumError,
    Stream,
    cache_dir,
    data_dir,
    fetch,
    hyperplane,
    load_covtype,
    load_dataset,
    load_elec2,
    rbf_drift,
    ridge_stream,
    sea,
    sine1plus,
)
from edgedrift.data.datasets import ELEC2_SHA256

SHARED_DATA = os.environ.get("EDGEDRIFT_DATA_DIR", "")
requires_data = pytest.mark.skipif(
    not SHARED_DATA,
    reason="EDGEDRIFT_DATA_DIR is not set (point it at the shared data directory holding elec.csv)",
)


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty cache; no test sees the shared data directory unless it asks."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("EDGEDRIFT_CACHE_DIR", str(cache))
    monkeypatch.delenv("EDGEDRIFT_DATA_DIR", raising=False)
    for var in [v for v in os.environ if v.startswith("EDGEDRIFT_") and v.endswith(("_URL", "_SHA256"))]:
        monkeypatch.delenv(var)
    return cache


@pytest.fixture
def shared_data(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EDGEDRIFT_DATA_DIR", SHARED_DATA)
    return Path(SHARED_DATA)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FileServer]:
    with serve_files(tmp_path / "www") as files:
        yield files


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []


# ---------------------------------------------------------------------------------------------- Stream


def make_stream(**kw: Any) -> Stream:
    args: dict[str, Any] = {
        "name": "s",
        "X": np.arange(12.0).reshape(6, 2),
        "y": np.array([1.0, -1.0, 1.0, 1.0, -1.0, -1.0]),
        "task": "classification",
        "feature_names": ("a", "b"),
    }
    args.update(kw)
    return Stream(**args)


def test_stream_coerces_layout_and_reports_size() -> None:
    s = make_stream(X=np.asfortranarray(np.arange(12, dtype=np.int64).reshape(6, 2)), drift_points=[3])
    assert s.X.dtype == np.float64 and s.X.flags["C_CONTIGUOUS"]
    assert len(s) == 6 and s.n_features == 2
    assert s.drift_points == (3,) and s.meta == {}


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"X": np.zeros(6)}, "X must be 2-D"),
        ({"y": np.ones((6, 1))}, "y must be 1-D"),
        ({"y": np.ones(5)}, "X has 6 rows but y has 5 labels"),
        ({"feature_names": ("a",)}, "1 feature names for 2 features"),
        ({"feature_names": ("a", "a")}, "duplicate feature names"),
        ({"y": np.array([1.0, 0.0, 1.0, 1.0, -1.0, -1.0])}, "must be -1.0/+1.0; row 1 has 0.0"),
        ({"X": np.array([[0.0, 1.0]] * 4 + [[np.nan, 1.0], [0.0, np.inf]])}, "first at row 4, feature 'a'"),
        ({"y": np.array([1.0, np.inf, 1, 1, 1, 1]), "task": "regression"}, "y has 1 NaN/inf value(s)"),
        ({"task": "ranking"}, "task must be one of"),
        ({"drift_points": (3, 3)}, "strictly increasing"),
        ({"drift_points": (6,)}, "strictly increasing indices in (0, 6)"),
    ],
)
def test_stream_validation(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make_stream(**kw)


def test_shuffled_is_a_seeded_row_permutation() -> None:
    X = np.arange(200.0).reshape(100, 2)
    s = make_stream(X=X, y=np.where(X[:, 0] % 4 == 0, 1.0, -1.0), drift_points=(50,), meta={"k": 1})
    a, b, c = s.shuffled(1), s.shuffled(1), s.shuffled(2)
    assert a.drift_points == () and a.name == "s[shuffled:1]" and a.meta["k"] == 1
    np.testing.assert_array_equal(a.X, b.X)
    assert not np.array_equal(a.X, c.X) and not np.array_equal(a.X, s.X)
    order = np.argsort(a.X[:, 0])
    np.testing.assert_array_equal(a.X[order], s.X)
    np.testing.assert_array_equal(a.y[order], s.y)


# ---------------------------------------------------------------------------------------------- ELEC2


@requires_data
def test_elec2_matches_the_published_counts(shared_data: Path) -> None:
    s = load_elec2()
    assert (len(s), s.n_features, s.task) == (45_312, 5, "classification")
    assert s.feature_names == ("nswprice", "nswdemand", "vicprice", "vicdemand", "transfer")
    assert int((s.y == 1.0).sum()) == 19_237 and int((s.y == -1.0).sum()) == 26_075
    np.testing.assert_allclose(s.X[0], [0.056443, 0.439155, 0.003467, 0.422915, 0.414912])
    assert s.y[0] == 1.0 and s.y[-1] == -1.0  # first line class 1, last line class 0
    s6 = load_dataset("elec2-6")
    assert s6.feature_names[0] == "period" and s6.n_features == 6
    np.testing.assert_array_equal(s6.X[:, 1:], s.X)
    np.testing.assert_array_equal(s6.y, s.y)
    bare = load_dataset("elec2-noprice")
    assert bare.feature_names == ("nswdemand", "vicdemand", "transfer") and bare.name == "elec2-noprice"
    np.testing.assert_array_equal(bare.X, s.X[:, [1, 3, 4]])
    np.testing.assert_array_equal(bare.y, s.y)


@requires_data
def test_elec2_label_is_the_price_above_its_48_sample_mean(shared_data: Path) -> None:
    """What ELEC2's class is (docs/benchmarks.md): UP exactly when nswprice exceeds its mean over the
    previous 48 samples, on every sample after the first 2,000 (the scored part of a DRUiD run)."""
    s = load_elec2()
    price = s.X[:, 0]
    window = np.lib.stride_tricks.sliding_window_view(price[:-1], 48).mean(axis=1)
    rule = np.where(price[48:] > window, 1.0, -1.0)
    assert np.array_equal(rule[2000 - 48 :], s.y[2000:])


@requires_data
def test_elec2_rejects_a_corrupted_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    content = bytearray((Path(SHARED_DATA) / "elec.csv").read_bytes())
    assert content.endswith(b",0\n")
    content[-2:-1] = b"1"  # flip the class of the last row
    (bad_dir / "elec.csv").write_bytes(bytes(content))
    monkeypatch.setenv("EDGEDRIFT_DATA_DIR", str(bad_dir))
    with pytest.raises(ChecksumError) as err:
        load_elec2()
    assert ELEC2_SHA256 in str(err.value)
    assert hashlib.sha256(bytes(content)).hexdigest() in str(err.value)


def test_data_dir_set_but_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert data_dir() is None
    monkeypatch.setenv("EDGEDRIFT_DATA_DIR", str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="is not an existing directory"):
        data_dir()


def test_cache_dir_defaults_to_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGEDRIFT_CACHE_DIR")
    assert cache_dir() == Path.home() / ".cache" / "edgedrift"


# ---------------------------------------------------------------------------------------------- fetch


def test_fetch_downloads_verifies_and_caches(server: FileServer, isolated_dirs: Path) -> None:
    payload = os.urandom(3 << 20)
    url, digest = server.put("blob.bin", payload)
    path = fetch("demo", url, digest, "blob.bin")
    assert path == isolated_dirs / "demo" / "blob.bin"
    assert path.read_bytes() == payload
    assert files_under(isolated_dirs) == [path]  # no temporary file left behind
    assert fetch("demo", url, digest, "blob.bin") == path
    assert server.requests == ["/blob.bin"]  # the second call is served from the cache


def test_fetch_wrong_hash_raises_and_leaves_no_file(server: FileServer, isolated_dirs: Path) -> None:
    url, actual = server.put("blob.bin", b"some bytes\n" * 1000)
    expected = "0" * 64
    with pytest.raises(ChecksumError) as err:
        fetch("demo", url, expected, "blob.bin")
    assert expected in str(err.value) and actual in str(err.value)
    assert files_under(isolated_dirs) == []


def test_fetch_prefers_data_dir_and_verifies_it(
    server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = tmp_path / "local"
    local.mkdir()
    (local / "blob.bin").write_bytes(b"local copy")
    monkeypatch.setenv("EDGEDRIFT_DATA_DIR", str(local))
    url, _ = server.put("blob.bin", b"remote copy")
    good = hashlib.sha256(b"local copy").hexdigest()
    assert fetch("demo", url, good, "blob.bin") == local / "blob.bin"
    with pytest.raises(ChecksumError, match=f"expected {'1' * 64}, got {good}"):
        fetch("demo", url, "1" * 64, "blob.bin")
    assert server.requests == []


def test_fetch_url_env_override_and_corrupt_cache_refresh(
    server: FileServer, isolated_dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, digest = server.put("blob.bin", b"payload" * 100)
    monkeypatch.setenv("EDGEDRIFT_MY_SET_URL", url)
    path = fetch("my-set", "http://unreachable.invalid/blob.bin", digest, "blob.bin")
    assert path.read_bytes() == b"payload" * 100
    path.write_bytes(b"bit rot")
    assert fetch("my-set", "http://unreachable.invalid/blob.bin", digest, "blob.bin").read_bytes() == (
        b"payload" * 100
    )
    assert len(server.requests) == 2


def test_fetch_unreachable_url_is_a_clear_error(isolated_dirs: Path) -> None:
    with pytest.raises(OSError, match=re.escape("demo: download from http://127.0.0.1:9/x failed")):
        fetch("demo", "http://127.0.0.1:9/x", None, "x")
    assert files_under(isolated_dirs) == []


# ---------------------------------------------------------------------------------------------- covtype


def test_covtype_download_parse_and_npz_cache(
    server: FileServer, isolated_dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(0)
    n = 70
    features = rng.integers(-50, 4000, size=(n, 54))
    cover = np.tile(np.arange(1, 8), n // 7)
    text = "\n".join(",".join(str(v) for v in [*row, c]) for row, c in zip(features, cover, strict=True))
    url, digest = server.put("covtype.data.gz", gzip.compress((text + "\n").encode()))
    monkeypatch.setenv("EDGEDRIFT_COVTYPE_URL", url)
    monkeypatch.setenv("EDGEDRIFT_COVTYPE_SHA256", digest)

    s = load_covtype()
    assert (len(s), s.n_features, s.task) == (n, 54, "classification")
    assert s.feature_names[0] == "Elevation" and s.feature_names[-1] == "Soil_Type_40"
    np.testing.assert_array_equal(s.X, features.astype(np.float64))
    np.testing.assert_array_equal(s.y, np.where(cover == 2, 1.0, -1.0))
    assert s.meta["cover_type_counts"] == {c: n // 7 for c in range(1, 8)}

    npz = isolated_dirs / "covtype" / "covtype.npz"
    assert npz.is_file()
    (isolated_dirs / "covtype" / "covtype.data.gz").unlink()
    again = load_covtype()  # from the npz: no download, no gzip
    assert server.requests == ["/covtype.data.gz"]
    np.testing.assert_array_equal(again.X, s.X)
    np.testing.assert_array_equal(again.y, s.y)

    npz.write_bytes(b"truncated")  # an unreadable cache is rebuilt from a fresh download
    np.testing.assert_array_equal(load_covtype().y, s.y)
    assert len(server.requests) == 2

    monkeypatch.setenv("EDGEDRIFT_COVTYPE_SHA256", "2" * 64)  # another archive: the npz is stale
    with pytest.raises(ChecksumError):
        load_covtype()


# ---------------------------------------------------------------------------------------------- generators


def test_sine1_concepts_flip_and_drift_points() -> None:
    s = sine1plus(d=2, sigma=1.0, n_concepts=3, concept_length=1000, seed=7)
    assert len(s) == 3000 and s.drift_points == (1000, 2000) and s.task == "classification"
    rule = np.where(s.X[:, 1] < np.sin(s.X[:, 0]), 1.0, -1.0)
    np.testing.assert_array_equal(s.y[:1000], rule[:1000])
    np.testing.assert_array_equal(s.y[1000:2000], -rule[1000:2000])
    np.testing.assert_array_equal(s.y[2000:], rule[2000:])
    assert s.X.min() >= 0.0 and s.X.max() <= 1.0
    same = sine1plus(d=2, sigma=1.0, n_concepts=3, concept_length=1000, seed=7)
    np.testing.assert_array_equal(same.X, s.X)
    np.testing.assert_array_equal(same.y, s.y)
    assert not np.array_equal(sine1plus(n_concepts=3, concept_length=1000, seed=8).X, s.X)


def test_sine1plus_high_dim_and_scale() -> None:
    d, sigma = 5, 100.0
    s = sine1plus(d=d, sigma=sigma, n_concepts=2, concept_length=2000, seed=1)
    assert s.n_features == d and s.drift_points == (2000,)
    assert 90 < s.X[:, 0].max() <= sigma and s.X[:, 1:].max() <= 1.0
    arg = (s.X[:, 0] / sigma + s.X[:, 1 : d - 1].sum(axis=1)) / (d - 1)
    rule = np.where(s.X[:, d - 1] < np.sin(arg), 1.0, -1.0)
    np.testing.assert_array_equal(s.y, np.concatenate([rule[:2000], -rule[2000:]]))


def test_ridge_stream_recovers_each_true_model() -> None:
    s = ridge_stream(sigma=10.0, d=2, n_concepts=4, concept_length=5000, seed=3)
    betas = s.meta["betas"]
    assert s.task == "regression" and betas.shape == (4, 2) and s.drift_points == (5000, 10000, 15000)
    assert 9.0 < s.X[:, 0].std() < 11.0 and 0.9 < s.X[:, 1].std() < 1.1
    for k in range(4):
        rows = slice(k * 5000, (k + 1) * 5000)
        fit, *_ = np.linalg.lstsq(s.X[rows], s.y[rows], rcond=None)
        np.testing.assert_allclose(fit, betas[k], atol=0.06)
        residual = s.y[rows] - s.X[rows] @ betas[k]
        assert 0.9 < residual.std() < 1.1  # ε ~ N(0, 1)
    assert not np.allclose(betas[0], betas[1])


def test_sea_noise_rate_and_variants() -> None:
    s = sea(n=40_000, noise=0.1, drift_at=(10_000, 20_000, 30_000), seed=5)
    assert s.drift_points == (10_000, 20_000, 30_000) and s.meta["variants"] == (0, 1, 2, 3)
    theta = np.repeat([8.0, 9.0, 7.0, 9.5], 10_000)
    clean = np.where(s.X[:, 0] + s.X[:, 1] > theta, 1.0, -1.0)
    assert abs(float(np.mean(clean != s.y)) - 0.1) < 0.008
    quiet = sea(n=40_000, noise=0.0, drift_at=(10_000, 20_000, 30_000), seed=5)
    quiet_clean = np.where(quiet.X[:, 0] + quiet.X[:, 1] > theta, 1.0, -1.0)
    np.testing.assert_array_equal(quiet.y, quiet_clean)
    np.testing.assert_array_equal(sea(n=40_000, noise=0.1, drift_at=(10_000, 20_000, 30_000), seed=5).X, s.X)


def test_hyperplane_effective_noise_is_what_was_asked() -> None:
    # river draws the same random numbers whatever the noise level, so with one seed the two streams share
    # X and differ exactly in the flipped labels.
    clean = hyperplane(n=20_000, n_features=10, noise=0.0, seed=2)
    noisy = hyperplane(n=20_000, n_features=10, noise=0.01, seed=2)
    np.testing.assert_array_equal(clean.X, noisy.X)
    assert abs(float(np.mean(clean.y != noisy.y)) - 0.01) < 0.003
    louder = hyperplane(n=20_000, n_features=10, noise=0.1, seed=2)
    assert abs(float(np.mean(clean.y != louder.y)) - 0.1) < 0.01
    assert clean.n_features == 10 and set(np.unique(clean.y)) == {-1.0, 1.0}


def test_rbf_drift_reproducible_and_class_ratio() -> None:
    a = rbf_drift(n=1500, n_features=5, seed=4)
    b = rbf_drift(n=1500, n_features=5, seed=4)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)
    assert a.n_features == 5 and set(np.unique(a.y)) == {-1.0, 1.0}
    skewed = rbf_drift(n=3000, n_features=5, seed=4, class_ratio=0.2)
    assert abs(float(np.mean(skewed.y == 1.0)) - 0.2) < 0.03
    with pytest.raises(ValueError, match="class_ratio must be in"):
        rbf_drift(n=10, class_ratio=1.0)


def test_core_imports_without_river() -> None:
    code = (
        "import sys; sys.modules['river'] = None\n"
        "import edgedrift.data as d\n"
        "assert len(d.sine1plus(n_concepts=2, concept_length=10)) == 20\n"
        "try:\n    d.sea(n=10, drift_at=())\nexcept ImportError:\n    print('lazy')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "lazy"


# ---------------------------------------------------------------------------------------------- load_dataset


def test_load_dataset_generators() -> None:
    s = load_dataset("sine1+:d=10,sigma=100,concept_length=500", seed=3)
    assert s.n_features == 10 and len(s) == 5000 and s.X[:, 0].max() > 1.0
    np.testing.assert_array_equal(s.X, sine1plus(d=10, sigma=100, concept_length=500, seed=3).X)
    one = load_dataset("sine1:n_concepts=2,concept_length=100,seed=9", seed=1)
    np.testing.assert_array_equal(one.X, sine1plus(n_concepts=2, concept_length=100, seed=9).X)
    ridge = load_dataset("ridge:sigma=10,concept_length=100")
    assert ridge.task == "regression" and ridge.meta["sigma"] == 10.0
    sea_s = load_dataset("sea:n=1000,drift_at=250;500,noise=0")
    assert sea_s.drift_points == (250, 500) and sea_s.meta["noise"] == 0.0
    assert load_dataset("hyperplane:n=200,n_features=4").n_features == 4
    assert len(load_dataset("rbf:n=100,n_features=3")) == 100


def test_load_dataset_csv_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("a,t\n1,0\n2,1\n")
    assert load_dataset(f"csv:{f}", target="t").task == "classification"
    with pytest.raises(ValueError, match="needs a target column"):
        load_dataset(f"csv:{f}")
    known = (
        "known: elec2, elec2-6, elec2-noprice, covtype, covtype-7, outdoor, keystroke, usenet1, usenet2, "
        "image-segment, "
        "csv:PATH"
    )
    with pytest.raises(ValueError, match=f"unknown dataset 'mnist'; {known}"):
        load_dataset("mnist")
    with pytest.raises(ValueError, match=r"unknown parameter 'q'; allowed: \['d', 'sigma'"):
        load_dataset("sine1+:q=1")
    with pytest.raises(ValueError, match=re.escape("parameter d='2.5' is not a valid int")):
        load_dataset("sine1+:d=2.5")
    with pytest.raises(ValueError, match="elec2 takes no parameters"):
        load_dataset("elec2:d=2")
    with pytest.raises(ValueError, match=r"unknown parameter 'sigma'; allowed: \['n_concepts'"):
        load_dataset("sine1:sigma=3")


@requires_data
def test_load_dataset_elec2(shared_data: Path) -> None:
    assert load_dataset("elec2").n_features == 5

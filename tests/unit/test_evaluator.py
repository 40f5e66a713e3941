"""Tests of the offline evaluator (edgedrift_eval): protocols, baselines, run_one, ``edgedrift evaluate``."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest

from edgedrift.data import Stream, sine1plus
from edgedrift_eval.protocol import Protocol, get_protocol
from edgedrift_eval.runner import RunSpec, baseline_predictions, run_one
from edgedrift_eval.sweep import aggregate

REPO = Path(__file__).resolve().parents[2]
EDGEDRIFT = Path(sys.executable).parent / "edgedrift"
SMALL_SINE = "sine1+:concept_length=3000,n_concepts=3"
ROW_KEYS = {"strategy", "params", "recomputes", "accuracy", "kappa", "n_scored"}
#: What the evaluator must run without: the cloud service and its web and database stack.
CLOUD_MODULES = ("fastapi", "sqlalchemy", "psycopg", "edgedrift_cloud")


@pytest.fixture(scope="module")
def small_stream() -> Stream:
    return sine1plus(concept_length=3000, n_concepts=3)


# --- Protocol ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("every", "offset"), [(10, 0), (10, 3), (10, 13), (1, 0), (7, 6)])
def test_labeled_mask_every_k_with_offset(every: int, offset: int) -> None:
    p = Protocol(every=every)
    mask = p.labeled_mask(1000, offset)
    assert mask.dtype == bool
    assert mask.shape == (1000,)
    expected = np.array([i % every == offset % every for i in range(1000)])
    np.testing.assert_array_equal(mask, expected)


@pytest.mark.parametrize("fraction", [0.05, 0.1, 0.5])
def test_labeled_mask_random_fraction(fraction: float) -> None:
    p = Protocol(schedule="random", fraction=fraction)
    n = 100_000
    m0 = p.labeled_mask(n, 0)
    assert abs(m0.mean() - fraction) < 4 * np.sqrt(fraction * (1 - fraction) / n)
    np.testing.assert_array_equal(m0, p.labeled_mask(n, 0))  # seeded by the offset
    assert not np.array_equal(m0, p.labeled_mask(n, 1))
    # Not a regular pattern: gaps between labels vary.
    assert len(np.unique(np.diff(np.flatnonzero(m0)))) > 5


def test_protocol_window_labels_and_offsets() -> None:
    p = Protocol()
    assert (p.every, p.window, p.delay) == (10, 2000, 0)
    assert p.window_labels == 200
    assert p.offsets == tuple(range(10))
    assert Protocol(schedule="random", fraction=0.25, window=1000).window_labels == 250
    assert Protocol(every=1, window=500).window_labels == 500
    full = get_protocol("full")
    assert full.every == 1
    custom = get_protocol("druid", every=5, window=None, delay=20)
    assert (custom.every, custom.window, custom.delay) == (5, 2000, 20)
    with pytest.raises(ValueError, match="unknown protocol"):
        get_protocol("nope")


def test_a_short_stream_gets_a_window_that_leaves_three_quarters_to_score() -> None:
    p = Protocol()
    assert p.fitted(4000) is p  # outdoor: the paper's window fits twice
    assert p.fitted(1600).window == 400 and p.fitted(1500).window == 370  # keystroke, usenet
    assert p.fitted(1500).window_labels == 37
    with pytest.raises(ValueError, match="too short"):
        p.fitted(30)


# --- baselines ----------------------------------------------------------------------------------------


def brute_force_baseline(kind: str, y: np.ndarray, labeled: np.ndarray, delay: int, task: str) -> np.ndarray:
    """For each i, use only labels j with labeled[j] and j + delay < i (known strictly before i)."""
    out = np.empty(len(y))
    for i in range(len(y)):
        known = [j for j in range(len(y)) if labeled[j] and j + delay < i]
        if kind == "no-change":
            out[i] = y[known[-1]] if known else (1.0 if task == "classification" else 0.0)
        elif task == "regression":
            out[i] = float(np.mean(y[known])) if known else 0.0
        else:
            out[i] = 1.0 if np.sum(y[known]) >= 0 else -1.0
    return out


@pytest.mark.parametrize("kind", ["no-change", "majority"])
@pytest.mark.parametrize("delay", [0, 1, 7, 50])
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_baseline_predictions_use_only_labels_known_before(kind: str, delay: int, task: str) -> None:
    rng = np.random.default_rng(delay)
    n = 300
    y = rng.choice([-1.0, 1.0], size=n, p=[0.3, 0.7]) if task == "classification" else rng.normal(size=n)
    labeled = rng.random(n) < 0.2
    got = baseline_predictions(kind, y, labeled, delay, task)
    want = brute_force_baseline(kind, y, labeled, delay, task)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_no_change_on_every_label_is_the_previous_label() -> None:
    y = np.array([1.0, -1.0, -1.0, 1.0, 1.0, -1.0])
    got = baseline_predictions("no-change", y, np.ones(6, dtype=bool), 0, "classification")
    np.testing.assert_array_equal(got, [1.0, 1.0, -1.0, -1.0, 1.0, 1.0])
    delayed = baseline_predictions("no-change", y, np.ones(6, dtype=bool), 2, "classification")
    np.testing.assert_array_equal(delayed, [1.0, 1.0, 1.0, 1.0, -1.0, -1.0])


# --- run_one -------------------------------------------------------------------------------------------


def cohen_kappa(y: np.ndarray, p: np.ndarray) -> float:
    po = float(np.mean(y == p))
    pe = sum(float(np.mean(y == c)) * float(np.mean(p == c)) for c in (-1.0, 1.0))
    return (po - pe) / (1.0 - pe)


@pytest.mark.parametrize(
    ("strategy", "param"),
    [("periodic", 10.0), ("druid", 0.99), ("sgd", None), ("river-lr", None), ("no-change", None)],
)
def test_run_one_rows(small_stream: Stream, strategy: str, param: float | None) -> None:
    protocol = Protocol()
    row = run_one(small_stream, protocol, RunSpec(strategy, param, 0), curves=True)
    assert set(row.as_dict()) >= ROW_KEYS
    assert "predictions" not in row.as_dict()
    assert row.strategy == strategy
    n_scored = len(small_stream) - protocol.window
    assert row.n_scored == n_scored == 7000
    preds = row.scored_predictions()
    assert preds.shape == (n_scored,)
    assert set(np.unique(preds)) <= {-1.0, 1.0}
    y_true = small_stream.y[protocol.window :]
    assert row.metric("accuracy") == pytest.approx(float(np.mean(preds == y_true)))
    assert row.metric("kappa") == pytest.approx(cohen_kappa(y_true, preds), abs=1e-9)
    labels_scored = int(protocol.labeled_mask(len(small_stream), 0)[protocol.window :].sum())
    assert labels_scored == 700
    if param is None:
        assert row.params == {}
    else:
        assert list(row.params.values()) == [param] == [row.param]
    if strategy == "periodic":
        assert row.params == {"period": 10.0}
        assert row.recomputes == labels_scored // 10
        assert row.bytes_up == row.recomputes * (64 + 4 * 200 * 3)
        assert row.bytes_down > 0
    elif strategy == "druid":
        assert row.params == {"alpha": 0.99}
        assert row.recomputes >= 1  # two concept changes in the scored part
        assert row.metric("accuracy") > 0.8
    else:
        assert row.recomputes == 0
        assert row.bytes_up == 0
    # Loops report their batch model's C, tuned learners and monitor; river and the baselines do not.
    loop = strategy in ("periodic", "druid", "sgd")
    assert (row.C is not None, row.monitor is not None) == (loop, loop)
    assert ("C" in row.as_dict()) == loop
    if strategy == "no-change":
        labeled = protocol.labeled_mask(len(small_stream), 0)
        expected = brute_force_baseline(
            "no-change", small_stream.y[:2400], labeled[:2400], 0, "classification"
        )
        np.testing.assert_array_equal(preds[:400], expected[2000:])


def test_run_one_needs_a_stream_longer_than_the_window(small_stream: Stream) -> None:
    with pytest.raises(ValueError, match="window"):
        run_one(small_stream, Protocol(window=len(small_stream)), RunSpec("periodic", 10.0, 0))


@pytest.mark.parametrize("delay", [0, 50])
def test_run_one_label_delay_learns_late(small_stream: Stream, delay: int) -> None:
    """Periodic(10) recomputes when the 10th, 20th, … label *arrives*: ``delay`` samples after its sample."""
    protocol = Protocol(delay=delay)
    n, W = len(small_stream), protocol.window
    row = run_one(small_stream, protocol, RunSpec("periodic", 10.0, 3))
    labeled_idx = np.flatnonzero(protocol.labeled_mask(n, 3)[W:]) + W
    arrived = labeled_idx[labeled_idx + delay <= n - 1]
    assert row.recomputes == len(arrived) // 10
    # recompute_at is the first sample predicted after the recompute.
    expected_at = [int(arrived[10 * k - 1]) + delay + 1 for k in range(1, row.recomputes + 1)]
    assert row.recompute_at == expected_at
    assert row.n_labeled == len(labeled_idx)
    with pytest.raises(ValueError, match="curves=True"):
        row.scored_predictions()


def test_run_one_with_delay_predicts_differently(small_stream: Stream) -> None:
    now = run_one(small_stream, Protocol(), RunSpec("sgd", None, 0), curves=True)
    late = run_one(small_stream, Protocol(delay=50), RunSpec("sgd", None, 0), curves=True)
    # The first 50 scored samples see the same (warm-up) knowledge...
    np.testing.assert_array_equal(now.scored_predictions()[:1], late.scored_predictions()[:1])
    # ... but over the stream the late labels change what the learner knew when it predicted.
    assert np.mean(now.scored_predictions() != late.scored_predictions()) > 0.001


def test_aggregate_keeps_the_results_json_layout(small_stream: Stream) -> None:
    """Means and sds over offsets; ``as_dict`` keeps the keys and their order that results.json has."""
    rows = [run_one(small_stream, Protocol(), RunSpec("periodic", 100.0, o)) for o in (0, 1)]
    (entry,) = aggregate(rows, "classification")
    accuracies = [r.metric("accuracy") for r in rows]
    assert entry.metric("accuracy") == pytest.approx(float(np.mean(accuracies)))
    assert entry.metric_sd("accuracy") == pytest.approx(float(np.std(accuracies, ddof=1)))
    assert entry.param == 100.0
    assert entry.n_offsets == 2
    assert [r.C for r in rows] == entry.C
    metrics: tuple[str, ...] = ("accuracy", "kappa", "kappa_t", "kappa_m", "balanced_accuracy", "f1", "mcc")
    metrics += ("accuracy_labeled", *(f"accuracy_lag{k}" for k in range(1, 11)))
    head = ["strategy", "params", "n_offsets", "n_scored", "recomputes", "recomputes_max", "bytes_up"]
    head += ["bytes_down", "edge_us_per_sample", "edge_state_bytes", "cloud_cpu_s_per_recompute"]
    head += ["update_order", "C", "learner_params"]
    assert list(entry.as_dict()) == [*head, *(k for m in metrics for k in (m, f"{m}_sd")), "offsets"]
    assert entry.offsets[1] == {"offset": 1, "recomputes": rows[1].recomputes} | {
        m: rows[1].metric(m) for m in metrics
    }
    row_keys = list(rows[0].as_dict())
    assert row_keys[:8] == ["strategy", "params", "offset", "n_scored", "n_labeled", "C", "learner_params",
                            "update_order"]  # fmt: skip
    assert row_keys[-10:] == ["monitor", "recomputes", "bytes_up", "bytes_down", "recompute_at",
                              "edge_us_per_sample", "edge_state_bytes", "cloud_cpu_s_per_recompute",
                              "train_ms_total", "wall_s"]  # fmt: skip


# --- the evaluator without the cloud -------------------------------------------------------------------


def test_the_evaluator_imports_nothing_of_the_cloud() -> None:
    """``edgedrift_eval``'s modules load neither the cloud service nor FastAPI, SQLAlchemy or psycopg."""
    code = textwrap.dedent(
        f"""
        import sys
        import edgedrift_eval.cli, edgedrift_eval.plots, edgedrift_eval.runner, edgedrift_eval.sweep
        print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] in {CLOUD_MODULES!r})))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == []


def test_the_evaluator_runs_where_the_cloud_cannot_be_imported() -> None:
    """With the cloud's packages unimportable (as on a machine without them), a run and a sweep still work."""
    code = textwrap.dedent(
        f"""
        import importlib.abc, sys

        class NoCloud(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {CLOUD_MODULES!r}:
                    raise ImportError(f"{{name}} is not installed")
                return None

        sys.meta_path.insert(0, NoCloud())
        from edgedrift.data import sine1plus
        from edgedrift_eval.protocol import Protocol
        from edgedrift_eval.runner import RunSpec
        from edgedrift_eval.sweep import aggregate, plan, run_sweep
        import edgedrift_eval.cli

        stream = sine1plus(concept_length=1500, n_concepts=2)
        specs = plan(["periodic", "sgd"], stream, Protocol(), {{"periodic": [50.0]}}, offsets=[0])
        entries = aggregate(run_sweep(stream, Protocol(), specs, jobs=1, progress=False), stream.task)
        print(sorted(e.strategy for e in entries))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['majority', 'no-change', 'periodic', 'sgd']"


def test_the_evaluator_package_does_not_depend_on_the_cloud() -> None:
    meta = tomllib.loads((REPO / "evaluator" / "pyproject.toml").read_text())["project"]
    declared = [
        *meta["dependencies"],
        *(d for ds in meta.get("optional-dependencies", {}).values() for d in ds),
    ]
    names = {d.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower() for d in declared}
    assert not names & {"edgedrift-cloud", "fastapi", "sqlalchemy", "psycopg", "psycopg-binary", "uvicorn"}


# --- `edgedrift evaluate` end to end -------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EDGEDRIFT), "evaluate", *args, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
    )


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 100 and height > 100
    assert len(data) > 5000


def test_cli_evaluate_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli(
        "--dataset",
        SMALL_SINE,
        "--strategies",
        "druid,periodic,sgd",
        "--grid",
        "periodic=10,100",
        "--offsets",
        "0,1",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert isinstance(results, list) and results
    for entry in results:
        assert set(entry) >= ROW_KEYS
        assert entry["n_scored"] == 7000
        assert 0.0 <= entry["accuracy"] <= 1.0
    strategies = {e["strategy"] for e in results}
    assert {"druid", "periodic", "sgd"} <= strategies
    periodic = {e["params"]["period"]: e for e in results if e["strategy"] == "periodic"}
    assert set(periodic) == {10.0, 100.0}
    assert periodic[10.0]["recomputes"] == pytest.approx(70.0)
    assert periodic[100.0]["recomputes"] == pytest.approx(7.0)
    assert all(e["n_offsets"] == 2 for e in results)
    with (out / "runs.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * sum(1 for _ in results)  # one row per (configuration, offset)
    assert {r["offset"] for r in rows} == {"0", "1"}
    assert {"strategy", "params", "recomputes", "accuracy", "kappa", "n_scored"} <= set(rows[0])
    assert_png(out / "tradeoff.png")
    assert_png(out / "over_time.png")
    with (out / "curves.csv").open(newline="") as fh:
        curve = list(csv.DictReader(fh))
    assert {r["strategy"] for r in curve} == {"druid", "periodic", "sgd"}
    assert all(0.0 <= float(r["accuracy"]) <= 1.0 for r in curve)
    assert min(int(r["sample"]) for r in curve) >= 2000


def test_cli_unknown_strategy_exits_2(tmp_path: Path) -> None:
    proc = run_cli("--dataset", SMALL_SINE, "--strategies", "druid,bogus", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert "unknown strategy 'bogus'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o" / "results.json").exists()


def test_cli_missing_csv_exits_2(tmp_path: Path) -> None:
    proc = run_cli("--dataset", "csv:missing.csv", "--target", "y", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert "missing.csv" in proc.stderr
    assert "Traceback" not in proc.stderr
    no_target = run_cli("--dataset", "csv:missing.csv", "--out", str(tmp_path / "o"))
    assert no_target.returncode == 2
    assert "target" in no_target.stderr


def test_cli_csv_dataset_with_target(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 1600
    path = tmp_path / "sensors.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["time", "a", "b", "state"])
        for i in range(n):
            a, b = rng.normal(size=2)
            flip = i >= n // 2
            label = "on" if (a + 0.5 * b > 0) != flip else "off"
            w.writerow([f"t{i}", f"{a:.5f}", f"{b:.5f}", label])
    out = tmp_path / "out"
    proc = run_cli(
        "--dataset",
        f"csv:{path}",
        "--target",
        "state",
        "--strategies",
        "periodic,sgd",
        "--grid",
        "periodic=5",
        "--window",
        "500",
        "--every",
        "5",
        "--offsets",
        "0",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    by_name = {e["strategy"]: e for e in results}
    assert {"periodic", "sgd", "no-change", "majority"} <= set(by_name)
    assert all(e["n_scored"] == n - 500 for e in results)
    # 1100 scored samples, every 5th labeled: 220 labels, a recompute every 5 of them.
    assert by_name["periodic"]["recomputes"] == pytest.approx(44.0)
    assert by_name["periodic"]["accuracy"] > 0.7
    meta = json.loads((out / "meta.json").read_text())
    assert meta["dataset"] == "sensors"
    assert meta["n_features"] == 2  # the text column "time" is skipped
    assert_png(out / "tradeoff.png")

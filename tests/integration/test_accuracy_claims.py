"""The learning core's accuracy claims, on real (ELEC2) and seeded synthetic streams, with tolerances.

These run the evaluator's own code path (``run_one``) on fewer offsets and seeds than the benchmark;
``bench/acceptance.py`` and ``edgedrift evaluate`` produce the full figures in docs/benchmarks.md.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import numpy as np
import pytest

from edgedrift.data import Stream, load_elec2, ridge_stream, sine1plus
from edgedrift_eval.protocol import get_protocol
from edgedrift_eval.runner import RunSpec, run_one

PROTOCOL = get_protocol("druid")
needs_elec2 = pytest.mark.skipif(
    not os.environ.get("EDGEDRIFT_DATA_DIR"), reason="EDGEDRIFT_DATA_DIR not set"
)


@cache
def elec2() -> Stream:
    return load_elec2()


def mean_of(stream: Stream, strategy: str, param: float | None, offsets: tuple[int, ...]) -> dict[str, Any]:
    rows = [run_one(stream, PROTOCOL, RunSpec(strategy, param, o)) for o in offsets]
    metric = "accuracy" if stream.task == "classification" else "rmse"
    return {
        metric: float(np.mean([r.metric(metric) for r in rows])),
        "recomputes": float(np.mean([r.recomputes for r in rows])),
        "rows": rows,
    }


@needs_elec2
def test_elec2_edge_learners_beat_river_and_druid_keeps_that_with_few_recomputes() -> None:
    offsets = (0, 5)
    newton = mean_of(elec2(), "newton", None, offsets)
    river = max(
        mean_of(elec2(), name, None, offsets)["accuracy"] for name in ("river-perceptron", "river-lr")
    )
    druid = mean_of(elec2(), "druid", 0.999, offsets)
    assert newton["accuracy"] >= 0.805
    assert newton["accuracy"] >= river + 0.005
    assert druid["recomputes"] <= 10
    assert druid["accuracy"] >= 0.815


@needs_elec2
def test_elec2_druid_paper_reproduces_the_papers_shape() -> None:
    offsets = (0, 5)
    paper = mean_of(elec2(), "druid-paper", 0.99, offsets)
    periodic = mean_of(elec2(), "periodic", 430, offsets)  # 10 recomputes
    assert paper["recomputes"] <= 10
    assert paper["accuracy"] >= 0.72
    assert paper["accuracy"] >= periodic["accuracy"] - 0.005
    assert paper["recomputes"] < periodic["recomputes"]


@needs_elec2
@pytest.mark.parametrize(("seed", "alpha"), [(0, 0.99), (2, 0.99), (1, 0.999)])
def test_shuffled_elec2_makes_no_recompute(seed: int, alpha: float) -> None:
    row = run_one(elec2().shuffled(seed), PROTOCOL, RunSpec("druid", alpha, 0))
    assert row.recomputes == 0
    assert (row.monitor or {})["exceedance_rate"] < 20 * (1 - alpha)


@pytest.mark.parametrize("alpha", [0.9, 0.9999, 1 - 1e-9])
def test_sine1_druid_finds_the_nine_drifts(alpha: float) -> None:
    stream = sine1plus(seed=0)
    druid = run_one(stream, PROTOCOL, RunSpec("druid", alpha, 0))
    periodic = run_one(stream, PROTOCOL, RunSpec("periodic", 10, 0))  # 980 recomputes
    assert 9 <= druid.recomputes <= 15
    first = druid.recompute_at[0]
    assert 10_000 < first < 10_000 + 4 * PROTOCOL.window  # the first one follows the first drift
    assert druid.metric("accuracy") >= periodic.metric("accuracy") - 0.02


def test_sine1plus_sgd_degrades_with_sigma_while_druid_does_not() -> None:
    acc = {}
    for sigma in (1.0, 100.0):
        stream = sine1plus(sigma=sigma, seed=0)
        acc[sigma] = {
            s: run_one(stream, PROTOCOL, RunSpec(s, 0.999 if s == "druid" else None, 0)).metric("accuracy")
            for s in ("sgd", "druid")
        }
    assert acc[100.0]["sgd"] < acc[1.0]["sgd"] - 0.10
    assert abs(acc[100.0]["druid"] - acc[1.0]["druid"]) <= 0.02
    assert acc[100.0]["druid"] >= 0.94


def test_ridge_druid_rmse_is_close_to_periodic() -> None:
    stream = ridge_stream(sigma=10.0, seed=0)
    druid = run_one(stream, PROTOCOL, RunSpec("druid", 0.999, 0))
    periodic = run_one(stream, PROTOCOL, RunSpec("periodic", 10, 0))
    assert druid.recomputes <= 20
    assert druid.metric("rmse") <= 1.05 * periodic.metric("rmse")

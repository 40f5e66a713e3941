"""The re-tuning recomputes' claims of docs/benchmarks.md ("Re-tuning recomputes"), on label offset 0.

They run the evaluator's own code path (``run_one``) on real ELEC2 and the seeded synthetic streams; the
figures in the docs come from the same runs (about 12 s in all, so they run with the default suite).
"""

from __future__ import annotations

import os
from functools import cache

import pytest

from edgedrift.data import Stream, load_elec2, ridge_stream, sine1plus
from edgedrift_eval.protocol import get_protocol
from edgedrift_eval.results import RunResult
from edgedrift_eval.runner import RunSpec, run_one


@cache
def _elec2() -> Stream:
    return load_elec2()


def elec2() -> Stream:
    """ELEC2 from EDGEDRIFT_DATA_DIR (the test is skipped without it rather than downloading)."""
    if not os.environ.get("EDGEDRIFT_DATA_DIR"):
        pytest.skip("EDGEDRIFT_DATA_DIR not set")
    return _elec2()


def run(stream: Stream, strategy: str) -> RunResult:
    return run_one(stream, get_protocol("druid"), RunSpec(strategy, None, 0))


def test_druid_tune_on_elec2_beats_85_percent_with_at_most_10_recomputes() -> None:
    tune, druid, base = (run(elec2(), s) for s in ("druid-tune", "druid", "newton-tuned"))
    assert tune.metric("accuracy") >= 0.85 and tune.recomputes <= 10
    # Offset 0 (docs/benchmarks.md section 13 has the offsets): druid-tune 89.35 with 4 recomputes, druid
    # 82.73, the strong baseline 89.85. The cloud changes the edge's parameters only on clear evidence, so
    # druid-tune stays near the baseline that starts from the same first-window choice.
    assert tune.metric("accuracy") > druid.metric("accuracy") + 0.05
    assert abs(tune.metric("accuracy") - base.metric("accuracy")) < 0.006


def test_drift_free_control_no_more_recomputes_than_druid_and_nothing_lost() -> None:
    shuffled = elec2().shuffled(0)
    tune, druid, base = (run(shuffled, s) for s in ("druid-tune", "druid", "newton-tuned"))
    assert tune.recomputes <= druid.recomputes
    assert tune.metric("accuracy") >= base.metric("accuracy") - 1e-12


def test_ridge_druid_tune_is_not_above_druid_and_both_keep_the_defaults() -> None:
    """Drifting ridge σ = 10: the no-harm rule keeps the learner's defaults, so ``druid`` (RMSE 1.426,
    2.243 when its first window chose by plain best score) and ``druid-tune`` make the same predictions."""
    stream = ridge_stream(sigma=10.0)
    tune, druid = run(stream, "druid-tune"), run(stream, "druid")
    assert tune.metric("rmse") <= druid.metric("rmse") + 1e-12
    assert druid.metric("rmse") < 0.7 * 2.243


def test_sine1plus_sigma_100_druid_tune_is_not_below_druid() -> None:
    """The stream where re-tuning lost 0.65 points to ``druid`` before the one-SE start and the margin."""
    stream = sine1plus(d=10, sigma=100.0)
    tune, druid = run(stream, "druid-tune"), run(stream, "druid")
    assert tune.recomputes == druid.recomputes == 9
    assert tune.metric("accuracy") >= druid.metric("accuracy") - 1e-12

"""``edgedrift evaluate --batch-size N``: a stream fed in batches through ``process_many`` scores exactly as
one fed sample by sample (per-sample batch semantics), for EdgeDrift's strategies and river's peers."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from support.evaluate import evaluate_results

from edgedrift.data import Stream, load_dataset, sine1plus
from edgedrift_eval.protocol import Protocol
from edgedrift_eval.runner import RunSpec, run_one

REPO = Path(__file__).resolve().parents[2]
EDGEDRIFT = Path(sys.executable).parent / "edgedrift"
#: The strategies of the ELEC2 batch table (docs/benchmarks.md), a batch-model one and a river peer.
STRATEGIES = ("newton-tuned", "rmsprop-tuned", "druid-tune", "druid", "periodic", "river-perceptron")


@pytest.fixture(scope="module")
def short_stream() -> Stream:
    return sine1plus(concept_length=1000, n_concepts=3, seed=5)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_batches_of_1_10_and_100_predict_identically(short_stream: Stream, strategy: str) -> None:
    protocol = Protocol(every=10, window=500)
    runs = {
        b: run_one(
            short_stream, Protocol(every=10, window=500, batch=b), RunSpec(strategy, None, 3), curves=True
        )
        for b in (1, 10, 100)
    }
    assert protocol == Protocol(every=10, window=500, batch=1)
    reference = runs[1].scored_predictions()
    for b in (10, 100):
        np.testing.assert_array_equal(runs[b].scored_predictions(), reference)
        assert runs[b].metrics["accuracy"] == runs[1].metrics["accuracy"]
        assert runs[b].recompute_at == runs[1].recompute_at
    if strategy in ("druid", "periodic"):
        assert runs[1].recomputes > 0, "the stream must make the strategy recompute"


def test_batches_need_labels_at_once_and_a_positive_size(short_stream: Stream) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Protocol(batch=0)
    with pytest.raises(ValueError, match="delay 0"):
        run_one(short_stream, Protocol(every=10, window=500, batch=10, delay=5), RunSpec("druid", None, 0))


def test_cli_batch_size_scores_as_batch_1(tmp_path: Path) -> None:
    stream = "sine1+:concept_length=1000,n_concepts=3,seed=5"
    accuracy = {}
    for b in (1, 50):
        out = tmp_path / f"b{b}"
        args = ["--dataset", stream, "--strategies", "druid", "--offsets", "0", "--window", "500"]
        args += ["--batch-size", str(b), "--jobs", "1", "--no-progress"]
        results = evaluate_results(args, out)
        accuracy[b] = {(e["strategy"], json.dumps(e["params"])): e["accuracy"] for e in results}
    assert accuracy[50] == accuracy[1]


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("EDGEDRIFT_DATA_DIR"), reason="needs EDGEDRIFT_DATA_DIR (ELEC2)")
@pytest.mark.parametrize("strategy", ["newton-tuned", "rmsprop-tuned", "druid-tune", "druid"])
def test_elec2_batches_of_1_10_and_100_score_identically(strategy: str) -> None:
    """ELEC2 (its label is "NSW price above its mean over the previous 48 samples"), DRUiD protocol."""
    stream = load_dataset("elec2")
    preds = {
        b: run_one(stream, Protocol(batch=b), RunSpec(strategy, None, 0), curves=True).scored_predictions()
        for b in (1, 10, 100)
    }
    np.testing.assert_array_equal(preds[10], preds[1])
    np.testing.assert_array_equal(preds[100], preds[1])

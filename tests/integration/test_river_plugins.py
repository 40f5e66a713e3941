"""river learners and detectors, and a third party's strategy registered under the entry-point group
``edgedrift.strategies``, selected by name in the edge agent (real Mosquitto, real cloud trainer) and in
the offline evaluator: the deployed run makes the evaluator's predictions sample for sample."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support.cloud import CloudServer
from support.deployed import deploy, registry
from support.plugin import example_plugin

from edgedrift.adapters import RiverLearner
from edgedrift.data.generators import sine1plus
from edgedrift.protocol import Protocol
from edgedrift_eval.runner import RunSpec, run_one
from edgedrift_harness.mosquitto import MosquittoProcess, local_mosquitto

WARMUP = 500


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path / "broker") as server:
        yield server


@pytest.mark.parametrize(
    ("strategy", "param"),
    [
        ("river-logreg", 0.999),
        ("river-hoeffding", 0.999),
        ("river-page-hinkley", 0.0),
        ("river-kswin", 0.0),
        ("example-every-k", 300),
    ],
)
def test_strategy_runs_deployed_as_it_does_offline(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path, strategy: str, param: float
) -> None:
    s = sine1plus(d=2, n_concepts=3, concept_length=2000, seed=3)
    protocol = Protocol(every=2, window=WARMUP)
    with example_plugin(tmp_path / "site"):
        offline = run_one(s, protocol, RunSpec(strategy, param, 0), curves=True)
        agent, preds, device = deploy(broker, sqlite_cloud, tmp_path, s, protocol, strategy, param, WARMUP)

    deployed = np.array([p["y_hat"] for p in preds[WARMUP:]])
    assert np.array_equal(deployed, offline.scored_predictions()), f"{strategy}: deployed predictions differ"
    loop = agent.session.loop
    assert loop is not None
    assert loop.counters.recomputes == offline.recomputes >= 1
    assert len(registry(sqlite_cloud, device)) == offline.recomputes + 1
    assert offline.metric("accuracy") > 0.6
    if strategy == "example-every-k":
        labels = (len(s.y) - WARMUP) // 2
        assert offline.recomputes == labels // int(param), "the third party's monitor decides the recomputes"
    if strategy in ("river-logreg", "river-hoeffding"):
        learner = loop.learner
        assert isinstance(learner, RiverLearner)
        assert learner.n_anchors == offline.recomputes + 1, (
            "every installed model re-anchors the river learner"
        )
        assert (learner.n_replayed > 0) == (strategy == "river-hoeffding")
    if strategy in ("river-logreg", "river-hoeffding", "river-page-hinkley"):
        # The river model is saved by its description, the detector by its inputs: stop() checkpointed.
        assert agent.session.counters.checkpoint_failures == 0
        assert (tmp_path / "state" / f"{device}.ckpt").is_file()

"""Online-BLS, Shrub Ensembles and RebalanceStream selected by the edge agent's configuration, through a real
Mosquitto and the real cloud trainer: the deployed run makes the offline evaluator's predictions sample for
sample, and the cloud counts every call it makes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support.cloud import CloudServer, sqlite_cloud_in
from support.deployed import deploy, registry

from edgedrift.data import Stream
from edgedrift.data.generators import sine1plus
from edgedrift.protocol import Protocol
from edgedrift_eval.runner import RunSpec, run_one
from edgedrift_harness.mosquitto import MosquittoProcess, local_mosquitto

WARMUP = 500


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path / "broker") as server:
        yield server


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudServer]:
    """The cloud without its per-device recompute rate (30 a minute by default, tested on its own in
    test_cloud_quota.py): Shrub Ensembles asks for a shrub every 100 labels, 17 models in a few seconds,
    and the 17th would wait a minute for the next one's budget."""
    unlimited = {"EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_DEVICE_PER_MINUTE": "unlimited"}
    with sqlite_cloud_in(tmp_path_factory.mktemp("cloud"), **unlimited) as server:
        yield server


def imbalanced_drift(seed: int = 3) -> Stream:
    """Sine1+ with three concepts, the positive class thinned to about 20% so rebalancing has work to do."""
    s = sine1plus(d=2, n_concepts=3, concept_length=2000, seed=seed)
    rng = np.random.default_rng(seed)
    keep = (s.y < 0) | (rng.random(len(s.y)) < 0.25)
    return Stream(f"{s.name}-imbalanced", s.X[keep], s.y[keep], s.task, s.feature_names)


@pytest.mark.parametrize(
    ("strategy", "param", "kind"),
    [
        ("online-bls", 0.0, "linear"),
        ("shrub-ensemble", 100, "shrub"),
        ("rebalance-stream", 0.002, "shrub"),
        ("rebalance-stream-plus", 0.002, "shrub"),
    ],
)
def test_learner_runs_deployed_as_it_does_offline(
    broker: MosquittoProcess,
    cloud: CloudServer,
    tmp_path: Path,
    strategy: str,
    param: float,
    kind: str,
) -> None:
    s = imbalanced_drift()
    protocol = Protocol(every=2, window=WARMUP)
    offline = run_one(s, protocol, RunSpec(strategy, param, 0), curves=True)
    agent, preds, device = deploy(broker, cloud, tmp_path, s, protocol, strategy, param, WARMUP)

    deployed = np.array([p["y_hat"] for p in preds[WARMUP:]])
    assert np.array_equal(deployed, offline.scored_predictions()), f"{strategy}: deployed predictions differ"
    assert agent.session.loop is not None
    assert agent.session.loop.counters.recomputes == offline.recomputes
    models = registry(cloud, device)
    assert len(models) == offline.recomputes + 1, "every cloud call is one counted recompute (+ the first)"
    assert {m["model"]["kind"] for m in models} == {kind}
    if strategy == "online-bls":
        assert offline.recomputes == 0 and offline.metric("accuracy") > 0.7
    else:
        assert offline.recomputes >= 2, "the stream must make the strategy call the cloud"
    if strategy == "shrub-ensemble":
        assert offline.metric("accuracy") > 0.7
    if strategy.startswith("rebalance-stream"):
        # Each change sent the batch with its reset rows; the cloud scored the four candidates.
        selections = [m for m in models if m["rebalance"] == "select"]
        assert len(selections) == offline.recomputes
        for m in selections:
            assert set(m["model"]["training"]["scores"]) == {"batch", "batch+smote", "reset", "reset+smote"}

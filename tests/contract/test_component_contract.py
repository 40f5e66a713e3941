"""The estimator contract (see tests/support/contract.py for the checks' list): the components."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support.contract import STREAMS, D, anchor_model, contents, restore

from edgedrift.learners.base import EWStandardizer
from edgedrift.loop import LoopCounters, RecomputeEvent
from edgedrift.metrics import ConfusionMatrix
from edgedrift.monitors import (
    DruidMonitor,
)
from edgedrift.training.linear import train_linear
from edgedrift.window import CountWindow, TimeWindow

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the extreme samples overflow on purpose


def test_components_round_trip() -> None:
    """Windows, the online standardiser, models, Δg and the small records restore exactly."""
    s = STREAMS["classification"]
    windows: list[Any] = [CountWindow(30, D), TimeWindow(5.0, D, initial_capacity=4)]
    scaler = EWStandardizer(D, 0.05)
    for i in range(100):
        windows[0].push(s.X[i], float(s.y[i]))
        windows[1].push(s.X[i], float(s.y[i]), 0.1 * i)
        scaler.update(s.X[i])
    cm = ConfusionMatrix()
    cm.update_many(s.y[:50], -s.y[50:100])
    model = train_linear(s.X[:100], s.y[:100], C=10.0, standardize=True)
    shrub = anchor_model("classification", 100, True)
    druid = DruidMonitor()
    druid.reset(model, s.X[:100], s.y[:100])
    records = [LoopCounters(1, 2, 3, 4, 5), RecomputeEvent(1, 2, 3, 4, {"a": [1.5, None]}), cm]
    graph = [windows, scaler, model, shrub, druid.delta_g, records]
    restored = restore(graph)
    assert contents(restored) == contents(graph)
    r_windows, r_scaler, r_model, r_shrub, r_delta_g, _ = restored
    np.testing.assert_array_equal(r_model.predict(s.X), model.predict(s.X))
    np.testing.assert_array_equal(r_shrub.predict(s.X), shrub.predict(s.X))
    assert r_delta_g.model is r_model
    for i in range(100, 160):
        for w, rw in zip(windows, r_windows, strict=True):
            assert w.push(s.X[i], float(s.y[i]), 0.1 * i) == rw.push(s.X[i], float(s.y[i]), 0.1 * i)
        scaler.update(s.X[i])
        r_scaler.update(s.X[i])
        druid.delta_g.add(s.X[i], float(s.y[i]))
        r_delta_g.add(s.X[i], float(s.y[i]))
    assert contents([r_windows, r_scaler, r_delta_g]) == contents([windows, scaler, druid.delta_g])

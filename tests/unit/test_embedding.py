"""docs/embedding.md runs as written (its examples are doctests): a DeviceSession with the cloud's
training in process on Sine1+, without building headers, documents or TrainedModels by hand."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import numpy as np
import pytest

from edgedrift_edge.session.device_session import DeviceSession

PAGE = Path(__file__).resolve().parents[2] / "docs" / "embedding.md"


def test_the_embedding_page_examples_pass() -> None:
    result = doctest.testfile(
        str(PAGE), module_relative=False, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted >= 10, "the page's examples were found"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in docs/embedding.md failed"


def test_an_in_process_session_takes_class_names_and_trains_the_cloud_s_models() -> None:
    session = DeviceSession.in_process("dev-mc", classes=["ash", "elm", "oak"], warmup_samples=90, C=1.0)
    assert session.config.classes == ("ash", "elm", "oak")
    rng = np.random.default_rng(0)
    centres = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    codes = rng.integers(0, 3, size=600)
    X = centres[codes] + 0.4 * rng.normal(size=(600, 2))
    names = np.array(["ash", "elm", "oak"])[codes]
    hits = 0
    for i in range(600):
        body = {"id": i, "x": X[i].tolist(), **({"y": str(names[i])} if i % 3 == 0 else {})}
        (pred,) = session.handle("samples", json.dumps(body).encode()).predictions
        hits += int(i >= 90 and pred["y_hat"] == names[i])
    assert session.phase == "running" and session.model_version == 1
    assert hits / 510 > 0.95


def test_in_process_refuses_the_strategies_that_need_the_cloud_s_history() -> None:
    with pytest.raises(ValueError, match=r"druid-tune.*cloud trainer"):
        DeviceSession.in_process(strategy="druid-tune")

"""The wire contract: binary windows round-trip, and every malformation is a WindowError naming a field."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from edgedrift.wire import (
    TrainRequest,
    WindowError,
    WindowHeader,
    check_window,
    decode_window,
    encode_window,
    window_arrays,
)

HEADER = WindowHeader(task="classification", learner="logistic", reason="druid", monitor={"chi2": 3.5})


def test_binary_window_round_trips_in_float32_and_float64() -> None:
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(37, 6)), np.sign(rng.normal(size=37))
    header, X32, y32 = decode_window(encode_window(HEADER, X, y))
    assert header == HEADER
    assert np.array_equal(X32, X.astype(np.float32).astype(np.float64)) and np.array_equal(y32, y)
    _, X64, _ = decode_window(encode_window(HEADER, X, y, dtype="float64"))
    assert np.array_equal(X64, X)
    assert len(encode_window(HEADER, X, y)) < 8 + 200 + 4 * (X.size + y.size)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b[:-1], "body"),
        (lambda b: b"EDW2" + b[4:], "body"),
        (lambda b: b[:4] + struct.pack("<I", 2**31) + b[8:], "body"),
        (lambda b: b[:8] + b"x" + b[9:], "header"),
    ],
)
def test_malformed_binary_windows(mutate: object, field: str) -> None:
    body = encode_window(HEADER, np.zeros((3, 2)), np.ones(3))
    with pytest.raises(WindowError) as info:
        decode_window(mutate(body))  # type: ignore[operator]
    assert info.value.field == field


def test_header_validation_is_pydantic() -> None:
    with pytest.raises(ValidationError, match="does not do regression"):
        WindowHeader(task="regression", learner="logistic")
    with pytest.raises(ValidationError, match="classification only"):
        WindowHeader(task="regression", learner="ridge", rebalance="smote")
    with pytest.raises(ValidationError):
        WindowHeader.model_validate({"task": "classification", "learner": "logistic", "extra": 1})


@pytest.mark.parametrize(
    ("X", "y", "field", "words"),
    [
        (np.zeros((0, 3)), np.zeros(0), "X", "empty"),
        (np.zeros((3, 0)), np.ones(3), "X", "no features"),
        (np.zeros((3, 2)), np.ones(2), "y", "2 labels for 3 rows"),
        (np.array([[0.0, np.inf]]), np.ones(1), "X", "X[0][1]"),
        (np.zeros((1, 2)), np.array([np.nan]), "y", "y[0]"),
        (np.zeros((2, 2)), np.array([0.0, 1.0]), "y", "-1 or +1"),
        (np.zeros((11, 2)), np.ones(11), "X", "limit of 10"),
    ],
)
def test_check_window(X: np.ndarray, y: np.ndarray, field: str, words: str) -> None:
    with pytest.raises(WindowError) as info:
        check_window(HEADER, X, y, max_rows=10, max_features=5)
    assert info.value.field == field and words in info.value.reason


def test_reset_rows_and_return_base_need_rebalancing() -> None:
    ok = WindowHeader(
        task="classification", learner="shrub", rebalance="select", reset_rows=0, return_base=True
    )
    assert (ok.reset_rows, ok.return_base) == (0, True)
    with pytest.raises(ValidationError, match="reset_rows needs rebalance='select'"):
        WindowHeader(task="classification", learner="shrub", rebalance="smote", reset_rows=3)
    with pytest.raises(ValidationError, match="reset_rows needs rebalance='select'"):
        WindowHeader(task="classification", learner="shrub", reset_rows=3)
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        WindowHeader(task="classification", learner="shrub", rebalance="select", reset_rows=-1)
    with pytest.raises(ValidationError, match="return_base needs rebalance"):
        WindowHeader(task="classification", learner="shrub", return_base=True)
    # Absent fields stay off the binary header, so older trainers read new clients' plain windows.
    body = encode_window(HEADER, np.zeros((3, 2)), np.ones(3))
    assert b"reset_rows" not in body and b"return_base" not in body
    header, _, _ = decode_window(encode_window(ok, np.zeros((3, 2)), np.ones(3)))
    assert header == ok


def test_reset_rows_may_not_exceed_the_window() -> None:
    header = WindowHeader(task="classification", learner="shrub", rebalance="select", reset_rows=4)
    check_window(header, np.zeros((4, 1)), np.ones(4), max_rows=10, max_features=5)
    with pytest.raises(WindowError) as info:
        check_window(header, np.zeros((3, 1)), np.ones(3), max_rows=10, max_features=5)
    assert info.value.field == "reset_rows" and info.value.reason == "4 exceeds the 3 rows of the window"


def test_shrub_labels_must_be_integers_and_ragged_rows_are_named() -> None:
    shrub = WindowHeader(task="classification", learner="shrub")
    with pytest.raises(WindowError, match="integers"):
        check_window(shrub, np.zeros((2, 1)), np.array([0.0, 0.5]), max_rows=10, max_features=5)
    check_window(shrub, np.zeros((2, 1)), np.array([0.0, 2.0]), max_rows=10, max_features=5)
    req = TrainRequest(task="classification", learner="logistic", X=[[1.0, 2.0], [3.0]], y=[1.0, -1.0])
    with pytest.raises(WindowError, match="row 1 has 1 values"):
        window_arrays(req)


def test_class_names_name_every_class_once_and_reach_the_document() -> None:
    from edgedrift.training.window import train_window
    from edgedrift_edge.cloud.client import _check_class_names

    header = WindowHeader(
        task="classification", learner="logistic", n_classes=3, class_names=["oak", "ash", "elm"]
    )
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    document = train_window(header, X, ((X[:, 0] > 0) + (X[:, 1] > 0.0)).astype(float)).document
    assert document["class_names"] == ["oak", "ash", "elm"]
    _check_class_names(document, ("oak", "ash", "elm"))
    with pytest.raises(ValueError, match="not the device's classes"):
        _check_class_names(document, ("ash", "oak", "elm"))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"n_classes": 3, "class_names": ["a", "b"]}, "2 names for 3 classes"),
        ({"class_names": ["a", "a"]}, "distinct"),
        ({"class_names": ["a", "b\x00"]}, "pattern"),
    ]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            WindowHeader.model_validate({"task": "classification", "learner": "logistic", **bad})
    with pytest.raises(ValueError, match="classification only"):
        WindowHeader(task="regression", learner="ridge", class_names=["a", "b"])

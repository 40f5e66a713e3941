"""Hostile binary headers and untrainable windows are WindowErrors naming the field (never an
OverflowError, RecursionError or a non-finite model), and a WindowError survives a process boundary."""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest
from pydantic import ValidationError

from edgedrift.training.window import check_finite_document, train_window
from edgedrift.wire import (
    WINDOW_MAGIC,
    Heartbeat,
    LearnerParams,
    WindowError,
    WindowHeader,
    check_window,
    decode_window,
)


def body(header: bytes) -> bytes:
    return WINDOW_MAGIC + struct.pack("<I", len(header)) + header + b"\0" * 8


@pytest.mark.parametrize(
    ("header", "field"),
    [
        (b'{"task":"regression","learner":"ridge","n":Infinity,"d":1}', "header"),
        (b'{"task":"regression","learner":"ridge","n":NaN,"d":1}', "header"),
        (b'{"task":"regression","learner":"ridge","n":1e400,"d":1}', "header.n"),
        (b'{"task":"regression","learner":"ridge","n":1,"d":"1"}', "header.d"),
        (b'{"task":"regression","learner":"ridge","n":-1,"d":1}', "header.n"),
        (b'{"task":"regression","learner":"ridge","n":1,"d":1,"dtype":"int8"}', "header.dtype"),
        (b"[" * 30_000 + b"]" * 30_000, "header"),
    ],
)
def test_hostile_headers(header: bytes, field: str) -> None:
    with pytest.raises(WindowError) as caught:
        decode_window(body(header))
    assert caught.value.field == field


def test_values_beyond_the_bound_are_refused() -> None:
    header = WindowHeader(task="regression", learner="ridge")
    X, y = np.ones((3, 2)), np.ones(3)
    check_window(header, X, y, max_rows=10, max_features=10)
    with pytest.raises(WindowError, match="exceeds") as caught:
        check_window(header, X * 1e31, y, max_rows=10, max_features=10)
    assert caught.value.field == "X"
    with pytest.raises(WindowError) as caught:
        check_window(header, X, y * -1e300, max_rows=10, max_features=10)
    assert caught.value.field == "y"


def test_auto_C_needs_two_rows() -> None:
    header = WindowHeader(task="classification", learner="logistic", params=LearnerParams(C="auto"))
    with pytest.raises(WindowError) as caught:
        train_window(header, np.ones((1, 2)), np.ones(1))
    assert caught.value.field == "params.C"
    assert train_window(header, np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([1.0, -1.0])).C is not None


def test_a_non_finite_model_is_refused() -> None:
    check_finite_document({"coef": [1.0, 2.0], "scaler": {"scale": [1.0]}, "n": 3})
    with pytest.raises(WindowError, match=r"model\.scaler\.scale\[1\]"):
        check_finite_document({"coef": [1.0], "scaler": {"scale": [1.0, float("inf")]}})


def test_window_error_pickles_with_both_fields() -> None:
    again = pickle.loads(pickle.dumps(WindowError("header.n", "too large")))
    assert (again.field, again.reason) == ("header.n", "too large")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"samples": true}', "samples"),
        ('{"samples": "3"}', "samples"),
        ('{"samples": 1, "accuracy": true}', "accuracy"),
        ('{"samples": 1, "extra": {"a b": 1}}', "extra"),
    ],
)
def test_heartbeat_numbers_are_json_numbers(body: str, field: str) -> None:
    """A bool or a numeric string is not a number (as the OpenAPI schema says), though lax pydantic
    would convert it; 3.0 is an integer, as in JSON Schema."""
    with pytest.raises(ValidationError) as refused:
        Heartbeat.model_validate_json(body)
    assert refused.value.errors()[0]["loc"][0] == field
    assert Heartbeat.model_validate_json('{"samples": 3.0, "accuracy": 1}').samples == 3


def test_window_header_rules_are_in_its_json_schema() -> None:
    """The validator's learner/task and rebalance rules are stated as if/then, so a schema-valid header
    is a valid one."""
    rules = WindowHeader.model_json_schema()["allOf"]
    ridge = next(r for r in rules if r["if"]["properties"] == {"learner": {"const": "ridge"}})
    assert ridge["then"]["properties"]["task"] == {"enum": ["regression"]}
    with pytest.raises(ValidationError):
        WindowHeader.model_validate_json('{"task": "classification", "learner": "ridge"}')
    with pytest.raises(ValidationError):
        WindowHeader.model_validate_json('{"task": "regression", "learner": "shrub", "return_base": 1}')

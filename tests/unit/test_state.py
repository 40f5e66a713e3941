"""edgedrift.state: the checkpoint format round-trips what the learning state holds and loads nothing else."""

from __future__ import annotations

import contextlib
import io
import json
import math
import pickle
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgedrift.loop import EdgeLoop, LoopCounters, RecomputeEvent
from edgedrift.metrics import ConfusionMatrix
from edgedrift.models.losses import get_loss
from edgedrift.monitors import ErrorDrivenMonitor, PeriodicMonitor
from edgedrift.monitors.replayable import ReplayableDetector, detector_classes
from edgedrift.state import FORMAT, StateError, dumps, loads
from edgedrift.window import CountWindow
from edgedrift.wire import WindowHeader

#: Set by the payloads below if any of them ever runs.
SENTINEL: list[str] = []


class Payload:
    """Pickles into a call that would record that it ran."""

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (SENTINEL.append, ("pickle payload ran",))


def round_trip(obj: object) -> object:
    restored, meta = loads(dumps(obj, {"k": 1}))
    assert meta == {"k": 1}
    return restored


def craft(root: Any, arrays: dict[str, np.ndarray] | None = None, fmt: str = FORMAT) -> bytes:
    """An npz in the state layout with a hand-written JSON document."""
    doc = json.dumps({"format": fmt, "meta": {}, "root": root}).encode()
    buf = io.BytesIO()
    members: dict[str, Any] = {**(arrays or {}), "__state__": np.frombuffer(doc, dtype=np.uint8)}
    np.savez(buf, **members)
    return buf.getvalue()


# --- what round-trips ---------------------------------------------------------------------------------


def test_identity_and_cycles_are_preserved() -> None:
    cm = ConfusionMatrix()
    cm.update(1.0, -1.0)
    arr = np.arange(6.0).reshape(2, 3)
    shared: list[Any] = [1, 2]
    event = RecomputeEvent(3, 10, 100, 200, {"arr": arr, "cm": cm})
    event.stats["self"] = event
    graph: list[Any] = [cm, cm, arr, arr, shared, shared, event]
    graph.append(graph)
    out = round_trip(graph)
    assert isinstance(out, list)
    assert out[0] is out[1] and isinstance(out[0], ConfusionMatrix) and out[0].fn == 1
    assert out[2] is out[3] is out[6].stats["arr"]
    assert out[4] is out[5] and out[4] == [1, 2]
    assert out[6].stats["self"] is out[6] and out[6].stats["cm"] is out[0]
    assert out[7] is out
    np.testing.assert_array_equal(out[2], arr)


def test_floats_round_trip_exactly_including_nan_and_inf() -> None:
    values = [math.nan, math.inf, -math.inf, -0.0, 0.1, 1e308, 5e-324, 2.2250738585072014e-308, 1 / 3]
    out = round_trip(values)
    assert isinstance(out, list)
    assert math.isnan(out[0]) and out[1] == math.inf and out[2] == -math.inf
    assert math.copysign(1.0, out[3]) == -1.0
    assert all(type(v) is float for v in out)
    assert [v.hex() for v in out[1:]] == [v.hex() for v in values[1:]]


def test_containers_keys_and_scalars() -> None:
    big = 10**30
    obj = {
        "dq": deque([1, 2, 3], maxlen=5),
        "dq_unbounded": deque([0.5]),
        "int_keys": {1: "a", 2: "b"},
        "mixed_keys": {None: 0, True: 1, 2.5: 2, math.inf: 3, "s": 4, -7: 5},
        "ordered": OrderedDict([("b", 1), ("a", 2)]),
        "tuple": (1, (2.0, "x"), None),
        "set": {1, 2.5, "z"},
        "frozen": frozenset({3, 4}),
        "np_scalars": [np.float32(1.5), np.int64(-3), np.bool_(True), np.uint8(7)],
        "big": big,
    }
    out = round_trip(obj)
    assert isinstance(out, dict)
    assert out["dq"] == deque([1, 2, 3]) and out["dq"].maxlen == 5
    assert out["dq_unbounded"].maxlen is None
    assert out["int_keys"] == {1: "a", 2: "b"} and all(type(k) is int for k in out["int_keys"])
    assert out["mixed_keys"] == obj["mixed_keys"]
    mixed: dict[Any, int] = obj["mixed_keys"]  # type: ignore[assignment]
    assert [type(k) for k in out["mixed_keys"]] == [type(k) for k in mixed]
    assert type(out["ordered"]) is OrderedDict and list(out["ordered"]) == ["b", "a"]
    assert out["tuple"] == (1, (2.0, "x"), None) and type(out["tuple"][1]) is tuple
    assert out["set"] == {1, 2.5, "z"} and type(out["frozen"]) is frozenset
    assert [type(v) for v in out["np_scalars"]] == [np.float32, np.int64, np.bool_, np.uint8]
    assert out["np_scalars"] == obj["np_scalars"]
    assert out["big"] == big


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(12.0).reshape(3, 4, order="F"),
        np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        np.array([1, -2], dtype=np.int8),
        np.array([True, False]),
        np.array([1 + 2j]),
        np.array(["ab", "c"]),
        np.array(3.5),
        np.zeros((0, 4), dtype=np.float32),
        np.arange(10.0)[::3],
    ],
)
def test_arrays_keep_dtype_shape_order_and_are_writeable(arr: np.ndarray) -> None:
    out = round_trip(arr)
    assert isinstance(out, np.ndarray)
    assert out.dtype == arr.dtype and out.shape == arr.shape
    if arr.flags.f_contiguous and not arr.flags.c_contiguous:
        assert out.flags.f_contiguous and not out.flags.c_contiguous  # BLAS/LAPACK buffers stay in place
    np.testing.assert_array_equal(out, arr)
    assert out.flags.writeable


def test_numpy_generators_continue_exactly() -> None:
    for gen in (np.random.default_rng(5), np.random.Generator(np.random.MT19937(3))):
        gen.random(17)
        out = round_trip(gen)
        assert isinstance(out, np.random.Generator)
        np.testing.assert_array_equal(out.random(5), gen.random(5))


def test_slots_dataclasses_and_transient_attributes() -> None:
    window = CountWindow(4, 2)
    for i in range(6):
        window.push(np.array([i, -i], dtype=float), float(i % 2))
    loop = EdgeLoop(window, PeriodicMonitor(3), recompute=lambda X, y: None)
    loop.counters = LoopCounters(samples=5, labeled=3)
    out = round_trip(loop)
    assert isinstance(out, EdgeLoop)
    assert out.recompute_fn is None  # transient: the caller re-binds it
    assert out.counters == LoopCounters(samples=5, labeled=3)
    np.testing.assert_array_equal(out.window.contents()[0], window.contents()[0])
    out.window.push(np.array([9.0, 9.0]), 1.0)
    window.push(np.array([9.0, 9.0]), 1.0)
    np.testing.assert_array_equal(out.window.evicted_X[:1], window.evicted_X[:1])


def test_meta_must_be_json() -> None:
    with pytest.raises(StateError, match="meta"):
        dumps([1], {"when": object()})
    with pytest.raises(StateError, match="meta"):
        dumps([1], {"x": math.nan})


# --- what dumps refuses, with the attribute path -------------------------------------------------------


def test_dumps_names_the_path_of_a_callable() -> None:
    loop = EdgeLoop(CountWindow(4, 2), ErrorDrivenMonitor("adwin", 0.01), recompute=lambda X, y: None)
    loop.monitor._make = lambda: None  # type: ignore[attr-defined]
    with pytest.raises(StateError, match=r"EdgeLoop\._monitor\._make: callables"):
        dumps(loop)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (print, "callables"),
        (np.array([object()]), "dtype object"),
        (Path("/tmp"), "pathlib"),
        (Payload(), "cannot be saved"),
        (io.BytesIO(), "cannot be saved"),
        ({(1, 2): 3}, "dict key"),
        (ConfusionMatrix, "callables"),
        (WindowHeader(task="classification", learner="shrub"), "attribute names"),
    ],
)
def test_dumps_refuses_unsupported_values(value: object, match: str) -> None:
    event = RecomputeEvent(0, 0, 0, 0, {"bad": value})
    with pytest.raises(StateError, match=match) as info:
        dumps(event)
    assert "RecomputeEvent.stats['bad']" in str(info.value)


# --- what loads refuses, without running anything ------------------------------------------------------


@pytest.mark.parametrize(
    "cls",
    [
        "os:system",
        "builtins:eval",
        "subprocess:Popen",
        "posix:system",
        "edgedrift.state:importlib.import_module",
        "edgedrift.state:np.random.Generator",
        "edgedrift.monitors.replayable:np.ndarray",
        "edgedrift.training.linear:LinearTrainer",
        "edgedrift.nonexistent:Thing",
        "edgedrift.state:StateError.__init__",
        "edgedrift.state",
    ],
)
def test_loads_refuses_classes_outside_the_allowlist(cls: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    attrs = {
        "args": f"touch {marker}",
        "source": f"open({str(marker)!r}, 'w')",
        "cmd": ["touch", str(marker)],
    }
    for root in ({"o": cls, "id": 0, "attrs": attrs}, [{"o": cls, "id": 0}]):
        with pytest.raises(StateError):
            loads(craft(root))
    assert not marker.exists()
    assert SENTINEL == []


@pytest.mark.parametrize("kind", ["DriftRetrainingClassifier", "system", "Popen", "LogisticRegression", 7])
def test_a_replayable_detector_can_only_name_river_drift_detectors(kind: Any) -> None:
    det = ReplayableDetector("ADWIN", delta=0.01)
    det.update(1.0)
    data = dumps(det)
    with np.load(io.BytesIO(data)) as npz:
        arrays = {k: npz[k] for k in npz.files}
    doc = json.loads(arrays.pop("__state__").tobytes())
    doc["root"]["attrs"]["kind"] = kind
    with pytest.raises(StateError, match="drift detector"):
        loads(craft(doc["root"], arrays))
    doc["root"]["attrs"]["kind"] = "ADWIN"
    doc["root"]["attrs"]["params"] = {"d": [{"o": "os:system", "id": 9}]}
    with pytest.raises(StateError):
        loads(craft(doc["root"], arrays))
    doc["root"]["attrs"]["params"] = {"d": [["delta", "rm -rf /"]], "id": 9}
    with pytest.raises(StateError):
        loads(craft(doc["root"], arrays))


def test_a_snapshot_cannot_alter_the_shared_loss_instances() -> None:
    loss = get_loss("logistic")
    path = "edgedrift.models.losses:LogisticLoss"
    for root in (
        {"o": path, "id": 0, "attrs": {"task": "regression"}},
        {"o": path, "id": 0, "slots": {"task": "regression"}},
    ):
        with pytest.raises(StateError):
            loads(craft(root))
    assert loss.task == "classification" and not hasattr(loss, "__dict__")
    assert loads(craft({"o": path, "id": 0}))[0] is loss


def test_pickled_arrays_and_pickles_are_refused() -> None:
    payload = np.array([Payload(), 1], dtype=object)
    with pytest.raises(StateError):
        loads(craft({"a": "a0", "id": 0}, {"a0": payload}))
    buf = io.BytesIO()
    np.savez(buf, __state__=payload)
    with pytest.raises(StateError):
        loads(buf.getvalue())
    with pytest.raises(StateError):
        loads(pickle.dumps(Payload()))
    assert SENTINEL == []


def test_wrong_format_version_and_malformed_documents_are_refused() -> None:
    with pytest.raises(StateError, match="unsupported state format"):
        loads(craft(1, fmt="edgedrift.state/2"))
    with pytest.raises(StateError, match="unsupported state format"):
        loads(craft(1, fmt="edgedrift.model/1"))
    bad_roots: list[Any] = [
        {"r": 0},
        {"a": "a0", "id": 0},
        {"zz": 1},
        {"l": 5, "id": 0},
        {"l": [], "id": "x"},
        {"l": [{"l": [], "id": 0}], "id": 0},
        {"t": [{"r": 0}], "id": 0},
        {"d": [[[1], 2]], "id": 0},
        {"s": [{"l": [], "id": 1}], "id": 0},
        {"f": "NaN"},
        {"dq": [], "maxlen": -1, "id": 0},
        {"rng": "os", "state": {}, "id": 0},
        {"o": "edgedrift.metrics:ConfusionMatrix", "id": 0, "slots": {"__class__": 1}},
        {"o": "edgedrift.metrics:ConfusionMatrix", "id": 0, "slots": {"nope": 1}},
        {"o": "edgedrift.metrics:ConfusionMatrix", "id": 0, "attrs": {"x": 1}},
        {"o": "edgedrift.loop:LoopCounters", "id": 0, "attrs": {"__dict__": 1}},
    ]
    for root in bad_roots:
        with pytest.raises(StateError):
            loads(craft(root))
    doc = json.dumps({"format": FORMAT, "meta": {}, "root": {"f": 1}}).replace("1", "NaN").encode()
    buf = io.BytesIO()
    np.savez(buf, __state__=np.frombuffer(doc, dtype=np.uint8))
    with pytest.raises(StateError):
        loads(buf.getvalue())


def test_compressed_members_are_refused() -> None:
    buf = io.BytesIO()
    doc = json.dumps({"format": FORMAT, "meta": {}, "root": 1}).encode()
    np.savez_compressed(buf, __state__=np.frombuffer(doc, dtype=np.uint8))
    with pytest.raises(StateError, match="compressed"):
        loads(buf.getvalue())


def test_truncated_bytes_are_refused() -> None:
    data = dumps(ErrorDrivenMonitor("ddm", 2.0))
    for n in [0, 1, 4, 30, len(data) // 3, len(data) // 2, len(data) - 22, len(data) - 1]:
        with pytest.raises(StateError):
            loads(data[:n])
    with pytest.raises(StateError):
        loads("not bytes")  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_fuzzed_bytes_only_raise_state_error(data: bytes) -> None:
    with contextlib.suppress(StateError):
        loads(data)


_VALID = dumps([ConfusionMatrix(), np.arange(3.0), {1: deque([2], maxlen=3)}, math.nan, (1, "x")])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_fuzzed_snapshots_only_raise_state_error(edits: list[tuple[int, int]]) -> None:
    data = bytearray(_VALID)
    for i, b in edits:
        data[i] = b
    with contextlib.suppress(StateError):
        loads(bytes(data))


_TAGS = ["o", "id", "r", "a", "l", "t", "d", "s", "f", "attrs", "slots", "dq", "maxlen", "x"]
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(_TAGS),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_fuzzed_documents_only_raise_state_error(root: Any) -> None:
    with contextlib.suppress(StateError):
        loads(craft(root, {"a0": np.arange(3.0)}))


# --- the replayable river detectors --------------------------------------------------------------------


def drifting_errors(n: int, seed: int) -> list[float]:
    """0/1 errors whose rate jumps every 400 samples, so every detector fires a few times."""
    rng = np.random.default_rng(seed)
    rates = np.where((np.arange(n) // 400) % 2 == 0, 0.05, 0.6)
    errors: list[float] = (rng.random(n) < rates).astype(float).tolist()
    return errors


@pytest.mark.parametrize(
    ("kind", "params"), [("ADWIN", {"delta": 0.01}), ("DDM", {}), ("EDDM", {"alpha": 0.95, "beta": 0.9})]
)
@pytest.mark.parametrize("cut", [1, 399, 437, 1000, 1555])
def test_restored_detector_continues_exactly(kind: str, params: dict[str, float], cut: int) -> None:
    xs = drifting_errors(2400, seed=cut)
    det = ReplayableDetector(kind, **params)
    drifts = 0
    for x in xs[:cut]:
        det.update(x)
        drifts += det.drift_detected
    restored = round_trip(det)
    assert isinstance(restored, ReplayableDetector) and restored.n_inputs == det.n_inputs
    assert restored.drift_detected == det.drift_detected
    for x in xs[cut:]:
        det.update(x)
        restored.update(x)
        drifts += det.drift_detected
        assert restored.drift_detected == det.drift_detected
        assert restored.warning_detected == det.warning_detected
    assert drifts >= 2  # the stream exercises the reset-after-drift truncation
    assert det.n_inputs < 2400
    if kind == "ADWIN":
        assert (restored.detector.width, restored.detector.total) == (det.detector.width, det.detector.total)


def test_detector_buffer_is_compact_and_skips_non_finite_inputs() -> None:
    det = ReplayableDetector("ADWIN", delta=0.002)
    for x in [0.0, 1.0] * 100:
        det.update(x)
    assert det.inputs().tolist() == [0.0, 1.0] * 100
    assert det._buf.dtype == np.uint8
    det.update(0.25)
    det.update(math.nan)
    det.update(math.inf)
    assert det._buf.dtype == np.float64 and det.n_inputs == 201 and det.n_skipped == 2
    restored = round_trip(det)
    assert isinstance(restored, ReplayableDetector)
    assert restored.detector.width == det.detector.width == 201
    clone = pickle.loads(pickle.dumps(det))
    assert clone.detector.total == det.detector.total


def test_detector_classes_are_river_drift_detectors_only() -> None:
    classes = detector_classes()
    assert {"ADWIN", "DDM", "EDDM"} <= set(classes)
    assert "DriftRetrainingClassifier" not in classes
    with pytest.raises(TypeError):
        ReplayableDetector("DriftRetrainingClassifier")
    with pytest.raises(TypeError):
        ReplayableDetector(dict)

"""ONNX export of the batch models, so any ONNX runtime can serve them (the ``onnx`` extra).

The graph takes one input ``X`` (float64, shape (n, d)) and computes in float64, so an ONNX runtime
gives the model's own labels and probabilities to rounding:

* a logistic model (scikit-learn ``LogisticRegression``) and a squared-loss model (``Ridge``) go through
  skl2onnx's converters: outputs ``label`` (int64 ±1) and ``probabilities`` (n, 2), or ``variable``
  (n, 1);
* a squared-hinge model is written with the standard operators (MatMul, Add, Where): outputs ``label``
  and ``scores`` (n,); skl2onnx's ``LinearSVC`` converter has no float64 mode;
* a one-vs-rest model of C ≥ 3 classes is written with the standard operators (MatMul, Add, ArgMax):
  outputs ``label`` (int64 codes 0..C−1, ties to the lowest) and, for the logistic loss,
  ``probabilities`` (n, C): the columns' sigmoids normalised to sum to 1, as
  :meth:`~edgedrift.models.linear.LinearModel.predict_proba`; for the squared hinge ``scores`` (n, C);
* a shrub is written with the standard operators too (Gather, LessOrEqual, Where, one step per level):
  outputs ``label`` and ``probabilities`` (classification, classes in document order) or ``variable``.
  The ONNX-ML tree operators return float32 probabilities (about 1e-8 off); the rows are rounded to
  float32 before the comparisons, as scikit-learn and :mod:`edgedrift.models.tree` do.

Examples
--------
>>> import numpy as np
>>> import onnxruntime
>>> from edgedrift.training.linear import LinearTrainer
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(100, 2))
>>> model = LinearTrainer("logistic", 10.0)(X, np.sign(X[:, 0]))
>>> session = onnxruntime.InferenceSession(to_onnx(model), providers=["CPUExecutionProvider"])
>>> label, proba = session.run(None, {"X": X})
>>> bool(np.array_equal(label, model.predict(X))), float(np.abs(proba - model.predict_proba(X)).max()) < 1e-12
(True, True)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgedrift.models.document import model_from_document
from edgedrift.models.linear import LinearModel
from edgedrift.models.tree import ShrubModel

__all__ = ["OPSET", "document_to_onnx", "to_onnx"]

#: The default-domain operator set of the exported graphs (ONNX Runtime 1.18 and later run it).
OPSET = 17


def to_onnx(model: LinearModel | ShrubModel) -> bytes:
    """The serialised ONNX model (a ``ModelProto``) of a linear model or a shrub."""
    if isinstance(model, ShrubModel):
        proto = _shrub_graph(model)
    elif isinstance(model, LinearModel):
        if model.multiclass:
            proto = _one_vs_rest_graph(model)
        else:
            proto = _hinge_graph(model) if model.loss.name == "squared_hinge" else _skl2onnx(model)
    else:
        raise TypeError(f"cannot export {type(model).__name__}: a LinearModel or a ShrubModel")
    onnx.checker.check_model(proto)
    blob: bytes = proto.SerializeToString()
    return blob


def document_to_onnx(doc: dict[str, Any]) -> bytes:
    """:func:`to_onnx` of a model document (what the registry stores); ValueError if it is not one."""
    return to_onnx(model_from_document(doc))


def _skl2onnx(model: LinearModel) -> onnx.ModelProto:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DoubleTensorType

    est = model.to_sklearn()
    options = {id(est): {"zipmap": False}} if model.task == "classification" else None
    proto: onnx.ModelProto = convert_sklearn(
        est,
        initial_types=[("X", DoubleTensorType([None, model.n_features]))],
        target_opset={"": OPSET, "ai.onnx.ml": 3},
        options=options,
    )
    return proto


def _const(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _model(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], outputs: list[Any], d: int
) -> onnx.ModelProto:
    X = helper.make_tensor_value_info("X", TensorProto.DOUBLE, [None, d])
    graph = helper.make_graph(nodes, "edgedrift", [X], outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="edgedrift")


def _hinge_graph(model: LinearModel) -> onnx.ModelProto:
    coef = np.asarray(model.raw_coef, dtype=np.float64).reshape(-1, 1)
    inits = [
        _const("coef", coef),
        _const("intercept", np.array([model.raw_intercept])),
        _const("zero", np.array(0.0)),
        _const("pos", np.array(1, dtype=np.int64)),
        _const("neg", np.array(-1, dtype=np.int64)),
        _const("flat", np.array([-1], dtype=np.int64)),
    ]
    nodes = [
        helper.make_node("MatMul", ["X", "coef"], ["xw"]),
        helper.make_node("Reshape", ["xw", "flat"], ["xw1"]),
        helper.make_node("Add", ["xw1", "intercept"], ["scores"]),
        helper.make_node("GreaterOrEqual", ["scores", "zero"], ["positive"]),
        helper.make_node("Where", ["positive", "pos", "neg"], ["label"]),
    ]
    outputs = [
        helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
        helper.make_tensor_value_info("scores", TensorProto.DOUBLE, [None]),
    ]
    return _model(nodes, inits, outputs, model.n_features)


def _one_vs_rest_graph(model: LinearModel) -> onnx.ModelProto:
    inits = [
        _const("coef", np.asarray(model.raw_coef, dtype=np.float64)),
        _const("intercept", np.asarray(model.raw_intercept, dtype=np.float64)),
    ]
    nodes = [
        helper.make_node("MatMul", ["X", "coef"], ["xw"]),
        helper.make_node("Add", ["xw", "intercept"], ["scores"]),
        helper.make_node("ArgMax", ["scores"], ["label"], axis=1, keepdims=0, select_last_index=0),
    ]
    C = model.n_classes
    outputs = [helper.make_tensor_value_info("label", TensorProto.INT64, [None])]
    if model.loss.name == "logistic":
        inits.append(_const("axis1", np.array([1], dtype=np.int64)))
        nodes += [
            helper.make_node("Sigmoid", ["scores"], ["sigmoids"]),
            helper.make_node("ReduceSum", ["sigmoids", "axis1"], ["total"], keepdims=1),
            helper.make_node("Div", ["sigmoids", "total"], ["probabilities"]),
        ]
        outputs.append(helper.make_tensor_value_info("probabilities", TensorProto.DOUBLE, [None, C]))
    else:
        outputs.append(helper.make_tensor_value_info("scores", TensorProto.DOUBLE, [None, C]))
    return _model(nodes, inits, outputs, model.n_features)


def _shrub_graph(model: ShrubModel) -> onnx.ModelProto:
    doc = model.document
    feature = np.asarray(doc["feature"], dtype=np.int64)
    leaf = feature < 0
    index = np.arange(feature.size, dtype=np.int64)
    # A leaf points to itself, so the descent can always take max_depth steps.
    left = np.where(leaf, index, np.asarray(doc["left"], dtype=np.int64))
    right = np.where(leaf, index, np.asarray(doc["right"], dtype=np.int64))
    inits = [
        _const("feature", np.where(leaf, 0, feature)),
        _const("threshold", np.asarray(doc["threshold"], dtype=np.float64)),
        _const("left", left),
        _const("right", right),
        _const("value", np.asarray(doc["value"], dtype=np.float64)),
        _const("node0", np.zeros(1, dtype=np.int64)),
        _const("rows_shape", np.array([-1, 1], dtype=np.int64)),
        _const("flat", np.array([-1], dtype=np.int64)),
        _const("one", np.array([1], dtype=np.int64)),
    ]
    nodes = [
        helper.make_node("Cast", ["X"], ["X32"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["X32"], ["Xr"], to=TensorProto.DOUBLE),
        helper.make_node("Shape", ["X"], ["shape"]),
        helper.make_node("Slice", ["shape", "node0", "one"], ["n"]),
        helper.make_node("Expand", ["node0", "n"], ["node_0"]),
    ]
    node = "node_0"
    for step in range(int(doc["max_depth"])):
        s = f"_{step}"
        nodes += [
            helper.make_node("Gather", ["feature", node], ["f" + s]),
            helper.make_node("Reshape", ["f" + s, "rows_shape"], ["fc" + s]),
            helper.make_node("GatherElements", ["Xr", "fc" + s], ["xf" + s], axis=1),
            helper.make_node("Reshape", ["xf" + s, "flat"], ["x" + s]),
            helper.make_node("Gather", ["threshold", node], ["t" + s]),
            helper.make_node("LessOrEqual", ["x" + s, "t" + s], ["go" + s]),
            helper.make_node("Gather", ["left", node], ["l" + s]),
            helper.make_node("Gather", ["right", node], ["r" + s]),
            helper.make_node("Where", ["go" + s, "l" + s, "r" + s], [f"node_{step + 1}"]),
        ]
        node = f"node_{step + 1}"
    if model.task == "regression":
        nodes += [
            helper.make_node("Gather", ["value", node], ["v"]),
            helper.make_node("Reshape", ["v", "rows_shape"], ["variable"]),
        ]
        outputs = [helper.make_tensor_value_info("variable", TensorProto.DOUBLE, [None, 1])]
        return _model(nodes, inits, outputs, model.n_features)
    classes = np.asarray(doc["classes"], dtype=np.float64)
    integral = bool(np.all(classes == np.round(classes)))
    inits.append(_const("classes", classes.astype(np.int64) if integral else classes))
    nodes += [
        helper.make_node("Gather", ["value", node], ["probabilities"], axis=0),
        helper.make_node("ArgMax", ["probabilities"], ["best"], axis=1, keepdims=0, select_last_index=0),
        helper.make_node("Gather", ["classes", "best"], ["label"]),
    ]
    outputs = [
        helper.make_tensor_value_info("label", TensorProto.INT64 if integral else TensorProto.DOUBLE, [None]),
        helper.make_tensor_value_info("probabilities", TensorProto.DOUBLE, [None, classes.size]),
    ]
    return _model(nodes, inits, outputs, model.n_features)

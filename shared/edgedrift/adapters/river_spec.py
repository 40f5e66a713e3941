"""A river estimator's class and parameters as plain data, so a checkpoint can rebuild it untrained.

river's own ``clone`` works from ``_get_params()``: scalars, and ``(class, params)`` pairs for nested
estimators (optimizers, losses, splitters). :func:`describe` writes that tree with class paths
(``"river.linear_model.log_reg:LogisticRegression"``) and a pipeline as its list of named steps;
:func:`build` imports classes of ``river`` modules only (the checkpoint's allowlist), subclasses of
``river.base.Base`` outside the data-set and stream modules, and calls their constructors. An estimator
with any other parameter (a function, a third party's class) has no description: :func:`describe`
returns None.

Examples
--------
>>> from river import linear_model, preprocessing
>>> model = preprocessing.StandardScaler() | linear_model.LogisticRegression(l2=0.01)
>>> spec = describe(model)
>>> spec["pipeline"][1][1]["class"]
'river.linear_model.log_reg:LogisticRegression'
>>> repr(build(spec)) == repr(model)
True
"""

from __future__ import annotations

import importlib
from collections import deque
from typing import Any

from edgedrift.state import StateError

__all__ = ["build", "describe"]

_SCALARS = (bool, int, float, str, type(None))
#: river modules whose classes read files or the network: never built from a checkpoint.
_NOT_ESTIMATORS = ("river.datasets", "river.stream", "river.api")


class _UndescribableError(Exception):
    pass


def _path(cls: type) -> str:
    if not (cls.__module__ == "river" or cls.__module__.startswith("river.")):
        raise _UndescribableError(cls.__module__)
    return f"{cls.__module__}:{cls.__qualname__}"


def _value(value: Any) -> Any:
    if isinstance(value, _SCALARS):
        return value
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], type)
        and isinstance(value[1], dict)
    ):
        return {"class": _path(value[0]), "params": {k: _value(v) for k, v in value[1].items()}}
    if isinstance(value, list | tuple | deque) and all(isinstance(v, _SCALARS) for v in value):
        return {"list": list(value)}
    raise _UndescribableError(type(value).__name__)


def describe(model: Any) -> dict[str, Any] | None:
    """The model's class and parameters as JSON-like data, or None when something cannot be described."""
    from river import compose

    try:
        if isinstance(model, compose.Pipeline):
            steps = [[name, describe(step)] for name, step in model.steps.items()]
            if any(spec is None for _, spec in steps):
                return None
            return {"pipeline": steps}
        return {"class": _path(type(model)), "params": {k: _value(v) for k, v in model._get_params().items()}}
    except _UndescribableError:
        return None


def _river_class(path: object) -> type:
    module_name, _, qualname = str(path).partition(":")
    if not (module_name == "river" or module_name.startswith("river.")) or not qualname:
        raise StateError(f"{path!r} is not a class of a river module")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise StateError(f"cannot find {path!r}: {exc}") from None
    from river import base

    if not isinstance(obj, type) or not issubclass(obj, base.Base) or module_name.startswith(_NOT_ESTIMATORS):
        raise StateError(f"{path!r} is not a river estimator class")
    return obj


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "class" in value:
        return build(value)
    if isinstance(value, dict) and "list" in value:
        return list(value["list"])
    return value


def build(spec: dict[str, Any]) -> Any:
    """A new, untrained estimator from :func:`describe`'s output; StateError if it is not one."""
    from river import compose

    try:
        if "pipeline" in spec:
            return compose.Pipeline(*[(str(name), build(step)) for name, step in spec["pipeline"]])
        cls = _river_class(spec["class"])
        return cls(**{str(k): _decode(v) for k, v in spec["params"].items()})
    except StateError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"cannot rebuild a river estimator: {type(exc).__name__}: {exc}") from None

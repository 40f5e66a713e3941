"""River's estimator conventions (``river.base.Base``) for every learner and monitor of the core.

Every argument of ``__init__`` is stored, as given, in the attribute of the same name; what an estimator
derives from it (a :class:`~edgedrift.models.losses.Loss` object, an online standardiser, a river
detector) lives in private attributes. So the hyper-parameters can be read back from the signature:
:meth:`Estimator._get_params` does that, and :meth:`Estimator.clone` builds a fresh, untrained estimator
from them. One mechanism serves every learner and monitor; no class keeps a list of its parameters.

A ``None`` default that stands for a value derived from other arguments (a learner's ``task``, the
paper monitor's ``t_n``) is stored resolved, as river does with its default losses: the clone is the
same estimator either way.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping
from typing import Any, Self

__all__ = ["Estimator", "init_parameters"]

_PARAMETERS: dict[type, tuple[str, ...]] = {}


def init_parameters(cls: type) -> tuple[str, ...]:
    """Names of the arguments of ``cls.__init__`` (without ``self``), in signature order (cached).

    ``*args`` and ``**kwargs`` are refused: a clone could not know which attributes they became.
    """
    names = _PARAMETERS.get(cls)
    if names is None:
        params = inspect.signature(cls).parameters.values()
        for param in params:
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"{cls.__name__}.__init__ takes *{param.name}: it cannot be read back")
        names = _PARAMETERS[cls] = tuple(param.name for param in params)
    return names


class Estimator:
    """Base of the core's learners and monitors: parameters read back from ``__init__``, generic clone.

    Examples
    --------
    >>> from edgedrift.learners import SGD
    >>> sgd = SGD(3, "squared", lr=0.05)
    >>> sgd._get_params()["loss"], sgd._get_params()["lr"]
    ('squared', 0.05)
    >>> sgd.learn_one([1.0, 2.0, 3.0], 1.0)
    >>> fresh = sgd.clone({"lr": 0.1})
    >>> fresh.n_learned, fresh.lr, fresh.loss
    (0, 0.1, 'squared')
    """

    def _get_params(self) -> dict[str, Any]:
        """The ``__init__`` arguments this estimator was built with, read from their attributes."""
        params: dict[str, Any] = {}
        for name in init_parameters(type(self)):
            try:
                params[name] = getattr(self, name)
            except AttributeError:
                raise TypeError(
                    f"{type(self).__name__} does not store its __init__ argument {name!r} as an attribute"
                ) from None
        return params

    def clone(self, new_params: Mapping[str, Any] | None = None) -> Self:
        """A fresh, untrained estimator with the same hyper-parameters (``new_params`` replace some).

        Every parameter is deep-copied, so the clone shares no state with this estimator.
        """
        params = self._get_params()
        if new_params is not None:
            params.update(new_params)
        return type(self)(**copy.deepcopy(params))

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={value!r}" for name, value in self._get_params().items())
        return f"{type(self).__name__}({args})"

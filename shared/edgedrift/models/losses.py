"""The three convex, differentiable losses of Table 1 (DRUiD paper).

Every loss is a function of the label y and the linear score z = x̃ᵀβ, so the gradient with respect to β
is ``dz(y, z) · x̃``: each loss only has to provide ℓ(y, z) and ∂ℓ/∂z. Classification labels are ±1,
regression labels are real. The objective that goes with every loss is eq. (1):

    P(β) = C · Σᵢ ℓ(yᵢ, x̃ᵢᵀβ) + ½‖β‖².
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import ClassVar, Literal, Self, cast

import numpy as np
from numpy.typing import NDArray

Task = Literal["classification", "regression"]
FloatArray = NDArray[np.float64]
_INSTANCES: dict[type, object] = {}


class Loss(ABC):
    """A per-sample loss ℓ(y, z) with its derivative in the score z.

    Losses hold no state, so each class has one instance: constructing one (or restoring one from a
    snapshot, a pickle or a deep copy) returns it, and learners and models share their loss. No
    ``__dict__`` (empty slots), so a snapshot cannot set attributes on that shared instance.
    """

    __slots__ = ()

    name: ClassVar[str]
    task: ClassVar[Task]
    #: LIBLINEAR solver (`-s`) whose primal objective is exactly eq. (1) with this loss.
    liblinear_solver: ClassVar[int]

    def __new__(cls) -> Self:
        instance = _INSTANCES.get(cls)
        if instance is None:
            instance = _INSTANCES[cls] = super().__new__(cls)
        return cast(Self, instance)

    @abstractmethod
    def value(self, y: FloatArray, z: FloatArray) -> FloatArray:
        """ℓ(y, z), element-wise."""

    @abstractmethod
    def dz(self, y: FloatArray, z: FloatArray) -> FloatArray:
        """∂ℓ/∂z, element-wise; ∇_β ℓ = dz · x̃."""

    @abstractmethod
    def dz_one(self, y: float, z: float) -> float:
        """∂ℓ/∂z for one sample, on Python floats (the per-sample hot path)."""

    @abstractmethod
    def d2z(self, y: FloatArray, z: FloatArray) -> FloatArray:
        """∂²ℓ/∂z² (a generalised second derivative for the squared hinge), element-wise."""

    @abstractmethod
    def d2z_one(self, y: float, z: float) -> float:
        """∂²ℓ/∂z² for one sample, on Python floats."""


class LogisticLoss(Loss):
    """ℓ = log(1 + exp(−y z)) (L2-regularised logistic regression, LIBLINEAR ``-s 0``)."""

    __slots__ = ()
    name = "logistic"
    task = "classification"
    liblinear_solver = 0

    def value(self, y: FloatArray, z: FloatArray) -> FloatArray:
        return np.logaddexp(0.0, -y * z)

    def dz(self, y: FloatArray, z: FloatArray) -> FloatArray:
        # −y σ(−y z), written with tanh so large |z| neither overflows nor loses precision.
        return -y * 0.5 * (1.0 - np.tanh(0.5 * y * z))

    def dz_one(self, y: float, z: float) -> float:
        return -y * 0.5 * (1.0 - math.tanh(0.5 * y * z))

    def d2z(self, y: FloatArray, z: FloatArray) -> FloatArray:
        p = 0.5 * (1.0 + np.tanh(0.5 * z))
        return p * (1.0 - p)

    def d2z_one(self, y: float, z: float) -> float:
        t = math.tanh(0.5 * z)
        return 0.25 * (1.0 - t * t)


class SquaredHingeLoss(Loss):
    """ℓ = max(0, 1 − y z)² (L2-regularised L2-loss SVM, LIBLINEAR ``-s 2``)."""

    __slots__ = ()
    name = "squared_hinge"
    task = "classification"
    liblinear_solver = 2

    def value(self, y: FloatArray, z: FloatArray) -> FloatArray:
        return np.maximum(0.0, 1.0 - y * z) ** 2

    def dz(self, y: FloatArray, z: FloatArray) -> FloatArray:
        return -2.0 * y * np.maximum(0.0, 1.0 - y * z)

    def dz_one(self, y: float, z: float) -> float:
        m = 1.0 - y * z
        return -2.0 * y * m if m > 0.0 else 0.0

    def d2z(self, y: FloatArray, z: FloatArray) -> FloatArray:
        return np.where(y * z < 1.0, 2.0, 0.0)

    def d2z_one(self, y: float, z: float) -> float:
        return 2.0 if y * z < 1.0 else 0.0


class SquaredLoss(Loss):
    """ℓ = (y − z)² (ridge regression; LIBLINEAR ``-s 11 -p 0``, or the closed form).

    Table 1 writes ridge as Σ(y − xᵀβ)² + α‖β‖²; dividing by 2α gives form (1) with C = 1/(2α).
    """

    __slots__ = ()
    name = "squared"
    task = "regression"
    liblinear_solver = 11

    def value(self, y: FloatArray, z: FloatArray) -> FloatArray:
        return (y - z) ** 2

    def dz(self, y: FloatArray, z: FloatArray) -> FloatArray:
        return -2.0 * (y - z)

    def dz_one(self, y: float, z: float) -> float:
        return -2.0 * (y - z)

    def d2z(self, y: FloatArray, z: FloatArray) -> FloatArray:
        return np.full(np.shape(z), 2.0)

    def d2z_one(self, y: float, z: float) -> float:
        return 2.0


LOSSES: dict[str, Loss] = {loss.name: loss for loss in (LogisticLoss(), SquaredHingeLoss(), SquaredLoss())}


def get_loss(name: str) -> Loss:
    """Look a loss up by name (``logistic``, ``squared_hinge``, ``squared``)."""
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; expected one of {sorted(LOSSES)}") from None


def ridge_alpha_to_c(alpha: float) -> float:
    """Table 1: Σ(y − xᵀβ)² + α‖β‖² equals form (1) with C = 1/(2α)."""
    if alpha <= 0:
        raise ValueError("alpha must be > 0")
    return 1.0 / (2.0 * alpha)

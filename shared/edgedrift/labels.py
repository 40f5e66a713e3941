"""Class labels: names in files and on the wire, codes inside the core.

The losses of Table 1 (DRUiD paper) are written for labels ±1, so a **binary** task keeps the codes
−1.0 and +1.0 (the first class is −1). A **multi-class** task (C ≥ 3 classes) uses the codes
0.0, 1.0, …, C−1: a one-vs-rest model has one column per code, and Online-BLS and the Shrub Ensemble
index their outputs by it. Codes are floats so that samples, windows and labels stay float64 arrays.

:class:`ClassLabels` maps the names a user has (strings or numbers: ``"oak"``, ``3``, ``"UP"``) to the
codes and back. A name matches by value, so the wire label ``3``, ``3.0`` and ``"3"`` are one class.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from edgedrift.models.losses import FloatArray

__all__ = ["ClassLabels", "ClassName", "check_codes", "class_codes", "is_multiclass", "one_vs_rest_targets"]

ClassName = str | int | float


def is_multiclass(n_classes: int) -> bool:
    """Whether ``n_classes`` classes use the codes 0..C−1 (C ≥ 3) rather than ±1 (C = 2)."""
    if n_classes < 2:
        raise ValueError(f"a classification task needs at least 2 classes, got {n_classes}")
    return n_classes >= 3


def class_codes(n_classes: int) -> FloatArray:
    """The label codes of ``n_classes`` classes in class order: (−1, +1) for 2, (0, 1, …, C−1) beyond."""
    if is_multiclass(n_classes):
        return np.arange(n_classes, dtype=np.float64)
    return np.array([-1.0, 1.0])


def check_codes(y: npt.ArrayLike, n_classes: int, where: str = "labels") -> None:
    """ValueError naming the first row whose label is not a code of ``n_classes`` classes (NaN allowed:
    an unlabeled sample)."""
    a = np.asarray(y, dtype=np.float64)
    known = ~np.isnan(a)
    if is_multiclass(n_classes):
        bad = known & ((a < 0) | (a >= n_classes) | (a != np.floor(a)))
        expected = f"0..{n_classes - 1}"
    else:
        bad = known & (a != 1.0) & (a != -1.0)
        expected = "-1.0/+1.0"
    if bad.any():
        rows = np.flatnonzero(bad)
        raise ValueError(
            f"{where}: the labels of {n_classes} classes must be {expected}; "
            f"row {int(rows[0])} has {a[rows[0]]} ({rows.size} such rows)"
        )


def _canonical(name: object) -> str | float:
    """The value a name matches by: a number (or a string holding one) as a float, other strings as is."""
    if isinstance(name, bool) or not isinstance(name, str | int | float | np.integer | np.floating):
        raise ValueError(f"a class name must be a string or a number, got {name!r}")
    if isinstance(name, str):
        text = name.strip()
        try:
            value = float(text)
        except ValueError:
            return text
        return value if math.isfinite(value) else text
    value = float(name)
    if not math.isfinite(value):
        raise ValueError(f"a class name must be finite, got {name!r}")
    return value


@dataclass(frozen=True)
class ClassLabels:
    """The classes of a classification task, in code order (see the module docstring).

    Parameters
    ----------
    names
        The class names, two or more, distinct by value (``1`` and ``"1.0"`` are the same class).

    Examples
    --------
    >>> labels = ClassLabels.from_values(["oak", "ash", "elm", "ash"])
    >>> labels.names, labels.n_classes, labels.codes.tolist()
    (('ash', 'elm', 'oak'), 3, [0.0, 1.0, 2.0])
    >>> labels.encode(["elm", "oak"]).tolist(), labels.decode_one(0.0)
    ([1.0, 2.0], 'ash')
    >>> binary = ClassLabels.from_values([1, 0, 1])
    >>> binary.encode([0, "1"]).tolist(), binary.multiclass
    ([-1.0, 1.0], False)
    """

    names: tuple[ClassName, ...]
    _index: dict[str | float, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = tuple(self.names)
        if len(names) < 2:
            raise ValueError(f"a classification task needs at least 2 classes, got {list(names)}")
        index: dict[str | float, int] = {}
        for i, name in enumerate(names):
            key = _canonical(name)
            if key in index:
                raise ValueError(f"class names must be distinct: {names[index[key]]!r} and {name!r}")
            index[key] = i
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "_index", index)

    @classmethod
    def from_values(cls, values: Iterable[object]) -> ClassLabels:
        """The distinct values of a label column as classes: numbers in numeric order, strings in lexical
        order (a column mixing both sorts every name as a string)."""
        distinct: dict[str | float, object] = {}
        for v in values:
            distinct.setdefault(_canonical(v), v)
        keys = list(distinct)
        if all(isinstance(k, float) for k in keys):
            ordered = sorted(keys, key=float)
        else:
            ordered = sorted(keys, key=str)
        names: list[ClassName] = []
        for k in ordered:
            v = distinct[k]
            if isinstance(v, np.integer):
                v = int(v)
            elif isinstance(v, np.floating):
                v = float(v)
            names.append(int(v) if isinstance(v, float) and v.is_integer() else v)  # type: ignore[arg-type]
        return cls(tuple(names))

    @property
    def n_classes(self) -> int:
        return len(self.names)

    @property
    def multiclass(self) -> bool:
        """Whether the codes are 0..C−1 (C ≥ 3) rather than ±1."""
        return is_multiclass(self.n_classes)

    @property
    def codes(self) -> FloatArray:
        """The label codes in class order."""
        return class_codes(self.n_classes)

    def index(self, name: object) -> int:
        """The class number (0..C−1) of a name; ValueError naming the known classes if unknown."""
        try:
            return self._index[_canonical(name)]
        except KeyError:
            shown = list(self.names[:20])
            more = " ..." if self.n_classes > 20 else ""
            raise ValueError(f"unknown class {name!r}; the classes are {shown}{more}") from None

    def encode_one(self, name: object) -> float:
        """The code of one class name."""
        i = self.index(name)
        return float(i) if self.multiclass else (1.0 if i == 1 else -1.0)

    def encode(self, names: Iterable[object]) -> FloatArray:
        """The codes of many class names."""
        return np.fromiter((self.encode_one(n) for n in names), dtype=np.float64)

    def decode_one(self, code: float) -> ClassName:
        """The name of a code; ValueError for a value that is not one of the codes."""
        if self.multiclass:
            if not (0 <= code < self.n_classes and float(code).is_integer()):
                last = self.n_classes - 1
                raise ValueError(f"{code!r} is not a code of {self.n_classes} classes (0..{last})")
            return self.names[int(code)]
        if code not in (1.0, -1.0):
            raise ValueError(f"{code!r} is not a binary code (-1.0/+1.0)")
        return self.names[1 if code == 1.0 else 0]

    def decode(self, codes: Sequence[float] | FloatArray) -> list[ClassName]:
        """The names of many codes."""
        return [self.decode_one(float(c)) for c in codes]

    def to_json(self) -> list[Any]:
        """The names as a JSON list (a model document's ``class_names``, a device's settings)."""
        return list(self.names)


def one_vs_rest_targets(y: npt.ArrayLike, n_classes: int) -> FloatArray:
    """The ±1 labels of the C one-vs-rest problems of codes ``y`` (0..C−1), shape (n, C): column c is +1
    where y = c and −1 elsewhere (a label that is no code is −1 in every column).

    Examples
    --------
    >>> one_vs_rest_targets([2.0, 0.0], 3).tolist()
    [[-1.0, -1.0, 1.0], [1.0, -1.0, -1.0]]
    """
    a = np.asarray(y, dtype=np.float64).reshape(-1, 1)
    return np.where(a == np.arange(n_classes, dtype=np.float64), 1.0, -1.0)

"""The compiled kernels of the per-labeled-sample path, and whether they are in use.

One labeled step of the edge loop at d = 5 is about 25 small numpy calls in the learner and the DRUiD
monitor, each a microsecond of interpreter and dispatch overhead on a few numbers. ``edgedrift._kernels``
(C, ``_kernels.c``, built from source when the package is installed) does each of these steps in one call,
in the same order of operations as the numpy code it replaces:

* ``newton_learn``, ``adaptive_learn``: the standardiser's update, x̃ and one step of
  :class:`~edgedrift.learners.ForgettingNewton` or :class:`~edgedrift.learners.AdaptiveSGD`;
* ``newton_learn_many``: a labeled batch of :class:`~edgedrift.learners.ForgettingNewton` (its
  ``learn_many``): the size filter, the standardiser's batch update with its per-sample warm-up, the x̃ and
  the mini-batch Newton step (Woodbury or information form; its linear solves by LU with partial pivoting
  where numpy calls LAPACK, so these agree to rounding, as the dot products do);
* ``newton_replay``, ``adaptive_replay``: a prequential replay (each row's ``predict_one`` score, then its
  ``learn_one``, row after row) with the arithmetic of ``linear_score`` and ``newton_learn`` /
  ``adaptive_learn``: the grid searches of the first-window tuning and of the cloud's re-tuning
  (:func:`~edgedrift.strategies.tuning.prequential_scores`);
* ``grad_track``: one sample into or out of Δg (:class:`~edgedrift.monitors.gradient.DeltaG`), with the
  robust clip and the moments DRUiD calibrates on;
* ``raw_weights``: a standardised learner's weights in raw feature space, for one-dot predictions;
* ``whitened_sq``: ‖W v‖², DRUiD's statistic before it is divided by the count;
* ``linear_score``: w·x + b, a linear learner's prediction from its raw-space weights;
* ``linear_scores``: ``linear_score`` of every row of a batch, each bit for bit as one call
  (``EdgeLoop.process_many`` predicts a run of unlabeled samples with it);
* ``givens_update``: Online-BLS's rank-one Cholesky update, its loop of Givens rotations with the BLAS
  ``drot`` scipy's wrapper calls (taken from ``scipy.linalg.cython_blas``) and Python's ``math.hypot``;
* ``forest_proba_one``: the leaf probabilities of one row under every tree of a packed forest (a shrub
  ensemble's per-sample prediction, :class:`~edgedrift.learners.packed_forest.PackedForest`);
* ``in_range``: the range guard's test of one sample (:class:`~edgedrift.guard.RangeGuard`);
* ``rows_outside``: the range guard's test of a batch;
* ``grad_track_many``: a labeled batch into or out of Δg (``DeltaG.add_many`` / ``remove_many``), with
  each sample's clipped contribution for the step-wise test;
* ``druid_steps``: DRUiD's test at every step of a batch
  (:meth:`~edgedrift.monitors.DruidMonitor.update_many`);
* ``sample_columns``: the ids and the x, y, ts columns of a decoded batch of samples
  (``edgedrift_edge.session.messages``);
* ``id_find`` … ``id_unplace_many``: the probing of the hash table of sample ids behind the edge agent's
  recent samples (``edgedrift_edge.buffers.id_index``: find, insert, backward-shift delete).

The numpy code stays the reference. Only the dot products may sum in another order than BLAS does, so
the two agree to rounding (``tests/unit/test_kernels.py``, ``test_newton_batch_kernel.py``,
``test_gateway_batch_kernels.py``), not bit for bit.

The extension is optional: ``pip install`` builds it when a C compiler is there and installs the package
without it otherwise (``shared/setup.py``), and :func:`path` says which path runs (``edgedrift --version``,
the agent's status message). :data:`MODULE` is None when ``EDGEDRIFT_NO_KERNELS=1`` is set (to measure or
check the numpy code) or the extension is not importable (not built). A kernel falls back to the numpy
code for one reason only: it raises :class:`LayoutError` for an array it does not take as it is (not
C-contiguous, say). Any other error of a compiled call (a wrong argument count after a change of a
signature, say) propagates: it never turns silently into the numpy path.

With ``EDGEDRIFT_KERNEL_TRACE=<folder>`` set (CI's first test pass), :data:`MODULE` is the extension behind
a record of which test module's processes read it (:mod:`edgedrift.kernel_trace`), and the numpy pass
re-runs only those modules; unset, nothing of the trace is imported.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Literal

from edgedrift.models.losses import LogisticLoss, Loss, SquaredHingeLoss, SquaredLoss

if TYPE_CHECKING:
    from edgedrift.kernel_trace import TracedKernels

__all__ = ["MODULE", "LayoutError", "for_loss", "path"]


def _load() -> ModuleType | None:
    """The compiled module, or None when switched off or not built (only an ImportError means "not built")."""
    if os.environ.get("EDGEDRIFT_NO_KERNELS", "") not in ("", "0"):
        return None
    try:
        from edgedrift import _kernels
    except ImportError:
        return None
    if not isinstance(getattr(_kernels, "LayoutError", None), type):
        raise RuntimeError(
            f"{_kernels.__file__} is an old build of edgedrift._kernels: reinstall edgedrift-core "
            "(pip install -e ./shared, or bash scripts/setup.sh), or set EDGEDRIFT_NO_KERNELS=1"
        )
    return _kernels


_LOADED = _load()


class _NoLayoutError(ValueError):
    """Stands in for ``edgedrift._kernels.LayoutError`` where the extension is not loaded."""


#: What a kernel raises for an array it does not take as it is (a ValueError): the caller runs the numpy
#: code for it. Only this error means "use numpy"; the call sites catch nothing else.
LayoutError: type[ValueError] = _NoLayoutError if _LOADED is None else _LOADED.LayoutError


def _traced(module: ModuleType | None) -> TracedKernels | None:
    """``module`` behind a record of its uses when ``EDGEDRIFT_KERNEL_TRACE`` is set (CI's first pass,
    :mod:`edgedrift.kernel_trace`); None otherwise, and nothing of the trace is imported."""
    if module is None or not os.environ.get("EDGEDRIFT_KERNEL_TRACE"):
        return None
    from edgedrift.kernel_trace import traced

    return traced(module, os.environ)


_TRACED = _traced(_LOADED)

#: ``edgedrift._kernels``, or None: the learners and monitors then run their numpy code.
MODULE: ModuleType | None = _LOADED if _TRACED is None else _TRACED


def path() -> Literal["compiled", "numpy"]:
    """``"compiled"`` (the extension) or ``"numpy"`` (not built, or switched off): the path in use now."""
    if _TRACED is not None:  # what a process says about its path is a use of the kernels
        _TRACED.trace.touch("path()")
    return "numpy" if MODULE is None else "compiled"


_LOSS_CODES: dict[type[Loss], int] = {LogisticLoss: 0, SquaredHingeLoss: 1, SquaredLoss: 2}


def for_loss(loss: Loss) -> tuple[ModuleType, int] | None:
    """The kernels and their number for one of the three losses of Table 1, or None when there are no
    kernels or the loss is another one (then the numpy code runs)."""
    code = _LOSS_CODES.get(type(loss))
    if MODULE is None or code is None:
        return None
    return MODULE, code

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
* ``content_keys``: Python's hash of every sample's ``(*x, y, ts)`` (``edgedrift_edge.messages``: the
  digests that tell a redelivery from a reused id; checked against ``hash`` when first loaded);
* ``id_find`` … ``id_unplace_many``: the probing of the hash table of sample ids behind the edge agent's
  recent samples (``edgedrift_edge.id_index``: find, insert, backward-shift delete).

The numpy code stays the reference. Only the dot products may sum in another order than BLAS does, so
the two agree to rounding (``tests/unit/test_kernels.py``, ``test_newton_batch_kernel.py``,
``test_gateway_batch_kernels.py``), not bit for bit: the extension is built when
the package is installed (a C compiler is required, as for liblinear-official), so that a deployed edge
and the evaluator take the same path. :data:`MODULE` is None when ``EDGEDRIFT_NO_KERNELS=1`` is set (to
measure or check the numpy code) or the extension is missing (a source tree on ``PYTHONPATH`` that was
never built); an array a kernel does not take (not C-contiguous) also runs the numpy code.
"""

from __future__ import annotations

import os
from types import ModuleType

from edgedrift.models.losses import LogisticLoss, Loss, SquaredHingeLoss, SquaredLoss

__all__ = ["MODULE", "for_loss"]


def _load() -> ModuleType | None:
    if os.environ.get("EDGEDRIFT_NO_KERNELS", "") not in ("", "0"):
        return None
    try:
        from edgedrift import _kernels
    except ImportError:
        return None
    return _kernels


#: ``edgedrift._kernels``, or None: the learners and monitors then run their numpy code.
MODULE: ModuleType | None = _load()

_LOSS_CODES: dict[type[Loss], int] = {LogisticLoss: 0, SquaredHingeLoss: 1, SquaredLoss: 2}


def for_loss(loss: Loss) -> tuple[ModuleType, int] | None:
    """The kernels and their number for one of the three losses of Table 1, or None when there are no
    kernels or the loss is another one (then the numpy code runs)."""
    code = _LOSS_CODES.get(type(loss))
    if MODULE is None or code is None:
        return None
    return MODULE, code

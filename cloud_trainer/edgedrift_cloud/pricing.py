"""The price of a training job, computed in the API before the job takes a place, a budget or a byte of
history: a job above ``EDGEDRIFT_CLOUD_MAX_TRAIN_COST`` is refused (422 ``cost_cap``) without running.

The unit is a training *cell*: one row x one feature of one LIBLINEAR fit (about 0.05-0.1 us of CPU on
the 2-core reference machine). A plain recompute costs rows x features x grid (grid: the fits of a
``C="auto"`` search). A re-tuning recompute (``retune``) prices the whole search of
:func:`edgedrift.training.retune.retune_on_history` over the history it will load: the window
validation's fits (each candidate length on each fold, the final fit and the anchor check's), every
grid point's prequential replay of the edge learner over the recent history and the anchor check's two
replays, each replay step priced at :func:`step_cells` (O(d^2) for the second-order learner).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from edgedrift.strategies.retuned import grid_points
from edgedrift.training.linear import DEFAULT_C_GRID, tune_C
from edgedrift.training.retune import WINDOW_LENGTHS, choose_window, retune_on_history
from edgedrift.wire import WindowHeader

__all__ = ["TrainCost", "retune_search_cost", "step_cells", "train_cost"]

#: Folds of the ``C="auto"`` search (``tune_C``'s default, which the training uses).
TUNE_FOLDS: int = inspect.signature(tune_C).parameters["folds"].default
_WINDOW = inspect.signature(choose_window).parameters
_SEARCH = inspect.signature(retune_on_history).parameters
#: The re-tuning search's shape (its defaults, which the cloud uses).
VALIDATION_FOLDS: int = _WINDOW["folds"].default
VALIDATION_BLOCK: int = _WINDOW["block"].default
RECENT_LABELS: int = _SEARCH["recent"].default
HOLDOUT_LABELS: int = _SEARCH["holdout"].default
#: Cells of one replay step besides the learner's own arithmetic (a kernel call and Python around it:
#: about 2 us, measured with bench/retune_cost.py's learners on the reference machine).
STEP_BASE_CELLS = 32


@dataclass(frozen=True)
class TrainCost:
    """What a job costs: rows x features x grid for the window's training (grid: the fits of the
    ``C="auto"`` search, else 1) plus ``search`` for a re-tuning recompute over ``history`` labels."""

    rows: int
    features: int
    grid: int
    search: int = 0
    history: int = 0

    @property
    def cost(self) -> int:
        return self.rows * self.features * self.grid + self.search


def train_cost(header: WindowHeader, rows: int, features: int, history: int = 0) -> TrainCost:
    """The cost of ``header``'s job on a rows x features window; with ``header.retune``, over a stored
    history of ``history`` labels (see :class:`TrainCost`)."""
    grid = 1
    if header.learner != "shrub" and header.params.C == "auto":
        grid = len(DEFAULT_C_GRID) * max(2, min(TUNE_FOLDS, rows // 2))
    if header.retune is None:
        return TrainCost(rows, features, grid)
    search = grid * retune_search_cost(
        header.retune.learner, rows, features, history, header.retune.window_labels
    )
    return TrainCost(rows, features, grid, search, history)


def step_cells(learner: str, features: int) -> int:
    """Cells of one replay step of an edge learner: O(d^2) for ``newton`` (its Newton step updates a
    d x d matrix: about 1.7 ns per entry measured), O(d) for ``rmsprop``."""
    work = features * features // 32 if learner == "newton" else features // 4
    return STEP_BASE_CELLS + work


def retune_search_cost(learner: str, rows: int, features: int, history: int, window_labels: int) -> int:
    """The cells of :func:`~edgedrift.training.retune.retune_on_history` on a window of ``rows`` and a
    history of ``history`` labels (the window stands in for a shorter history), as that function runs:
    the window validation's fits, the final and the anchor check's fits, the grid's replays over the
    recent labels and the anchor check's two replays."""
    n = max(history, rows)
    lengths = sorted({rows, *WINDOW_LENGTHS})
    fits = sum(
        VALIDATION_FOLDS * length for length in lengths if length + VALIDATION_FOLDS * VALIDATION_BLOCK <= n
    )
    fits += 2 * min(n, max(lengths))
    steps = len(grid_points(learner)) * min(n, RECENT_LABELS)
    if n - HOLDOUT_LABELS >= window_labels:
        steps += 2 * (window_labels + HOLDOUT_LABELS)
    return fits * features + steps * step_cells(learner, features)

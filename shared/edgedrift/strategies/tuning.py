"""The incremental learners a strategy can name, and their honest tuning on the first window.

Each learner has a factory (its documented defaults, sized for the stream of a :class:`Context`) and at
most one hyper-parameter that is tuned, by prequential score on the first window's labels only: the
scored part of the stream is never looked at. A tuned value replaces the default only on clear evidence
(:func:`evidence_choice`): 200 labels cannot tell configurations a few points apart, and a choice made
on noise lost to the defaults on held-back real streams.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence

import numpy as np

from edgedrift.labels import is_multiclass
from edgedrift.learners import SGD, AdaptiveSGD, ForgettingNewton, OneVsRest, Perceptron
from edgedrift.learners.base import IncrementalLearner, OnlineLearner
from edgedrift.models.losses import FloatArray
from edgedrift.strategies.context import Context

__all__ = [
    "BLOCK_LABELS",
    "LEARNERS",
    "TUNE_LEVEL",
    "WARMUP_PER_CLASS",
    "LearnerFactory",
    "block_means",
    "clearly_better",
    "evidence_choice",
    "for_classes",
    "held_out_gains",
    "make_learner",
    "prequential_loop",
    "prequential_score",
    "prequential_scores",
    "tune_learner",
    "warmup_labels",
]

LearnerFactory = Callable[..., OnlineLearner]


def _sgd(ctx: Context, lr: float = 0.01) -> OnlineLearner:
    """The DRUiD paper's incremental SGD (raw features; λ = 1/(C·N) as in the batch objective)."""
    l2 = 1.0 / (ctx.C * max(len(ctx.y0), 1))
    return SGD(ctx.n_features, ctx.loss, lr=lr, schedule="inverse", l2=l2, task=ctx.task)


def _rmsprop(ctx: Context, lr: float = 0.3) -> OnlineLearner:
    return AdaptiveSGD(ctx.n_features, ctx.loss, lr=lr, method="rmsprop", task=ctx.task)


def _newton(ctx: Context, forgetting: float = 0.9) -> OnlineLearner:
    return ForgettingNewton(ctx.n_features, ctx.loss, forgetting=forgetting, prior=0.1, task=ctx.task)


def _perceptron(ctx: Context) -> OnlineLearner:
    return Perceptron(ctx.n_features)


def _bls(ctx: Context, forgetting: float | None = 0.99) -> OnlineLearner:
    """Online-BLS (Lei et al., arXiv 2501.16932) with the paper's sizes; inputs scaled by a map frozen on
    the first window. ``forgetting`` None selects Algorithm 1, else Algorithm 2 with μ = ``forgetting``."""
    from edgedrift.learners.online_bls import OnlineBLS

    bls = OnlineBLS(ctx.n_features, forgetting=forgetting, seed=0)
    bls.fit_scaler(ctx.X0)
    return bls


def _bls_static(ctx: Context) -> OnlineLearner:
    """Online-BLS without forgetting (Algorithm 1)."""
    return _bls(ctx, None)


def _shrubs(ctx: Context) -> OnlineLearner:
    """Shrub Ensemble (Buschjäger et al., AAAI 2022) over the shrubs the cloud trains, with the paper's
    reference setting (M = 32 shrubs, weights fitted on the last B = 32 labels)."""
    from edgedrift.learners.shrub_ensemble import ShrubEnsemble

    return ShrubEnsemble()


def for_classes(learner: OnlineLearner, ctx: Context) -> OnlineLearner:
    """The learner for the context's classes: one-vs-rest over copies of a binary linear learner when the
    stream has C ≥ 3 classes; any other learner as it is."""
    multi = ctx.task == "classification" and is_multiclass(ctx.n_classes)
    if multi and isinstance(learner, IncrementalLearner):
        return OneVsRest(learner, ctx.n_classes)
    return learner


#: name -> (factory, grid of the hyper-parameter tuned on the first window)
LEARNERS: dict[str, tuple[LearnerFactory, dict[str, tuple[float, ...]]]] = {
    "sgd": (_sgd, {"lr": (0.001, 0.01, 0.1, 1.0)}),
    "rmsprop": (_rmsprop, {"lr": (0.03, 0.1, 0.3, 1.0)}),
    "newton": (_newton, {"forgetting": (0.8, 0.9, 0.95, 0.98, 0.995)}),
    "perceptron": (_perceptron, {}),
    "bls": (_bls, {}),
    "bls-static": (_bls_static, {}),
    "shrubs": (_shrubs, {}),
}


def prequential_scores(learner: OnlineLearner, X: FloatArray, y: FloatArray) -> FloatArray:
    """Test-then-train score of each sample: 1/0 for a right/wrong class, or −(ŷ − y)² for regression.

    One compiled call where the learner has a replay kernel (``replay_predictions``: the linear learners
    and their one-vs-rest), else :func:`prequential_loop`. The grid searches replay dozens of
    configurations over thousands of labels (the cloud's re-tuning, the first-window tuning), so the
    per-sample calls were most of a re-tuning recompute's time.

    Examples
    --------
    >>> import numpy as np
    >>> from edgedrift.learners import Perceptron
    >>> X = np.array([[1.0, 0.0], [-1.0, 0.0], [2.0, 1.0], [-2.0, 1.0]])
    >>> prequential_scores(Perceptron(2, scale=False), X, np.array([1.0, -1.0, 1.0, -1.0])).tolist()
    [1.0, 0.0, 1.0, 1.0]
    """
    classification = learner.task == "classification"
    replay = getattr(learner, "replay_predictions", None)
    preds = replay(X, y) if replay is not None else None
    if preds is not None:  # the compiled replay: the loop below, bit for bit
        scores: FloatArray = (preds == y).astype(np.float64) if classification else -((preds - y) ** 2)
        return scores
    return prequential_loop(learner, X, y)


def prequential_loop(learner: OnlineLearner, X: FloatArray, y: FloatArray) -> FloatArray:
    """:func:`prequential_scores` one sample at a time (``predict_one``, then ``learn_one``): the reference
    of the compiled replay, and the path of a learner that has none."""
    out = np.empty(len(y))
    classification = learner.task == "classification"
    for i, (xi, yi) in enumerate(zip(X, y, strict=True)):
        p = learner.predict_one(xi)
        out[i] = float(p == yi) if classification else -((p - yi) ** 2)
        learner.learn_one(xi, float(yi))
    return out


def prequential_score(learner: OnlineLearner, X: FloatArray, y: FloatArray) -> float:
    """Test-then-train accuracy (or −MSE for regression) of a fresh learner over (X, y).

    Examples
    --------
    >>> import numpy as np
    >>> from edgedrift.learners import Perceptron
    >>> X = np.array([[1.0, 0.0], [-1.0, 0.0], [2.0, 1.0], [-2.0, 1.0]])
    >>> prequential_score(Perceptron(2, scale=False), X, np.array([1.0, -1.0, 1.0, -1.0]))
    0.75
    """
    return float(prequential_scores(learner, X, y).sum()) / max(len(y), 1)


#: Labels per block of the held-out comparison (a first window of 200 labels makes ten blocks).
BLOCK_LABELS = 20
#: One-sided level of the sign test a tuned choice must pass to replace the reference (the defaults).
TUNE_LEVEL = 0.05
#: Labels of each class a fresh learner is still warming up on: the evidence starts after them. With 40
#: classes a first window of 200 labels is all warm-up, and a configuration that learns fastest from
#: scratch there lost 24 points to the defaults on the rest of the outdoor stream (docs/benchmarks.md).
WARMUP_PER_CLASS = 5


def warmup_labels(n_classes: int, block: int = BLOCK_LABELS) -> int:
    """Labels at the start of a replay that are warm-up, not evidence: one block, or
    :data:`WARMUP_PER_CLASS` labels per class when that is more.

    Examples
    --------
    >>> warmup_labels(2), warmup_labels(4), warmup_labels(40)
    (20, 20, 200)
    """
    return max(block, WARMUP_PER_CLASS * n_classes)


def block_means(scores: FloatArray, block: int = BLOCK_LABELS) -> FloatArray:
    """Mean score of each whole block of ``block`` consecutive labels (the oldest remainder is dropped).

    Examples
    --------
    >>> block_means(np.array([0.0, 1.0, 1.0, 1.0, 0.0]), 2).tolist()
    [1.0, 0.5]
    """
    k = len(scores) // block
    means: FloatArray = (
        np.asarray(scores[len(scores) - k * block :], dtype=float).reshape(k, block).mean(axis=1)
    )
    return means


def held_out_gains(
    scores: Sequence[FloatArray], reference: int, block: int = BLOCK_LABELS, warmup: int = BLOCK_LABELS
) -> FloatArray:
    """Per block after the first ``warmup`` labels (the learners' warm-up, which a long stream never sees
    again; at least one block): the block score of the configuration that the other blocks after the
    warm-up choose (best total, the first of ties) minus the ``reference`` configuration's. So the choice
    is judged on labels it was not made on.

    Examples
    --------
    >>> a = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    >>> b = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    >>> held_out_gains([a, b], reference=0, block=2, warmup=2).tolist()
    [0.5, 0.5, 0.5]
    """
    B = np.array([block_means(s, block) for s in scores])
    n = max((len(s) for s in scores), default=0)
    skip = max(1, -(-(warmup - n % block) // block))
    if B.ndim != 2 or B.shape[1] <= skip:
        return np.zeros(0)
    B = B[:, skip:]
    total = B.sum(axis=1)
    picks = [int(np.argmax(total - B[:, b])) for b in range(B.shape[1])]
    return np.array([B[p, b] - B[reference, b] for b, p in enumerate(picks)])


def clearly_better(gains: FloatArray, level: float = TUNE_LEVEL) -> bool:
    """Whether paired gains are clearly positive: their mean is above 0 and a one-sided sign test (ties
    dropped) rejects "no better" at ``level``: P(Binomial(n, ½) ≥ wins) ≤ level.

    Examples
    --------
    >>> clearly_better(np.array([0.05] * 8 + [-0.05])), clearly_better(np.array([0.05] * 6 + [-0.05] * 3))
    (True, False)
    """
    wins, losses = int((gains > 0).sum()), int((gains < 0).sum())
    n = wins + losses
    if n == 0 or float(gains.mean()) <= 0.0:
        return False
    tail = sum(math.comb(n, k) for k in range(wins, n + 1)) / 2.0**n
    return tail <= level


def evidence_choice(
    scores: Sequence[FloatArray],
    reference: int,
    block: int = BLOCK_LABELS,
    level: float = TUNE_LEVEL,
    warmup: int = BLOCK_LABELS,
) -> int:
    """The position of the configuration to use: the best mean score (the first of ties) when choosing
    that way clearly beats the ``reference`` on held-out blocks (:func:`held_out_gains`,
    :func:`clearly_better`), else the reference. Fewer than three blocks of labels: the reference.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> noise = [rng.integers(0, 2, 200).astype(float) for _ in range(4)]
    >>> evidence_choice(noise, reference=0)
    0
    >>> evidence_choice([np.zeros(200), np.ones(200)], reference=0)
    1
    """
    means = [float(s.mean()) if len(s) else 0.0 for s in scores]
    top = int(np.argmax(means))
    if top == reference:
        return reference
    return top if clearly_better(held_out_gains(scores, reference, block, warmup), level) else reference


def tune_learner(name: str, ctx: Context) -> dict[str, float]:
    """Pick the learner's hyper-parameter by prequential score on the first window's labels; the best
    value replaces the factory's default only on clear evidence (:func:`evidence_choice`).

    A learner without a grid gets ``{}``.

    Examples
    --------
    >>> import numpy as np
    >>> from edgedrift.training.linear import LinearTrainer
    >>> rng = np.random.default_rng(0)
    >>> X0 = rng.normal(size=(200, 2))
    >>> y0 = np.sign(X0[:, 0] - X0[:, 1])
    >>> ctx = Context(2, "classification", "logistic", 200, 10.0, LinearTrainer("logistic", 10.0), X0, y0)
    >>> tune_learner("rmsprop", ctx), tune_learner("perceptron", ctx)
    ({'lr': 0.3}, {})
    """
    factory, grid = LEARNERS[name]
    if not grid:
        return {}
    ((param, values),) = grid.items()
    default = inspect.signature(factory).parameters[param].default
    scores = [
        prequential_scores(for_classes(factory(ctx, **{param: v}), ctx), ctx.X0, ctx.y0) for v in values
    ]
    warmup = warmup_labels(ctx.n_classes)
    return {param: values[evidence_choice(scores, values.index(default), warmup=warmup)]}


def make_learner(name: str, ctx: Context) -> OnlineLearner:
    """The named learner for the context's stream, tuned on its first window once (remembered in
    ``ctx.learner_params``); one-vs-rest over C copies for a stream of C ≥ 3 classes (:func:`for_classes`).

    Examples
    --------
    >>> import numpy as np
    >>> from edgedrift.training.linear import LinearTrainer
    >>> rng = np.random.default_rng(0)
    >>> X0 = rng.normal(size=(200, 2))
    >>> y0 = np.sign(X0[:, 0] - X0[:, 1])
    >>> ctx = Context(2, "classification", "logistic", 200, 10.0, LinearTrainer("logistic", 10.0), X0, y0)
    >>> newton = make_learner("newton", ctx)
    >>> type(newton).__name__, ctx.learner_params
    ('ForgettingNewton', {'newton': {'forgetting': 0.9}})
    """
    factory, _ = LEARNERS[name]
    params = ctx.first_window(name, lambda: tune_learner(name, ctx))
    return for_classes(factory(ctx, **params), ctx)

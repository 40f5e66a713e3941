"""Shrub Ensembles: the simplex projection and prox, the optimiser step, pruning, memory, the slides'
"Behaviour" property and accuracy on a drifting stream."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgedrift.data.generators import sea
from edgedrift.data.sine_multiclass import sine_mc
from edgedrift.learners.shrub_ensemble import PAPER_MAX_DEPTH, PAPER_MAX_TREES, PAPER_WINDOW, ShrubEnsemble
from edgedrift.learners.simplex import project_simplex, prox_sparse_simplex
from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import get_loss
from edgedrift.models.tree import ShrubModel, predict_proba_tree, predict_tree
from edgedrift.training.shrub import train_shrub

vectors = st.lists(
    st.floats(min_value=-5.0, max_value=5.0, allow_nan=False, allow_infinity=False), min_size=1, max_size=12
).map(np.array)


def bisection_projection(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the simplex without sorting: θ with Σ max(v + θ, 0) = 1 by bisection.

    The sum rises monotonically in θ from 0 (θ = −max v) to ≥ 1 (θ = 1/n − min v).
    """
    lo, hi = -float(v.max()), 1.0 / v.size - float(v.min())
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.maximum(v + mid, 0.0).sum() < 1.0 else (lo, mid)
    return np.maximum(v + 0.5 * (lo + hi), 0.0)


def exact_sparse_projection(v: np.ndarray, M: int) -> tuple[np.ndarray, float]:
    """Brute force over all supports of size ≤ M: the Euclidean projection onto {Δ, ‖w‖₀ ≤ M} and its cost."""
    best, best_cost = np.zeros_like(v), np.inf
    for k in range(1, min(M, v.size) + 1):
        for S in itertools.combinations(range(v.size), k):
            w = np.zeros_like(v)
            w[list(S)] = bisection_projection(v[list(S)])
            cost = float(((w - v) ** 2).sum())
            if cost < best_cost - 1e-12:
                best, best_cost = w, cost
    return best, best_cost


def reference_cpp_projection(v: np.ndarray) -> np.ndarray:
    """The C++ reference's ``to_prob_simplex``: sorted with ``std::greater<int>``, which truncates the
    doubles, so all weights in (−1, 1) compare equal and keep their order (what insertion sort does)."""
    u = sorted(v.tolist(), key=lambda a: -int(a))
    theta, total = 0.0, 0.0
    for i, ui in enumerate(u):
        total += ui
        t = (1.0 - total) / (i + 1)
        if ui + t > 0:
            theta = t
    return np.maximum(v + theta, 0.0)


# ------------------------------------------------------------------------------ projection


@settings(max_examples=300, deadline=None)
@given(vectors)
def test_projection_is_the_euclidean_projection(v: np.ndarray) -> None:
    w = project_simplex(v)
    assert np.all(w >= 0.0)
    assert w.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(w, bisection_projection(v), atol=1e-9)


def test_projection_of_a_simplex_point_is_itself() -> None:
    v = np.array([0.2, 0.0, 0.5, 0.3])
    np.testing.assert_allclose(project_simplex(v), v, atol=1e-15)
    assert project_simplex(np.array([])).size == 0


def test_reference_integer_sort_bug_gives_a_wrong_projection_and_ours_is_right() -> None:
    v = np.array([-0.5, 0.9, 0.1])
    buggy = reference_cpp_projection(v)
    assert buggy.sum() == pytest.approx(4.0 / 3.0)  # not even on the simplex
    np.testing.assert_allclose(project_simplex(v), [0.0, 0.9, 0.1], atol=1e-15)
    np.testing.assert_allclose(project_simplex(v), bisection_projection(v), atol=1e-9)
    # Sorted input is where the bug is harmless, which is why it goes unnoticed.
    s = np.sort(v)[::-1]
    np.testing.assert_allclose(reference_cpp_projection(s), project_simplex(s), atol=1e-15)


@settings(max_examples=200, deadline=None)
@given(vectors, st.integers(min_value=1, max_value=6))
def test_prox_is_sparse_on_the_simplex_and_exact_without_zero_entries(v: np.ndarray, M: int) -> None:
    w = prox_sparse_simplex(v, M)
    assert np.count_nonzero(w) <= M
    assert np.all(w >= 0.0)
    kept = np.argsort(-v, kind="stable")[:M]
    if np.any(v[kept] != 0.0):
        assert w.sum() == pytest.approx(1.0, abs=1e-12)
    else:
        assert not w.any()  # the reference's rule: an all-zero top-M leaves nothing to project
    if v.size <= 8 and np.all(v[kept] != 0.0):
        _, cost = exact_sparse_projection(v, M)
        assert float(((w - v) ** 2).sum()) == pytest.approx(cost, abs=1e-9)


def test_prox_differs_from_the_exact_projection_only_through_the_exactly_zero_kept_entry() -> None:
    v = np.array([0.5, 0.0, -3.0])
    np.testing.assert_allclose(prox_sparse_simplex(v, 2), [1.0, 0.0, 0.0])
    exact, _ = exact_sparse_projection(v, 2)
    np.testing.assert_allclose(exact, [0.75, 0.25, 0.0], atol=1e-9)


# ------------------------------------------------------------------------------- helpers


def blobs(n: int, n_classes: int, seed: int, d: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    score = X[:, 0] + 0.5 * np.sin(2 * X[:, 1]) + 0.3 * rng.normal(size=n)
    cuts = np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1])
    return X, np.searchsorted(cuts, score).astype(np.float64)


def shrub(X: np.ndarray, y: np.ndarray, depth: int, seed: int = 0) -> dict[str, Any]:
    return train_shrub(X, y, "classification", max_depth=depth, seed=seed)


def window_step(
    docs: list[dict[str, Any]], w: np.ndarray, X: np.ndarray, y: np.ndarray, alpha: float, M: int
) -> np.ndarray:
    """One proximal step written out from the notes: f = Σ wᵢPᵢ, G = 2(f − onehot),
    dirᵢ = Σ Pᵢ·G / (B·C), then the prox of w − α·dir."""
    classes = np.unique(np.concatenate([np.asarray(d["classes"]) for d in docs] + [y]))
    P = np.zeros((len(docs), len(y), classes.size))
    for i, d in enumerate(docs):
        P[i][:, np.searchsorted(classes, d["classes"])] = predict_proba_tree(d, X)
    onehot = (y[:, None] == classes[None, :]).astype(float)
    G = 2.0 * (np.einsum("i,ijk->jk", w, P) - onehot)
    direction = np.einsum("ijk,jk->i", P, G) / G.size
    return prox_sparse_simplex(w - alpha * direction, M)


# ------------------------------------------------------------------------------ ensemble


def test_predictions_equal_the_weighted_shrub_documents() -> None:
    X, y = blobs(600, 3, seed=1)
    depths = (1, 3, 6, 9)
    docs = [
        shrub(X[i * 150 : i * 150 + 200], y[i * 150 : i * 150 + 200], dep, i) for i, dep in enumerate(depths)
    ]
    w = np.array([0.1, 0.2, 0.3, 0.4])
    se = ShrubEnsemble(max_trees=4, window=32)
    se.load(docs, w)
    expected = sum(wi * predict_proba_tree(d, X) for wi, d in zip(w, docs, strict=True))
    np.testing.assert_allclose(se.predict_proba_many(X), expected, atol=1e-12)
    one = [list(se.predict_proba_one(x).values()) for x in X[:50]]
    np.testing.assert_allclose(one, expected[:50], atol=1e-12)
    assert list(se.predict_proba_one(X[0])) == se.classes.tolist()
    np.testing.assert_array_equal(se.predict_many(X), se.classes[np.argmax(expected, axis=1)])
    assert se.predict_one(X[0]) == se.classes[np.argmax(expected[0])]


def test_gradient_step_prox_and_pruning_match_the_notes() -> None:
    X, y = blobs(400, 2, seed=2)
    Xw, yw = X[-64:], y[-64:]
    docs = [shrub(X[i * 80 : i * 80 + 80], y[i * 80 : i * 80 + 80], 2, i) for i in range(4)]
    new = shrub(Xw, yw, 6, seed=9)
    w0 = np.array([0.55, 0.3, 0.1, 0.05])
    alpha = 3.0
    se = ShrubEnsemble(max_trees=4, window=64, step=alpha, burnin_steps=0, update_every=0)
    se.learn_many(Xw, yw)
    se.load(docs, w0)
    se.add_shrub(new)
    expected = window_step([*docs, new], np.append(w0, 0.0), Xw, yw, alpha, 4)
    assert np.count_nonzero(expected) < 5, "the case must prune something"
    np.testing.assert_array_equal(se.tree_ids, np.flatnonzero(expected))
    np.testing.assert_allclose(se.weights, expected[expected > 0], atol=1e-12)
    assert se.n_trees == np.count_nonzero(expected) <= 4


def test_streaming_invariants_and_learn_many_equals_learn_one() -> None:
    X, y = blobs(1500, 2, seed=3)
    a = ShrubEnsemble(max_trees=3, window=50, update_every=3)
    b = a.clone()
    for t in range(0, 1500, 100):
        for i in range(t, t + 100):
            a.learn_one(X[i], y[i])
        b.learn_many(X[t : t + 100], y[t : t + 100])
        doc = shrub(X[t + 50 : t + 100], y[t + 50 : t + 100], 3, seed=t)
        a.add_shrub(doc)
        b.add_shrub(ShrubModel.from_document(doc))
        for se in (a, b):
            assert 1 <= se.n_trees <= 3
            assert np.all(se.weights > 0.0)  # pruning leaves no zero weight
            assert se.weights.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(a.weights, b.weights, atol=1e-12)
    np.testing.assert_array_equal(a.tree_ids, b.tree_ids)
    np.testing.assert_array_equal(a.predict_many(X[:200]), b.predict_many(X[:200]))
    assert a.n_learned == b.n_learned == 1500


def test_memory_is_bounded_by_the_trees_and_the_window() -> None:
    X, y = blobs(3000, 2, seed=4, d=5)
    M, B, D = 4, 128, 3
    se = ShrubEnsemble(max_trees=M, window=B)
    bound = ShrubEnsemble.memory_bound(M, B, n_features=5, n_classes=2, max_nodes=2 ** (D + 1) - 1)
    for t in range(0, 3000, 50):
        se.learn_many(X[t : t + 50], y[t : t + 50])
        se.anchor(shrub(X[max(0, t - 78) : t + 50], y[max(0, t - 78) : t + 50], D, seed=t))
        assert se.memory_bytes <= bound
    assert se.memory_bytes >= 0.5 * bound  # the bound is not vacuous: the window part is allocated


@pytest.mark.parametrize(("m", "M"), [(2, 4), (3, 3)])
@pytest.mark.parametrize("alpha_rule", ["slide", "reference-scale"])
def test_slide_behaviour_new_perfect_tree_is_added_or_replaces_the_smallest(
    m: int, M: int, alpha_rule: str
) -> None:
    """Slides, "Behaviour": all m trees wrong on every window point, a fully grown new tree right on all
    of them, α > BC/(4m): (1) m < M: the tree is added; (2) m = M: it replaces the smallest weight.

    With the reference's gradient scale (dir divided by B·C) the new tree's value after the step is 2α/C
    and every old one is at most its old weight, so at the slide's α the new tree takes all the weight.
    The second case checks the exact add / replace (the other trees stay) at the smaller α = 1.2·C/(2m).
    """
    B, C = 12, 3
    rng = np.random.default_rng(5)
    Xw = rng.normal(size=(B, 2))
    yw = np.arange(B, dtype=float) % C
    wrong = [shrub(Xw, (yw + 1 + j % 2) % C, depth=20, seed=j) for j in range(m)]
    perfect = shrub(Xw, yw, depth=20, seed=99)
    assert np.all(predict_proba_tree(perfect, Xw)[np.arange(B), yw.astype(int)] == 1.0)
    for j, doc in enumerate(wrong):
        assert np.all(predict_tree(doc, Xw) != yw), j
    w0 = np.arange(m, 0, -1, dtype=float) + 1.0
    w0 /= w0.sum()  # distinct weights; the smallest is the last old tree's (id m - 1)
    alpha = 1.01 * B * C / (4 * m) if alpha_rule == "slide" else 1.2 * C / (2 * m)
    se = ShrubEnsemble(max_trees=M, window=B, step=alpha, burnin_steps=0, update_every=0)
    se.learn_many(Xw, yw)
    se.load(wrong, w0)
    se.add_shrub(perfect)
    ids = se.tree_ids.tolist()
    assert m in ids and se.weights[ids.index(m)] > 0.0  # the new tree (id m) is in the ensemble
    assert se.n_trees <= M
    if m == M:
        assert m - 1 not in ids  # the smallest-weight tree is gone
    if alpha_rule == "reference-scale":
        assert ids == ([*range(m), m] if m < M else [*range(m - 1), m])
    np.testing.assert_array_equal(se.predict_many(Xw), yw)


def test_classes_are_the_union_of_shrub_classes_and_labels() -> None:
    X, y = blobs(200, 2, seed=6)
    labels = np.where(y > 0, 1.0, -1.0)
    se = ShrubEnsemble(max_trees=2, window=16)
    se.add_shrub(shrub(X[:100], labels[:100], 2))  # empty window: enters with weight 1
    assert se.n_trees == 1
    np.testing.assert_array_equal(se.weights, [1.0])
    se.learn_one(X[100], 2.5)
    np.testing.assert_array_equal(se.classes, [-1.0, 1.0, 2.5])
    proba = se.predict_proba_one(X[0])
    assert list(proba) == [-1.0, 1.0, 2.5] and proba[2.5] == 0.0
    p = np.array(list(proba.values()))
    doc = shrub(X[:100], labels[:100], 2)
    assert doc["classes"] == [-1.0, 1.0]
    np.testing.assert_allclose(p[:2], predict_proba_tree(doc, X[:1])[0])


def test_without_trees_predicts_the_window_majority() -> None:
    se = ShrubEnsemble(window=4)
    assert se.predict_one(np.zeros(2)) == 0.0
    for label in (-1.0, 1.0, -1.0, 1.0, 1.0):  # the first one leaves the window of 4
        se.learn_one(np.zeros(2), label)
    assert se.window_size == 4
    assert se.predict_proba_one(np.zeros(2)) == {-1.0: 0.25, 1.0: 0.75}
    assert se.predict_one(np.zeros(2)) == 1.0
    np.testing.assert_array_equal(se.predict_many(np.zeros((3, 2))), [1.0, 1.0, 1.0])


def test_anchor_accepts_documents_and_models_and_ignores_linear_models() -> None:
    X, y = blobs(100, 2, seed=7)
    se = ShrubEnsemble(max_trees=4, window=32)
    se.learn_many(X[:32], y[:32])
    se.anchor(shrub(X, y, 2))
    se.anchor(ShrubModel.from_document(shrub(X, y, 3, seed=1)))
    ids = se.tree_ids.tolist()
    se.anchor(LinearModel(loss=get_loss("logistic"), beta=np.zeros(4), C=1.0))
    assert se.tree_ids.tolist() == ids
    fresh = se.clone()
    assert fresh.n_trees == 0 and fresh.n_learned == 0 and fresh.max_trees == 4 and fresh.window == 32
    se.reset()
    assert se.n_trees == 0 and se.n_learned == 0 and se.window_size == 0


@pytest.mark.parametrize("kwargs", [{"step": 0.0}, {"step": "fast"}, {"rho": 1.5}, {"loss": "hinge"}])
def test_bad_hyper_parameters_are_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ShrubEnsemble(**kwargs)


def test_rho_rule_and_cross_entropy_stay_on_the_sparse_simplex() -> None:
    X, y = blobs(800, 2, seed=8)
    learners = (ShrubEnsemble(max_trees=3, window=64, rho=0.3), ShrubEnsemble(3, 64, loss="cross-entropy"))
    for se in learners:
        for t in range(0, 800, 40):
            se.learn_many(X[t : t + 40], y[t : t + 40])
            se.anchor(shrub(X[max(0, t - 24) : t + 40], y[max(0, t - 24) : t + 40], 3, seed=t))
            assert 1 <= se.n_trees <= 3 and se.weights.sum() == pytest.approx(1.0)


# ------------------------------------------------------------------------------ accuracy


def prequential(n_trees: int, k: int, B: int, depth: int) -> dict[str, float]:
    """SEA (10% noise) with drifts at 2,000 and 4,000: a shrub on the last B labels every k labels.

    Compares the Shrub Ensemble, the latest shrub alone and a static shrub trained on the first B labels
    (test-then-train, accuracy after the first B labels). Over SEA seeds 0-5 the ensemble led the latest
    shrub by 2.0-3.8 points and the static one by 1.4-6.0 points (default settings); seed 3 is asserted.
    """
    s = sea(n=6000, noise=0.1, drift_at=(2000, 4000), seed=3)
    X, y = s.X, s.y
    se = ShrubEnsemble(max_trees=n_trees, window=B)
    static = shrub(X[:B], y[:B], depth)
    latest = static
    se.learn_many(X[:B], y[:B])
    se.add_shrub(static)
    hits = {"se": 0, "latest": 0, "static": 0}
    for i in range(B, len(y)):
        x = X[i]
        hits["se"] += se.predict_one(x) == y[i]
        hits["latest"] += ShrubModel(latest).predict_one(x) == y[i]
        hits["static"] += ShrubModel(static).predict_one(x) == y[i]
        se.learn_one(x, y[i])
        if (i + 1 - B) % k == 0:
            latest = shrub(X[i + 1 - B : i + 1], y[i + 1 - B : i + 1], depth, seed=i)
            se.anchor(latest)
    return {key: v / (len(y) - B) for key, v in hits.items()}


def test_ensemble_beats_the_latest_and_a_static_shrub_on_drifting_sea() -> None:
    acc = prequential(n_trees=8, k=50, B=256, depth=4)
    assert acc["se"] >= acc["latest"] + 0.02, acc
    assert acc["se"] >= acc["static"] + 0.02, acc


# ------------------------------------------------------------- the paper's setting (issue 27)


def multiclass_prequential(se: ShrubEnsemble, k: int, B: int, depth: int) -> float:
    """Sine-MC (4 classes, abrupt drifts at 1,000 and 2,000, seed 0): a shrub on the last B labels every k
    labels, test-then-train accuracy after the first 100 labels; memory and size checked on the way."""
    s = sine_mc(n_classes=4, d=2, n_concepts=3, concept_length=1000, seed=0)
    X, y = s.X, s.y
    n0 = 100
    se.learn_many(X[:n0], y[:n0])
    se.anchor(shrub(X[n0 - B if n0 > B else 0 : n0], y[n0 - B if n0 > B else 0 : n0], depth))
    # A CART tree on B rows has at most 2B − 1 nodes, whatever its depth limit.
    nodes = min(2 ** (depth + 1) - 1, 2 * B - 1)
    bound = ShrubEnsemble.memory_bound(se.max_trees, se.window, 2, 4, nodes)
    hits = 0
    for i in range(n0, len(y)):
        hits += se.predict_one(X[i]) == y[i]
        se.learn_one(X[i], y[i])
        if (i + 1 - n0) % k == 0:
            lo = max(0, i + 1 - B)
            se.anchor(shrub(X[lo : i + 1], y[lo : i + 1], depth, seed=i))
            assert se.n_trees <= se.max_trees
            assert se.memory_bytes <= bound
    return hits / (len(y) - n0)


def test_paper_setting_is_the_default_and_beats_the_former_defaults_on_a_multiclass_drift() -> None:
    """The reference setting (M = 32, B = 32, depth 8, steps when a shrub arrives) is the default; on a
    drifting 4-class stream it scores 0.89 against 0.78 for the former M = 8, B = 256, depth 4 with a
    step every 16 labels (measured; both with a shrub every 10 labels)."""
    se = ShrubEnsemble()
    assert (se.max_trees, se.window, se.update_every, se.step, se.loss) == (32, 32, 0, "per-class", "mse")
    assert (PAPER_MAX_TREES, PAPER_WINDOW, PAPER_MAX_DEPTH) == (32, 32, 8)
    paper = multiclass_prequential(se, k=10, B=PAPER_WINDOW, depth=PAPER_MAX_DEPTH)
    former = multiclass_prequential(ShrubEnsemble(8, 256, update_every=16), k=10, B=256, depth=4)
    assert paper >= 0.85, (paper, former)
    assert paper >= former + 0.05, (paper, former)


def test_shrub_strategy_trains_on_the_papers_window_whatever_the_strategy_window() -> None:
    """The strategy's loop keeps B = 32 labels for the cloud's shrubs and the ensemble's weights, not the
    protocol's window (200 labels on ELEC2, 40 on keystroke), and asks for depth-8 shrubs."""
    from edgedrift.strategies import STRATEGIES, Context
    from edgedrift.training.linear import LinearTrainer

    X0, y0 = np.zeros((200, 3)), np.where(np.arange(200) % 2 == 0, 1.0, -1.0)
    ctx = Context(3, "classification", "logistic", 200, 1.0, LinearTrainer("logistic", 1.0), X0, y0)
    for name in ("shrub-ensemble", "shrub-ensemble-adwin"):
        strategy = STRATEGIES[name]
        loop = strategy.build(ctx)
        assert loop.window.size == PAPER_WINDOW  # type: ignore[union-attr]
        assert isinstance(loop.learner, ShrubEnsemble) and loop.learner.window == PAPER_WINDOW
        assert strategy.train.params == {"max_depth": PAPER_MAX_DEPTH}


@pytest.mark.parametrize("C", [2, 4, 10])
def test_per_class_step_lets_a_shrub_right_on_the_window_in_whatever_the_number_of_classes(C: int) -> None:
    """Four shrubs wrong on every window row, a new one right on all of them: with α = C/(2(m+1)) the new
    shrub takes most of the weight for any C (burn-in 5); the reference's α = 1/(m+1) is the same for
    C = 2 and gives it far less for C ≥ 3, which left a 40-class ensemble averaging stale shrubs."""
    B, m = 32, 4
    rng = np.random.default_rng(7)
    Xw = rng.normal(size=(B, 3))
    yw = np.arange(B, dtype=float) % C
    wrong = [shrub(Xw, (yw + 1 + j % (C - 1)) % C, depth=20, seed=j) for j in range(m)]
    perfect = shrub(Xw, yw, depth=20, seed=99)
    new_weight = {}
    for rule in ("per-class", "adaptive"):
        se = ShrubEnsemble(max_trees=8, window=B, step=rule)
        se.learn_many(Xw, yw)
        se.load(wrong, np.full(m, 1.0 / m))
        se.add_shrub(perfect)
        ids = se.tree_ids.tolist()
        new_weight[rule] = se.weights[ids.index(m)] if m in ids else 0.0
    assert new_weight["per-class"] >= 0.5, new_weight
    if C == 2:
        assert new_weight["adaptive"] == pytest.approx(new_weight["per-class"])
    else:
        assert new_weight["adaptive"] <= new_weight["per-class"] - 0.2, new_weight

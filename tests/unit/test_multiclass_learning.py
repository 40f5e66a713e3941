"""Multi-class learning on the edge: the one-vs-rest learner, the bound monitors of C columns (DRUiD's
recomputes on the Sine-MC stream, PredSign's argmax rule), the sine-mc generator and the strategies that
run (or refuse to run) with C classes."""

from __future__ import annotations

import numpy as np
import pytest

from edgedrift.bounds import argmax_certain, prediction_bounds
from edgedrift.data import load_dataset, sine_mc
from edgedrift.learners import SGD, AdaptiveSGD, ForgettingNewton, OneVsRest, Perceptron
from edgedrift.loop import EdgeLoop
from edgedrift.monitors import DruidMonitor, DruidPaperMonitor, PredSignMonitor, chi_scale_mle
from edgedrift.monitors.quantiles import chi_ppf
from edgedrift.strategies import STRATEGIES, Context, make_learner
from edgedrift.strategies.retuned import first_window_params
from edgedrift.training.linear import LinearTrainer, train_linear, tune_C
from edgedrift.window import CountWindow

# --- the generator --------------------------------------------------------------------------------------


def test_sine_mc_is_seeded_balanced_and_every_region_changes_class_at_a_drift() -> None:
    s = sine_mc(n_classes=5, d=3, n_concepts=4, concept_length=4000, seed=7)
    again = sine_mc(n_classes=5, d=3, n_concepts=4, concept_length=4000, seed=7)
    np.testing.assert_array_equal(s.X, again.X)
    np.testing.assert_array_equal(s.y, again.y)
    assert s.n_classes == 5 and s.classes == (0, 1, 2, 3, 4) and s.drift_points == (4000, 8000, 12000)
    assert np.all(np.abs(np.bincount(s.y.astype(int)) / len(s) - 0.2) < 0.02)
    perms = np.asarray(s.meta["permutations"])
    assert np.all(perms[1:] != perms[:-1])  # a derangement of the previous concept
    u = s.X[:, :2].mean(axis=1)
    region = (s.X[:, 2:3] > np.arange(1, 5) / 5 + 0.1 * np.sin(2 * np.pi * u)[:, None]).sum(axis=1)
    np.testing.assert_array_equal(s.y, perms[np.arange(len(s)) // 4000, region])
    spec = load_dataset("sine-mc:n_classes=3,concept_length=500,n_concepts=2", seed=7)
    assert spec.n_classes == 3 and len(spec) == 1000
    with pytest.raises(ValueError, match="n_classes >= 3"):
        sine_mc(n_classes=2)
    with pytest.raises(ValueError, match="amplitude"):
        sine_mc(n_classes=4, amplitude=0.2)


# --- the one-vs-rest learner ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "template",
    [SGD(2, lr=0.1), Perceptron(2), AdaptiveSGD(2, lr=0.1), ForgettingNewton(2, forgetting=0.95, prior=0.1)],
    ids=lambda t: type(t).__name__,
)
def test_one_vs_rest_is_c_binary_learners_on_plus_minus_one_labels(template: object) -> None:
    s = sine_mc(n_classes=4, n_concepts=1, concept_length=500, seed=1)
    ovr = OneVsRest(template, 4)  # type: ignore[arg-type]
    binaries = [template.clone() for _ in range(4)]  # type: ignore[attr-defined]
    for x, y in zip(s.X[:300], s.y[:300], strict=True):
        assert ovr.predict_one(x) == float(np.argmax([b.score_one(x) for b in binaries]))
        ovr.learn_one(x, float(y))
        for c, b in enumerate(binaries):
            b.learn_one(x, 1.0 if y == c else -1.0)
    ovr.learn_many(s.X[300:400], s.y[300:400])
    for c, b in enumerate(binaries):
        b.learn_many(s.X[300:400], np.where(s.y[300:400] == c, 1.0, -1.0))
        np.testing.assert_array_equal(ovr.learners[c].w, b.w)
    scores = np.column_stack([b.score_many(s.X[400:]) for b in binaries])
    np.testing.assert_array_equal(ovr.predict_many(s.X[400:]), np.argmax(scores, axis=1))
    assert ovr.n_learned == 400 and ovr.order == template.order  # type: ignore[attr-defined]


def test_one_vs_rest_anchors_column_c_on_learner_c() -> None:
    s = sine_mc(n_classes=3, n_concepts=1, concept_length=600, seed=2)
    model = train_linear(s.X[:300], s.y[:300], "logistic", 10.0, n_classes=3)
    sgd = OneVsRest(SGD(2, lr=0.05), 3)
    sgd.learn_many(s.X[:50], s.y[:50])
    sgd.anchor(model)
    np.testing.assert_array_equal(sgd.predict_many(s.X[300:]), model.predict(s.X[300:]))
    newton = OneVsRest(ForgettingNewton(2), 3)  # a scaled learner: the same model in its own space
    newton.learn_many(s.X[:300], s.y[:300])
    newton.anchor(model)
    np.testing.assert_allclose(newton.scores_many(s.X[300:]), model.decision_function(s.X[300:]), atol=1e-9)
    with pytest.raises(ValueError, match="4 classes cannot anchor 3"):
        sgd.anchor(train_linear(s.X[:300], s.y[:300] % 4, "logistic", 1.0, n_classes=4))
    with pytest.raises(ValueError, match="OneVsRest"):
        SGD(2).anchor(model)  # a binary learner refuses a multi-class model
    with pytest.raises(ValueError, match=r"0\.\.2"):
        sgd.learn_one(s.X[0], 3.0)
    with pytest.raises(ValueError, match="C >= 3"):
        OneVsRest(SGD(2), 2)


def test_one_vs_rest_newton_learns_a_concept_about_as_well_as_the_batch_model() -> None:
    """Prequential accuracy of the edge learner over 3,000 labels of one Sine-MC concept (C = 4) is within
    3 points of LIBLINEAR's one-vs-rest model trained on the first 1,000 and tested on the rest."""
    s = sine_mc(n_classes=4, n_concepts=1, concept_length=4000, seed=3)
    ovr = OneVsRest(ForgettingNewton(2, forgetting=0.995, prior=0.1), 4)
    hits = 0
    for x, y in zip(s.X[:4000], s.y[:4000], strict=True):
        hits += ovr.predict_one(x) == y
        ovr.learn_one(x, float(y))
    batch = train_linear(s.X[:1000], s.y[:1000], "logistic", 100.0, n_classes=4)
    batch_acc = float(np.mean(batch.predict(s.X[1000:]) == s.y[1000:]))
    late = float(np.mean(ovr.predict_many(s.X[1000:]) == s.y[1000:]))
    assert batch_acc > 0.8 and late > batch_acc - 0.03 and hits / 4000 > batch_acc - 0.06


# --- the bound monitors ---------------------------------------------------------------------------------


def test_argmax_certain_is_sound_for_random_boxes() -> None:
    rng = np.random.default_rng(0)
    centre = rng.normal(size=(2000, 5))
    half = rng.uniform(0, 1, size=(2000, 5))
    lower, upper = centre - half, centre + half
    certain = argmax_certain(lower, upper)
    assert 0.1 < certain.mean() < 0.9
    for _ in range(20):  # any scores inside the boxes have the certain rows' argmax
        inside = lower + rng.uniform(size=lower.shape) * (upper - lower)
        np.testing.assert_array_equal(np.argmax(inside, axis=1)[certain], np.argmax(lower, axis=1)[certain])


def run_monitor(monitor: DruidMonitor | DruidPaperMonitor, n_classes: int, seed: int) -> list[int]:
    """The stream indices where DRUiD recomputed on Sine-MC (every sample labeled, window 200)."""
    s = sine_mc(n_classes=n_classes, n_concepts=5, concept_length=3000, seed=seed)
    trainer = LinearTrainer("logistic", 1.0, n_classes=n_classes)
    trainer = trainer.with_C(tune_C(s.X[:200], s.y[:200], trainer).best_C)
    loop = EdgeLoop(CountWindow(200, 2), monitor, trainer)
    loop.start(trainer(s.X[:200], s.y[:200]), s.X[:200], s.y[:200])
    for i in range(200, len(s)):
        loop.process_one(s.X[i], s.y[i])
    return [200 + e.sample - 1 for e in loop.events]


@pytest.mark.parametrize(("n_classes", "seed"), [(3, 0), (5, 1)])
def test_multiclass_druid_recomputes_right_after_each_drift_and_nowhere_else(
    n_classes: int, seed: int
) -> None:
    """T_N = 200 consecutive exceedances are needed, the first at the drift's sample at the earliest, so a
    recompute cannot come before the 200th label of the new concept (index drift + 199); the stacked
    (d+1)·C test crosses its threshold within a few dozen labels of a drift that moves every region to
    another class (0–70 on these streams), so by drift + 300 it must have come: one per drift."""
    recomputes = run_monitor(DruidMonitor(alpha=0.999, t_n=200), n_classes, seed)
    drifts = (3000, 6000, 9000, 12000)
    assert len(recomputes) == len(drifts)
    for at, drift in zip(recomputes, drifts, strict=True):
        assert drift + 199 <= at < drift + 300


def test_the_paper_monitor_fits_chi_with_d_times_c_degrees_of_freedom() -> None:
    s = sine_mc(n_classes=4, n_concepts=2, concept_length=2000, seed=4)
    model = train_linear(s.X[:200], s.y[:200], "logistic", 10.0, n_classes=4)
    window = CountWindow(200, 2)
    window.push_many(s.X[:200], s.y[:200])
    monitor = DruidPaperMonitor(alpha=0.99, n_fit=100, t_n=50)
    monitor.reset(model, s.X[:200], s.y[:200])
    for i in range(200, 300):
        monitor.update(s.X[i], float(s.y[i]), 0.0, window, window.push(s.X[i], float(s.y[i])))
    assert monitor.delta_g.vec.shape == (3 * 4,)
    df = 2 * 4  # d attributes per column, C columns
    assert monitor.threshold == chi_scale_mle(monitor._collected[:99], df) * chi_ppf(0.99, df)


def test_predsign_applies_the_argmax_rule_to_the_column_bounds() -> None:
    """Right after a recompute (r ≈ 0) the argmax of β₂ is certain for every sample; 100 labels of a new
    concept later (every region changed class) it is uncertain for nearly all, and the count is the rule
    of :func:`argmax_certain` applied to Lemma 1's column bounds."""
    s = sine_mc(n_classes=3, n_concepts=2, concept_length=3000, seed=5)
    model = train_linear(s.X[2800:3000], s.y[2800:3000], "logistic", 10.0, n_classes=3)
    window = CountWindow(200, 2)
    window.push_many(s.X[2800:3000], s.y[2800:3000])
    monitor = PredSignMonitor(t_d=150)
    monitor.reset(model, s.X[2800:3000], s.y[2800:3000])
    for x in s.X[:100]:
        monitor.update_unlabeled(x)
    assert monitor.n_disagree == 0 and not monitor.warning_detected
    for i in range(3000, 3100):
        monitor.update(s.X[i], float(s.y[i]), 0.0, window, window.push(s.X[i], float(s.y[i])))
    Xq = s.X[3100:3300]
    lower, upper = prediction_bounds(model.augment(Xq), model.beta, monitor.delta_g.radius())
    want = int(np.count_nonzero(~argmax_certain(lower, upper)))
    for x in Xq:
        monitor.update_unlabeled(x)
    assert monitor.n_disagree == want > 0.8 * len(Xq)
    assert monitor.drift_detected and monitor.n_detections > 0
    batch, own = PredSignMonitor(t_d=150), CountWindow(200, 2)
    own.push_many(s.X[2800:3000], s.y[2800:3000])
    batch.reset(model, s.X[2800:3000], s.y[2800:3000])
    batch.update_many(
        s.X[3000:3100], s.y[3000:3100], np.zeros(100), own, own.push_many(s.X[3000:3100], s.y[3000:3100])
    )
    np.testing.assert_allclose(batch.delta_g.vec, monitor.delta_g.vec, atol=1e-9)
    batch.update_unlabeled_many(Xq)
    assert batch.n_disagree == want


# --- strategies -----------------------------------------------------------------------------------------


def context(n_classes: int = 3) -> Context:
    s = sine_mc(n_classes=n_classes, n_concepts=2, concept_length=2000, seed=6)
    X0, y0 = s.X[:1000:10], s.y[:1000:10]
    trainer = LinearTrainer("logistic", 10.0, n_classes=n_classes)
    return Context(2, "classification", "logistic", 100, 10.0, trainer, X0, y0, n_classes=n_classes)


def test_strategies_say_whether_they_run_with_c_classes() -> None:
    binary_only = {"druid-tune", "periodic-tune"}
    assert {name for name, s in STRATEGIES.items() if not s.multiclass} == binary_only
    for name in sorted(binary_only):
        with pytest.raises(ValueError, match=f"strategy '{name}' runs on binary .* not on 3 classes"):
            STRATEGIES[name].build(context())


def test_the_learners_of_a_multiclass_context_are_one_vs_rest_and_tuned_on_its_first_window() -> None:
    ctx = context(4)
    newton = make_learner("newton", ctx)
    assert isinstance(newton, OneVsRest) and newton.n_classes == 4
    assert isinstance(newton.learner, ForgettingNewton) and "forgetting" in ctx.learner_params["newton"]
    assert set(first_window_params("rmsprop", ctx)) == {"scale_alpha", "lr"}
    loop = STRATEGIES["newton-tuned"].build(ctx)
    assert isinstance(loop.learner, OneVsRest)


def test_druid_strategy_on_sine_mc_with_every_tenth_label() -> None:
    """The DRUiD protocol (10 % labels, window of 100 labels) on Sine-MC, C = 3: one recompute per drift,
    and more accurate than the batch model that is never updated."""
    s = sine_mc(n_classes=3, n_concepts=3, concept_length=10000, seed=8)
    accuracy = {}
    for name in ("druid", "never"):
        ctx = context()
        ctx.X0, ctx.y0 = s.X[:1000:10], s.y[:1000:10]
        loop = STRATEGIES[name].build(ctx)
        loop.start(ctx.initial_model(), ctx.X0, ctx.y0, warm_learner=True)
        hits = sum(
            loop.process_one(s.X[i], float(s.y[i]) if i % 10 == 0 else None) == s.y[i]
            for i in range(1000, len(s))
        )
        accuracy[name] = hits / (len(s) - 1000)
        if name == "druid":
            at = [1000 + e.sample - 1 for e in loop.events]
            assert len(at) == 2 and 10000 < at[0] < 13000 and 20000 < at[1] < 23000
    assert accuracy["druid"] > accuracy["never"] + 0.2


def test_druids_step_statistics_are_dimension_generic() -> None:
    """The per-sample Δg of C columns runs in numpy; the whitened statistic and the batch steps take any
    width, so their compiled versions agree with numpy on the (d+1)·C stacked vector."""
    s = sine_mc(n_classes=4, n_concepts=2, concept_length=1000, seed=1)
    model = train_linear(s.X[:200], s.y[:200], "logistic", 10.0, n_classes=4)
    window = CountWindow(200, 2)
    window.push_many(s.X[:200], s.y[:200])
    monitor = DruidMonitor(alpha=0.9, t_n=50)
    monitor.reset(model, s.X[:200], s.y[:200])
    dg = monitor.delta_g
    for i in range(200, 900, 25):
        before, start = dg.robust.copy(), (dg.n_added, dg.n_evicted, dg.n_orig)
        n_evicted = window.push_many(s.X[i : i + 25], s.y[i : i + 25])
        R_add = dg.add_many(s.X[i : i + 25], s.y[i : i + 25])
        R_ev = dg.remove_many(window.evicted_X[:n_evicted], window.evicted_y[:n_evicted])
        reference = monitor._steps(before, R_add, R_ev, start)
        compiled = monitor._steps_compiled(before, R_add, R_ev, start) or reference
        assert compiled[:2] == reference[:2] and compiled[3:] == reference[3:]
        assert compiled[2] == pytest.approx(reference[2], rel=1e-9)
        u = monitor._W @ dg.robust
        assert monitor._whitened_sq(dg.robust) == pytest.approx(float(u @ u), rel=1e-9)
    assert monitor._W.shape[1] == 3 * 4 and monitor.df <= 12

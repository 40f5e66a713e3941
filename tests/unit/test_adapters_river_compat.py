"""EdgeDrift learners as river estimators: river's own progressive validation runs them (it refused a bare
learner with ValueError) and they score like river's linear models on river's data sets."""

from __future__ import annotations

import pytest
from river import datasets, dummy, evaluate, metrics, stats

from edgedrift.adapters.river_compat import EdgeDriftClassifier, EdgeDriftRegressor
from edgedrift.learners import SGD, ForgettingNewton


def test_a_bare_learner_is_not_a_river_model_but_the_wrapper_is() -> None:
    with pytest.raises(ValueError, match="not compatible"):
        evaluate.progressive_val_score(datasets.Phishing(), ForgettingNewton(9), metrics.Accuracy())
    score = evaluate.progressive_val_score(datasets.Phishing(), EdgeDriftClassifier(), metrics.Accuracy())
    prior = dummy.PriorClassifier()
    majority = evaluate.progressive_val_score(datasets.Phishing(), prior, metrics.Accuracy())
    assert majority.get() < 0.56
    assert score.get() > 0.85, score


def test_binary_labels_of_any_type_and_probabilities() -> None:
    model = EdgeDriftClassifier(ForgettingNewton(1, forgetting=0.99))
    evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy())
    x, _ = next(iter(datasets.Phishing()))
    proba = model.predict_proba_one(x)
    assert set(proba) == {True, False} and abs(sum(proba.values()) - 1.0) < 1e-12
    assert model.predict_one(x) == max(proba, key=proba.__getitem__)
    log_loss = evaluate.progressive_val_score(datasets.Phishing(), model.clone(), metrics.LogLoss())
    assert log_loss.get() < 0.35, log_loss  # the majority class's is 0.69


def test_multi_class_with_named_classes_runs_one_vs_rest() -> None:
    names = sorted({y for _, y in datasets.ImageSegments()})
    model = EdgeDriftClassifier(ForgettingNewton(1, forgetting=0.99), classes=names)
    score = evaluate.progressive_val_score(datasets.ImageSegments(), model, metrics.Accuracy())
    assert score.get() > 0.8, score  # 7 classes; river's scaled one-vs-rest logistic regression: 0.796
    assert set(model.predict_proba_one(next(iter(datasets.ImageSegments()))[0])) == set(names)


def test_a_third_class_without_names_is_refused_clearly() -> None:
    model = EdgeDriftClassifier()
    model.learn_one({"a": 1.0}, "x")
    model.learn_one({"a": 2.0}, "y")
    with pytest.raises(ValueError, match=r"label 'z' is not one of the classes.*classes=\["):
        model.learn_one({"a": 3.0}, "z")


def test_clone_is_untrained_and_the_template_never_learns() -> None:
    template = SGD(1, lr=0.5)
    model = EdgeDriftClassifier(template)
    for x, y in [({"a": 1.0, "b": 0.0}, 1), ({"a": -1.0, "b": 0.0}, 0)] * 10:
        model.learn_one(x, y)
    assert template.n_learned == 0 and template.n_features == 1
    assert model.predict_one({"a": 3.0}) == 1 and model.predict_one({"b": 1.0, "a": -3.0}) == 0
    assert model.clone().predict_proba_one({"a": 3.0}) == {}


def test_the_regressor_beats_the_running_mean() -> None:
    model = EdgeDriftRegressor(ForgettingNewton(1, loss="squared", forgetting=0.99))
    mae = evaluate.progressive_val_score(datasets.TrumpApproval(), model, metrics.MAE())
    mean = evaluate.progressive_val_score(
        datasets.TrumpApproval(), dummy.StatisticRegressor(stats.Mean()), metrics.MAE()
    )
    assert mae.get() < 0.75 * mean.get(), (mae, mean)


def test_bad_input_is_named() -> None:
    with pytest.raises(TypeError, match="classification learner"):
        EdgeDriftClassifier(ForgettingNewton(1, loss="squared"))
    with pytest.raises(TypeError, match="regression learner"):
        EdgeDriftRegressor(ForgettingNewton(1))
    with pytest.raises(ValueError, match="distinct"):
        EdgeDriftClassifier(classes=["a", "a"])
    model = EdgeDriftClassifier()
    with pytest.raises(ValueError, match="feature 'colour' is 'red'"):
        model.learn_one({"size": 1.0, "colour": "red"}, True)

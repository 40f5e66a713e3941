"""Multi-class metrics: scikit-learn's figures for C classes, the binary formulas at C = 2, and the
windowed and reference-classifier versions."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score, cohen_kappa_score, f1_score, matthews_corrcoef

from edgedrift.labels import ClassLabels
from edgedrift.metrics import (
    MulticlassConfusion,
    classification_report,
    majority_predictions,
    no_change_predictions,
    windowed_kappa,
)


@pytest.mark.parametrize("n_classes", [3, 5, 10])
def test_report_matches_sklearn(n_classes: int) -> None:
    rng = np.random.default_rng(n_classes)
    t = rng.integers(0, n_classes, 500)
    p = np.where(rng.random(500) < 0.6, t, rng.integers(0, n_classes, 500))
    r = classification_report(t.astype(float), p.astype(float), n_classes=n_classes)
    assert r["accuracy"] == pytest.approx(np.mean(t == p))
    assert r["kappa"] == pytest.approx(cohen_kappa_score(t, p))
    assert r["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(t, p))
    assert r["macro_f1"] == pytest.approx(f1_score(t, p, average="macro"))
    assert r["mcc"] == pytest.approx(matthews_corrcoef(t, p))
    assert r["n"] == 500


def test_two_classes_as_codes_agree_with_the_binary_formulas() -> None:
    """The C×C formulas at C = 2 are the binary ones (macro-F1 averages both classes' F1)."""
    rng = np.random.default_rng(1)
    t = rng.choice([-1.0, 1.0], 300)
    p = np.where(rng.random(300) < 0.7, t, -t)
    binary = classification_report(t, p)
    cm = MulticlassConfusion(2)
    cm.update_many((t > 0).astype(float), (p > 0).astype(float))
    codes = cm.report()
    for key in ("accuracy", "kappa", "kappa_m", "balanced_accuracy", "mcc", "macro_f1"):
        assert codes[key] == pytest.approx(binary[key]), key


def test_incremental_matrix_reverts_and_refuses_non_codes() -> None:
    cm = MulticlassConfusion(3)
    cm.update(2.0, 1.0)
    cm.update(0.0, 0.0)
    cm.revert(2.0, 1.0)
    assert cm.n == 1 and cm.accuracy == 1.0
    with pytest.raises(ValueError, match="no sample of class 2 predicted as 1"):
        cm.revert(2.0, 1.0)
    with pytest.raises(ValueError, match=r"codes 0\.\.2"):
        cm.update(3.0, 0.0)
    with pytest.raises(ValueError, match=r"codes 0\.\.2"):
        cm.update(0.5, 0.0)


def test_windowed_kappa_multiclass_equals_the_window_report() -> None:
    rng = np.random.default_rng(2)
    t = rng.integers(0, 4, 200).astype(float)
    p = np.where(rng.random(200) < 0.5, t, rng.integers(0, 4, 200)).astype(float)
    k = windowed_kappa(t, p, 50, n_classes=4)
    for i in (10, 49, 120, 199):
        lo = max(0, i - 49)
        report = classification_report(t[lo : i + 1], p[lo : i + 1], n_classes=4)
        assert k[i] == pytest.approx(report["kappa"])


def test_reference_classifiers_multiclass() -> None:
    y = np.array([2.0, 0.0, 0.0, 1.0, 2.0, 2.0, np.nan])
    mask = ~np.isnan(y)
    np.testing.assert_array_equal(no_change_predictions(y, mask, n_classes=3), [0, 2, 0, 0, 1, 2, 2])
    np.testing.assert_array_equal(majority_predictions(y, mask, n_classes=3), [0, 2, 0, 0, 0, 0, 2])


def test_class_labels_round_trip_and_errors() -> None:
    labels = ClassLabels(("oak", "ash", 3))
    assert labels.encode(["ash", "3", 3.0]).tolist() == [1.0, 2.0, 2.0]
    assert labels.decode([0.0, 2.0]) == ["oak", 3]
    with pytest.raises(ValueError, match="unknown class 'pine'"):
        labels.encode_one("pine")
    with pytest.raises(ValueError, match="distinct"):
        ClassLabels((1, "1.0"))
    with pytest.raises(ValueError, match="at least 2 classes"):
        ClassLabels(("only",))
    with pytest.raises(ValueError, match="string or a number"):
        ClassLabels((True, False))

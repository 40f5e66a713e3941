"""The edge's footprint: χ²/χ quantiles without scipy (exact against scipy.stats), an edge import path
that loads no scipy, Online-BLS's extra, and the label-delay buffer sizing."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.stats

from edgedrift.monitors.quantiles import chi2_ppf, chi_ppf, gamma_p, gamma_q
from edgedrift.window import delay_buffer_size

DFS = [1, 2, 3, 4, 5, 6, 10, 20, 53, 54, 55, 100, 1000]
ALPHAS = [1e-6, 0.01, 0.1, 0.5, 0.9, 0.95, 0.99, 0.999, 0.9999, 0.99999, 1 - 1e-8]


@pytest.mark.parametrize("df", DFS)
def test_chi2_and_chi_quantiles_match_scipy_stats_to_1e_13(df: int) -> None:
    for alpha in ALPHAS:
        want = scipy.stats.chi2.ppf(alpha, df)
        assert chi2_ppf(alpha, df) == pytest.approx(want, rel=1e-13, abs=0.0), (alpha, df)
        assert chi_ppf(alpha, df) == pytest.approx(scipy.stats.chi.ppf(alpha, df), rel=1e-13), (alpha, df)


def test_incomplete_gamma_matches_scipy_special_on_both_branches() -> None:
    import scipy.special

    for a in (0.5, 1.0, 2.5, 27.5):
        for x in (1e-3, 0.5, a, a + 1.0, 3 * a + 10.0):
            assert gamma_p(a, x) == pytest.approx(scipy.special.gammainc(a, x), rel=1e-13, abs=1e-300)
            assert gamma_q(a, x) == pytest.approx(scipy.special.gammaincc(a, x), rel=1e-12, abs=1e-300)
    assert gamma_p(2.0, 0.0) == 0.0 and gamma_q(2.0, -1.0) == 1.0


@pytest.mark.parametrize("alpha, df", [(0.0, 3), (1.0, 3), (0.5, 0), (math.nan, 3)])
def test_chi2_quantile_rejects_values_outside_its_domain(alpha: float, df: int) -> None:
    with pytest.raises(ValueError):
        chi2_ppf(alpha, df)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_edge_import_path_and_a_druid_loop_load_no_scipy() -> None:
    done = _run(
        """
        import sys
        import numpy as np
        import edgedrift_edge.agent
        from edgedrift.models.linear import LinearModel
        from edgedrift.models.losses import get_loss
        from edgedrift.strategies import STRATEGIES, Context
        rng = np.random.default_rng(0)
        X = rng.normal(size=(200, 3)); y = np.sign(X[:, 0] + 0.1)
        model = LinearModel(get_loss("logistic"), np.array([1.0, 0.0, 0.0, 0.1]), 1.0)
        ctx = Context(3, "classification", "logistic", 200, 1.0, lambda *a, **k: model, X, y)
        loop = STRATEGIES["druid"].build(ctx, 0.999)
        loop.start(model, X, y, warm_learner=True)
        for i in range(500):
            loop.process_one(X[i % 200], float(y[i % 200]) if i % 2 else None)
        assert loop.monitor.threshold < float("inf")
        print(sorted(m for m in sys.modules if m.split(".")[0] == "scipy"), "paho.mqtt.client" in sys.modules)
        """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[] True", "the agent loads no scipy; paho-mqtt is its one MQTT library"


def test_online_bls_without_scipy_says_which_extra_to_install() -> None:
    done = _run(
        """
        import sys
        sys.modules["scipy"] = None  # as if scipy were not installed
        from edgedrift.learners import OnlineBLS
        OnlineBLS(2)
        """
    )
    assert done.returncode != 0
    assert "pip install 'edgedrift-core[bls]'" in done.stderr


def test_delay_buffer_size_covers_the_longest_label_delay_with_headroom() -> None:
    assert delay_buffer_size(rate_per_s=10.0, max_delay_s=60.0) == 900
    assert delay_buffer_size(rate_per_s=10.0, max_delay_s=60.0, headroom=1.0) == 600
    assert delay_buffer_size(rate_per_s=0.01, max_delay_s=1.0) == 64
    assert delay_buffer_size(rate_per_s=1e6, max_delay_s=1e6) == 1_000_000
    with pytest.raises(ValueError, match="rate_per_s"):
        delay_buffer_size(rate_per_s=-1.0, max_delay_s=1.0)
    assert np.isfinite(delay_buffer_size(rate_per_s=5.0, max_delay_s=0.0))

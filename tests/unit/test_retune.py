"""Re-tuning recomputes (druid-tune, periodic-tune), the strong edge-only baseline, the explicit scoring
sets, the compute axis and the Friedman/Nemenyi comparison (issue 15)."""

from __future__ import annotations

import copy
import itertools
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support.evaluate import evaluate_results

from edgedrift.data import Stream, sine1plus
from edgedrift.learners import ForgettingNewton
from edgedrift.models.linear import LinearModel
from edgedrift.strategies import STRATEGIES
from edgedrift.strategies.channel import EdgeTune, TuneChannel
from edgedrift.strategies.retuned import (
    EDGE_DEFAULTS,
    EDGE_GRIDS,
    RetunedLearner,
    edge_learner,
    first_window_params,
    grid_points,
    grid_scores,
    tune_all,
)
from edgedrift.strategies.tuning import (
    block_means,
    clearly_better,
    evidence_choice,
    held_out_gains,
    prequential_score,
    tune_learner,
    warmup_labels,
)
from edgedrift.training.linear import LinearTrainer
from edgedrift.training.retune import HistoryRetuner, LabelHistory, choose_window
from edgedrift.window import CountWindow
from edgedrift_eval.compare import compare_dirs
from edgedrift_eval.protocol import Protocol
from edgedrift_eval.runner import RunSpec, build_runner, run_one
from edgedrift_eval.scoring import lag_since_label, scoring_metrics
from edgedrift_eval.strategies import make_context

REPO = Path(__file__).resolve().parents[2]
EDGEDRIFT = REPO / ".venv" / "bin" / "edgedrift"
#: The row fields the issue's acceptance names.
ACCEPTANCE_FIELDS = {
    "strategy",
    "params",
    "recomputes",
    "accuracy",
    "accuracy_labeled",
    "edge_us_per_sample",
    "edge_state_bytes",
    "cloud_cpu_s_per_recompute",
}


@pytest.fixture(scope="module")
def stream() -> Stream:
    return sine1plus(concept_length=3000, n_concepts=3)


def test_history_is_bounded_and_chunked() -> None:
    h = LabelHistory(3, capacity=1000)
    for k in range(30):
        h.extend(np.full((100, 3), float(k)), np.full(100, float(k)))
    X, y = h.arrays()
    assert len(h) == 1000 and X.shape == (1000, 3)
    assert y[0] == 20.0 and y[-1] == 29.0  # the oldest are dropped first
    assert h.nbytes == 1000 * 4 * 8
    with pytest.raises(ValueError, match="shape"):
        h.extend(np.zeros((2, 4)), np.zeros(2))


def test_choose_window_prefers_the_data_since_a_change() -> None:
    """The concept flipped 700 labels ago: a 500-label window beats one reaching back before the flip."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6000, 2))
    y = np.sign(X[:, 0] + 0.3 * X[:, 1])
    y[-700:] *= -1
    length, scores = choose_window(X, y, LinearTrainer("logistic", 10.0), (200, 500, 5000), "classification")
    assert length in (200, 500)
    assert scores[5000] < scores[length] - 0.2


def test_retuner_sees_only_labels_the_edge_learned_and_ships_a_grid_point(stream: Stream) -> None:
    protocol = Protocol()
    labeled = protocol.labeled_mask(len(stream), 0)
    W = protocol.window
    X0, y0 = stream.X[:W][labeled[:W]], stream.y[:W][labeled[:W]]
    ctx = make_context(X0, y0, "classification", protocol.window_labels)
    loop = STRATEGIES["periodic-tune"].build(ctx, 200.0)
    loop.start(ctx.initial_model(), X0, y0, warm_learner=True)
    assert isinstance(loop.learner, RetunedLearner)
    retuner = loop.recompute_fn
    assert isinstance(retuner, HistoryRetuner)
    seen: list[int] = []
    for i in range(W, len(stream)):
        before = loop.counters.recomputes
        loop.process_one(stream.X[i], float(stream.y[i]) if labeled[i] else None)
        if loop.counters.recomputes > before:
            # The cloud's history is exactly the labels learned so far (first window included).
            seen.append(len(retuner.history))
            assert len(retuner.history) == int(labeled[: i + 1].sum())
    assert len(seen) == loop.counters.recomputes >= 3
    # The edge rebuilds its learner only when a recompute changes its parameters.
    shipped = [dict(ctx.learner_params["newton+all"]), *(t.params for t in retuner.tunes)]
    assert loop.learner.retunes == sum(a != b for a, b in itertools.pairwise(shipped))
    assert loop.learner.params == shipped[-1] == retuner.channel.current
    assert all(t.params in grid_points("newton") for t in retuner.tunes)
    assert len(retuner.cpu_s) == len(seen) and min(retuner.cpu_s) > 0.0


def test_tuned_strategies_start_from_the_first_window_only(stream: Stream) -> None:
    """The strong baseline and druid-tune start with the same parameters, tuned on the first window
    (the defaults unless the held-out blocks show a clear gain)."""
    protocol = Protocol()
    labeled = protocol.labeled_mask(len(stream), 0)
    W = protocol.window
    X0, y0 = stream.X[:W][labeled[:W]], stream.y[:W][labeled[:W]]
    scored = grid_scores("newton", 2, "logistic", "classification", X0, y0)
    here = grid_points("newton").index(EDGE_DEFAULTS["newton"])
    expected = scored[evidence_choice([s for _, s in scored], here)][0]
    for name in ("newton-tuned", "druid-tune"):
        _, info, _ = build_runner(stream, protocol, RunSpec(name, None, 0), labeled)
        assert info.learner_params == {"newton+all": expected}
    assert set(expected) == set(EDGE_GRIDS["newton"])


def test_druid_tune_rows_carry_the_compute_axis(stream: Stream) -> None:
    tune = run_one(stream, Protocol(), RunSpec("druid-tune", None, 0))
    base = run_one(stream, Protocol(), RunSpec("newton-tuned", None, 0))
    assert tune.recomputes >= 1 and base.recomputes == 0
    assert tune.cloud_cpu_s_per_recompute > 0.0 and base.cloud_cpu_s_per_recompute == 0.0
    # Newton's state is O(d^2): (d+1)^2 floats at least.
    assert tune.edge_state_bytes >= 9 * 8 and tune.update_order == "O(d^2)"
    # A re-tuning strategy forwards every label it learns (the first window too): 12 bytes a label here.
    assert tune.bytes_up >= 12 * (tune.n_labeled + 200)
    assert 0.5 < tune.metrics["accuracy_labeled"] <= 1.0
    assert {f"accuracy_lag{k}" for k in range(1, 11)} <= set(tune.metrics)


def test_edge_tune_document_round_trip_and_the_channel_counts_bytes() -> None:
    ch = TuneChannel(2)
    ch.post(EdgeTune({"lr": 0.1, "scale_alpha": 0.3}, 0.91, 500, anchor=False))
    assert ch.bytes_posted > 0
    tune = ch.take()
    assert tune is not None and ch.take() is None
    assert EdgeTune.from_document(json.loads(json.dumps(tune.as_document()))) == tune
    ch.record_many(np.ones((3, 2)), np.ones(3))
    ch.drain()
    assert ch.bytes_forwarded == 64 + 4 * 3 * 3
    with pytest.raises(ValueError, match="params"):
        EdgeTune.from_document({"params": [1]})


def test_scoring_sets() -> None:
    labeled = np.zeros(40, dtype=bool)
    labeled[::10] = True
    lags = lag_since_label(labeled)
    assert lags[:12].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1]
    y = np.ones(40)
    preds = np.where(lags == 1, 1.0, -1.0)
    m = scoring_metrics(y, preds, labeled, lags)
    assert m["accuracy_lag1"] == 1.0 and m["accuracy_lag5"] == 0.0
    assert m["accuracy_labeled"] == pytest.approx(float(np.mean(preds[labeled] == 1.0)))


def test_the_catalogue_names_the_new_strategies() -> None:
    assert STRATEGIES["druid-tune"].default == 0.999 and STRATEGIES["periodic-tune"].param == "period"
    assert STRATEGIES["newton-tuned"].param is None and STRATEGIES["rmsprop-tuned"].edgedrift


def _fake_results(root: Path, shift: float, k: int) -> Path:
    d = root / f"stream{k}"
    d.mkdir()
    rows = [
        {"strategy": "druid-tune", "params": {"alpha": 0.999}, "recomputes": 4.0, "accuracy": 0.9 + shift},
        {"strategy": "druid", "params": {"alpha": 0.999}, "recomputes": 5.0, "accuracy": 0.85 + shift},
        {"strategy": "druid", "params": {"alpha": 0.5}, "recomputes": 60.0, "accuracy": 0.99},
        {"strategy": "newton", "params": {}, "recomputes": 0.0, "accuracy": 0.8 + shift},
        {"strategy": "majority", "params": {}, "recomputes": 0.0, "accuracy": 0.5},
    ]
    (d / "results.json").write_text(json.dumps(rows))
    return d


def test_compare_ranks_with_friedman_and_nemenyi(tmp_path: Path) -> None:
    dirs = [_fake_results(tmp_path, 0.01 * k, k) for k in range(6)]
    result = compare_dirs(dirs, budget=10)
    assert result.ranks == {"druid": 2.0, "druid-tune": 1.0, "newton": 3.0}  # α = 0.5 is over budget
    assert result.friedman_p < 0.01
    assert result.nemenyi_p["druid-tune"]["newton"] < 0.05
    with pytest.raises(ValueError, match="Friedman"):
        compare_dirs(dirs[:1], budget=10)


def test_cli_compare_draws_the_cd_diagram(tmp_path: Path) -> None:
    dirs = [str(_fake_results(tmp_path, 0.01 * k, k)) for k in range(4)]
    out = tmp_path / "cmp"
    proc = subprocess.run(
        [str(EDGEDRIFT), "compare", *dirs, "--budget", "10", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / "cd_diagram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "compare.json").read_text())["strategies"] == ["druid", "druid-tune", "newton"]


def test_cli_evaluate_writes_the_acceptance_fields(tmp_path: Path) -> None:
    args = ["--dataset", "sine1+:concept_length=3000,n_concepts=3", "--strategies", "druid-tune,druid,newton"]
    args += ["--grid", "druid-tune=0.999", "--grid", "druid=0.999", "--offsets", "0,1", "--no-progress"]
    out = tmp_path / "out"
    results = evaluate_results([*args, "--jobs", "1"], out)
    for entry in results:
        assert set(entry) >= ACCEPTANCE_FIELDS
    tune = next(e for e in results if e["strategy"] == "druid-tune")
    assert tune["cloud_cpu_s_per_recompute"] > 0 and tune["edge_state_bytes"] > 0
    assert (out / "edge_cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "labeled only" in (out / "summary.md").read_text()


def test_a_regression_retune_ships_a_json_document() -> None:
    """Squared-loss scores are numpy floats: the shipped document must still be plain JSON."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(1500, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=1500)
    channel = TuneChannel(3)
    channel.record_many(X, y)
    retuner = HistoryRetuner(channel, "rmsprop", LinearTrainer("squared", 10.0), "squared", "regression")
    retuner(X[-200:], y[-200:])
    tune = channel.take()
    assert tune is not None and type(tune.anchor) is bool
    assert EdgeTune.from_document(json.loads(json.dumps(tune.as_document()))) == tune
    assert len(retuner.history) == 1500 and channel.pending == 0


def test_the_agent_runs_the_retuning_strategies_now_that_the_cloud_keeps_histories() -> None:
    """Deployed since the cloud keeps labeled histories (tests/integration/test_edge_retune.py)."""
    from edgedrift_edge.settings import AgentSettings

    for name in ("druid-tune", "periodic-tune", "newton-tuned"):
        assert AgentSettings.model_validate({"device_id": "d1", "strategy": name}).strategy == name


def _ew_stream(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """ELEC2's construction, seeded: a random-walk feature (plus a noise one) labeled "above its EW mean at
    rate 0.3", so only the fast scaler (scale_alpha = 0.3) makes the label linear."""
    rng = np.random.default_rng(seed)
    walk = np.cumsum(rng.normal(size=n))
    mean = np.empty(n)
    m = walk[0]
    for i, v in enumerate(walk):
        mean[i] = m
        m += 0.3 * (v - m)
    return np.column_stack([walk, rng.normal(size=n)]), np.where(walk > mean, 1.0, -1.0)


def _context(X: np.ndarray, y: np.ndarray) -> object:
    return make_context(X, y, "classification", len(y))


def test_first_window_tuning_falls_back_to_the_defaults_on_noise() -> None:
    """A stationary stream on which every grid point is as good: 200 labels show no clear gain, so the
    tuned strategies keep the defaults (and the one-parameter tuning its factory default), whatever the
    best grid point's score on the window."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(200, 3))
    y = np.sign(X[:, 0] - X[:, 1] + 1.5 * rng.normal(size=200))
    ctx = _context(X, y)
    scored = grid_scores("newton", 3, "logistic", "classification", X, y)
    means = [float(s.mean()) for _, s in scored]
    assert max(means) > means[grid_points("newton").index(EDGE_DEFAULTS["newton"])]  # a best that is noise
    for name in ("newton", "rmsprop"):
        assert first_window_params(name, ctx) == EDGE_DEFAULTS[name]  # type: ignore[arg-type]
    assert tune_learner("newton", ctx) == {"forgetting": 0.9}  # type: ignore[arg-type]
    assert tune_learner("rmsprop", ctx) == {"lr": 0.3}  # type: ignore[arg-type]


def test_first_window_tuning_tunes_when_the_gain_is_clear() -> None:
    """ELEC2's construction: the fast EW scaler wins on nearly every held-out block, so the tuning takes
    it (and the strong baseline beats the defaults on the rest of the stream)."""
    X, y = _ew_stream(2200, seed=5)
    ctx = _context(X[:200], y[:200])
    for name in ("newton", "rmsprop"):
        assert first_window_params(name, ctx)["scale_alpha"] == 0.3  # type: ignore[arg-type]
    tuned = edge_learner("newton", 2, "logistic", "classification", first_window_params("newton", ctx))  # type: ignore[arg-type]
    default = edge_learner("newton", 2, "logistic", "classification", {})
    assert prequential_score(tuned, X, y) > prequential_score(default, X, y) + 0.1


def test_the_evidence_rule_judges_the_choice_on_held_out_blocks() -> None:
    good, poor = np.ones(200), np.zeros(200)
    # Clear: the best wins every held-out block.
    assert evidence_choice([poor, good], reference=0) == 1
    assert held_out_gains([poor, good], 0).tolist() == [1.0] * 9  # nine blocks after the warm-up
    # A gain in the warm-up block only is no evidence.
    early = np.concatenate([np.ones(20), np.zeros(180)])
    assert evidence_choice([poor, early], reference=0) == 0
    # Six wins and three losses of nine: p = 0.25 by the sign test, so the reference stays.
    wins = np.concatenate([np.zeros(20), *(np.ones(20) if b < 6 else np.zeros(20) for b in range(9))])
    losses = np.concatenate([np.zeros(20), *(np.zeros(20) if b < 6 else np.full(20, 0.5) for b in range(9))])
    assert not clearly_better(held_out_gains([losses, wins], 0))
    assert evidence_choice([losses, wins], reference=0) == 0
    # A first window that is all warm-up (40 classes, 5 labels each) is no evidence, however large the gain.
    assert evidence_choice([poor, good], reference=0, warmup=warmup_labels(40)) == 0
    assert len(held_out_gains([poor, good], 0, warmup=warmup_labels(4))) == 9
    # Fewer than three blocks: the reference.
    assert evidence_choice([np.zeros(30), np.ones(30)], reference=0) == 0
    assert block_means(np.arange(5.0), 2).tolist() == [1.5, 3.5]


def test_a_retune_keeps_the_edges_parameters_unless_the_best_is_clearly_better() -> None:
    """The cloud's re-tuning uses the same rule with the edge's current parameters as the reference."""
    X, y = _ew_stream(2000, seed=7)
    scored = grid_scores("newton", 2, "logistic", "classification", X, y)
    means = [float(s.mean()) for _, s in scored]
    top = int(np.argmax(means))
    assert scored[top][0]["scale_alpha"] == 0.3
    assert tune_all("newton", 2, "logistic", "classification", X, y) == (scored[top][0], means[top])
    slow = grid_points("newton").index(EDGE_DEFAULTS["newton"])
    assert (
        tune_all("newton", 2, "logistic", "classification", X, y, current=scored[slow][0])[0]
        == scored[top][0]
    )
    # On a stationary noisy stream the best is noise: a current point it does not clearly beat stays.
    rng = np.random.default_rng(8)
    X = rng.normal(size=(2000, 2))
    y = np.sign(X[:, 0] + 2.0 * rng.normal(size=2000))
    scored = grid_scores("newton", 2, "logistic", "classification", X, y)
    means = [float(s.mean()) for _, s in scored]
    top = int(np.argmax(means))
    close = next(
        i
        for i in range(len(scored))
        if i != top and not clearly_better(held_out_gains([s for _, s in scored], i))
    )
    assert means[close] < means[top]
    kept = tune_all("newton", 2, "logistic", "classification", X, y, current=scored[close][0])
    assert kept == (scored[close][0], means[close])
    eager = tune_all("newton", 2, "logistic", "classification", X, y, current=scored[close][0], level=1.0)
    assert eager[0] == scored[top][0]


def test_the_edge_keeps_its_learner_when_the_parameters_do_not_change() -> None:
    """Same parameters: the learner keeps its state and anchors (as druid); new ones: rebuilt on the window,
    anchored only if the cloud says so."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 2))
    y = np.sign(X[:, 0])
    ctx = make_context(X[:200], y[:200], "classification", 200)
    channel = TuneChannel(2)
    window = CountWindow(200, 2)
    window.push_many(X[:200], y[:200])
    start = dict(EDGE_DEFAULTS["newton"])
    edge = RetunedLearner("newton", ctx, start, channel, window)
    assert channel.current == start
    for xi, yi in zip(X[200:], y[200:], strict=True):
        edge.learn_one(xi, float(yi))
    model = ctx.initial_model()
    inner = edge.inner
    assert isinstance(inner, ForgettingNewton) and isinstance(model, LinearModel)
    expected = copy.deepcopy(inner)
    expected.anchor(model)
    channel.post(EdgeTune(dict(start), 0.9, 200, anchor=False))
    edge.anchor(model)
    assert edge.inner is inner and edge.retunes == 0
    assert np.array_equal(inner.w, expected.w)  # anchored despite anchor=False
    fresh = edge_learner("newton", 2, "logistic", "classification", start)
    assert isinstance(fresh, ForgettingNewton) and not np.array_equal(fresh.w, expected.w)
    changed = {**start, "forgetting": 0.98}
    channel.post(EdgeTune(changed, 0.9, 200, anchor=False))
    edge.anchor(model)
    assert edge.inner is not inner and edge.retunes == 1 and channel.current == changed == edge.params

"""The strategy catalogue: built-in names, edgedrift-core's own river entries, and a third-party package's
strategies registered under the entry-point group ``edgedrift.strategies``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from support.plugin import example_plugin

from edgedrift.adapters.entry_points import StrategyCatalogue, get_strategy, strategy_catalogue
from edgedrift.strategies import STRATEGIES, Context
from edgedrift.training.linear import LinearTrainer
from edgedrift_eval.strategies import expand


def test_built_in_names_resolve_without_loading_any_plugin() -> None:
    catalogue = StrategyCatalogue(STRATEGIES)
    assert catalogue["druid"] is STRATEGIES["druid"]
    assert catalogue._points is None, "a built-in name must not scan the installed distributions"


def test_core_registers_the_river_strategies_through_the_entry_points() -> None:
    names = list(strategy_catalogue())
    assert names[: len(STRATEGIES)] == list(STRATEGIES)
    for name in ("river-logreg", "river-hoeffding", "river-page-hinkley", "river-kswin"):
        assert name in names
        assert get_strategy(name).name == name
    assert not any(name.startswith("river-") for name in STRATEGIES), (
        "river strategies come from entry points"
    )


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown strategy 'nope'; known: .*druid.*river-kswin"):
        get_strategy("nope")


def test_a_third_party_strategy_is_found_by_name_and_builds(tmp_path: Path) -> None:
    with example_plugin(tmp_path / "site"):
        strategy = get_strategy("example-every-k")
        assert strategy.param == "k" and strategy.default == 150
        assert "example-every-k" in expand(["example-every-k"]), "the evaluator accepts it by name"
        rng = np.random.default_rng(0)
        X = rng.normal(size=(700, 2))
        y = np.sign(X[:, 0])
        ctx = Context(
            2, "classification", "logistic", 100, 1.0, LinearTrainer("logistic", 1.0), X[:100], y[:100]
        )
        loop = strategy.build(ctx, 50)
        loop.start(ctx.initial_model(), X[:100], y[:100])
        for i in range(100, 700):
            loop.process_one(X[i], y[i])
        assert loop.counters.recomputes == 600 // 50
        # The broken entry point is reported by name, and does not hide the good one.
        assert "example-bad" not in strategy_catalogue()
        assert "names a int" in strategy_catalogue().errors["example-bad"]
        with pytest.raises(
            KeyError, match=r"'example-bad' is registered but failed to load: .*not an edgedrift"
        ):
            get_strategy("example-bad")
    assert "example-every-k" not in strategy_catalogue(), "uninstalled: forgotten"
    assert "example-bad" not in strategy_catalogue().errors


def test_a_plugin_cannot_take_over_a_built_in_name(tmp_path: Path) -> None:
    dist = tmp_path / "evil-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: evil\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[edgedrift.strategies]\ndruid = os:getcwd\n")
    catalogue = StrategyCatalogue(STRATEGIES)
    sys.path.insert(0, str(tmp_path))
    try:
        catalogue.refresh()
        assert catalogue["druid"] is STRATEGIES["druid"]
        assert "replace a built-in" in catalogue.errors["druid"]
    finally:
        sys.path.remove(str(tmp_path))


def test_a_callable_entry_point_returning_a_strategy_is_renamed_to_its_entry_name() -> None:
    from edgedrift.adapters.entry_points import _as_strategy

    renamed = _as_strategy("my-druid", lambda: STRATEGIES["druid"])
    assert renamed.name == "my-druid" and renamed.builder is STRATEGIES["druid"].builder
    with pytest.raises(TypeError, match=r"not an edgedrift\.strategies\.Strategy"):
        _as_strategy("x", "druid")


def test_without_river_the_river_strategies_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """The edge image has no river: asking for a river strategy there names the missing module."""
    monkeypatch.setitem(sys.modules, "river", None)  # `import river` now raises ImportError
    monkeypatch.delitem(sys.modules, "edgedrift.adapters.river_strategies", raising=False)
    catalogue = StrategyCatalogue(STRATEGIES)
    assert catalogue["druid"] is STRATEGIES["druid"]
    with pytest.raises(KeyError, match=r"'river-logreg' is registered but failed to load: .*river"):
        catalogue["river-logreg"]
    assert "river-kswin" not in catalogue

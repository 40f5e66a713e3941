"""The shared library's docstring examples run (``--doctest-modules`` over ``shared/edgedrift``, here as
one test per module) and every public estimator, monitor and strategy has one."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil

import pytest

import edgedrift
import edgedrift.learners
import edgedrift.monitors
import edgedrift.strategies.catalogue
from edgedrift.strategies import STRATEGIES

MODULES = [
    "edgedrift",
    *sorted(info.name for info in pkgutil.walk_packages(edgedrift.__path__, "edgedrift.")),
]
#: Bases and helpers that are not estimators a user builds (protocols, abstract monitors, Δg).
NOT_ESTIMATORS = {"IncrementalLearner", "OnlineLearner", "Monitor", "BoundMonitor", "DeltaG", "chi_scale_mle"}
ESTIMATORS = [
    (module.__name__, name)
    for module in (edgedrift.learners, edgedrift.monitors)
    for name in module.__all__
    if name not in NOT_ESTIMATORS
]


@pytest.mark.parametrize("module_name", MODULES)
def test_the_docstring_examples_of_each_module_pass(module_name: str) -> None:
    module = importlib.import_module(module_name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in doctest.DocTestFinder().find(module, module_name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {module_name} failed"


def test_the_examples_are_found() -> None:
    attempted = 0
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        attempted += sum(len(t.examples) for t in doctest.DocTestFinder().find(module, module_name))
    assert attempted >= 100


@pytest.mark.parametrize(("module_name", "name"), ESTIMATORS)
def test_every_public_estimator_and_monitor_documents_parameters_and_an_example(
    module_name: str, name: str
) -> None:
    cls = getattr(importlib.import_module(module_name), name)
    doc = inspect.getdoc(cls) or ""
    assert "Examples\n--------" in doc and ">>>" in doc, f"{name} has no Examples section"
    takes = [p for p in inspect.signature(cls).parameters if p != "self"]
    if takes:
        assert "Parameters\n----------" in doc, f"{name} takes {takes} but documents no Parameters"
        for param in takes:
            assert f"\n{param}" in doc or f", {param}" in doc, (
                f"{name}: parameter {param!r} is not documented"
            )


def test_the_catalogue_example_runs_every_strategy() -> None:
    (test,) = [
        t
        for t in doctest.DocTestFinder().find(edgedrift.strategies.catalogue)
        if t.name.endswith("catalogue")
    ]
    shown = {
        line.split()[0] for example in test.examples for line in example.want.splitlines() if line.strip()
    }
    assert set(STRATEGIES) <= shown

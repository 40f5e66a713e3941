"""CI's numpy pass from the kernels-on pass: which test modules to run again with the kernels off.

As a pytest plugin (``tests/conftest.py`` registers it), active when ``EDGEDRIFT_KERNEL_TRACE=<folder>`` is
set: before each test it names the test's module (its file's node id) for the processes that follow
(:func:`edgedrift.kernel_trace.publish`), so the module's fixtures, the processes they start and the test
itself record their kernel uses under it (``<folder>/touches.tsv``), as does the module's import while it is
collected; a session-wide fixture sets up under ``<session fixture NAME>``, and the rest of collection under
no module. After collection it writes ``<folder>/collected.tsv``: each module, its number of tests and
whether it is in the quick tier.

As a program, ``python -m support.kernel_trace FOLDER`` (``scripts/test.sh``, with ``PYTHONPATH=tests``)
prints the modules outside the quick tier to run again, one a line, or ``all`` when a kernel was used
outside one test module's processes (a session-wide fixture, a conftest): the numpy pass is then the whole
selection again. Why goes to stderr.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from collections import defaultdict
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import pytest

from edgedrift.kernel_trace import MODULE_VAR, TRACE_VAR, publish, touch_lines

__all__ = ["ALL", "COLLECTED", "Plan", "plan"]

#: What :func:`main` prints when the numpy pass must be the whole selection again.
ALL = "all"
#: The folder's file of collected modules: ``module<TAB>tests<TAB>quick (0 or 1)`` a line.
COLLECTED = "collected.tsv"
#: The module name of a session-wide fixture's set-up (a process it starts serves every module after it).
SESSION_FIXTURE = "<session fixture {}>"


def _folder() -> Path | None:
    folder = os.environ.get(TRACE_VAR, "")
    return Path(folder) if folder else None


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_sessionstart(session: pytest.Session) -> None:
    """No module until a test module is collected or run: a kernel used then is no one module's."""
    folder = _folder()
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        publish(folder, "")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, object, object]:
    """A test module's import (its top-level code) is its own: a kernel it reads then is recorded for it."""
    folder = _folder()
    if folder is None or not isinstance(collector, pytest.Module):
        return (yield)
    before = os.environ.get(MODULE_VAR, "")
    publish(folder, _module_of(collector.nodeid))
    try:
        return (yield)
    finally:
        publish(folder, before)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """The test's module for its set-up (its module's fixtures too), call and tear-down."""
    folder = _folder()
    module = _module_of(item.nodeid)
    if folder is not None and os.environ.get(MODULE_VAR) != module:
        publish(folder, module)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[object]) -> Generator[None, object, object]:
    """A session-wide fixture's processes serve every module after it: they record under no one module."""
    folder = _folder()
    if folder is None or fixturedef.scope not in ("session", "package"):
        return (yield)
    before = os.environ.get(MODULE_VAR, "")
    publish(folder, SESSION_FIXTURE.format(fixturedef.argname))
    try:
        return (yield)
    finally:
        publish(folder, before)


def pytest_collection_finish(session: pytest.Session) -> None:
    """``collected.tsv``: each selected module, its number of tests, whether it is in the quick tier."""
    folder = _folder()
    if folder is None:
        return
    tests: dict[str, int] = defaultdict(int)
    quick: dict[str, bool] = {}
    for item in session.items:
        module = _module_of(item.nodeid)
        tests[module] += 1
        quick[module] = quick.get(module, True) and item.get_closest_marker("quick") is not None
    with (folder / COLLECTED).open("w", newline="") as out:
        csv.writer(out, delimiter="\t", lineterminator="\n").writerows(
            (module, n, int(quick[module])) for module, n in tests.items()
        )


@dataclass(frozen=True)
class Plan:
    """The numpy pass the trace of a kernels-on pass asks for."""

    #: Collected module -> (tests, in the quick tier).
    collected: dict[str, tuple[int, bool]]
    #: Collected module -> (what it used first, the programs that used a kernel for it).
    used: dict[str, tuple[str, list[str]]]
    #: Uses outside one collected module (``module kernel pid program``): the whole selection again.
    unplaced: list[str]

    @property
    def whole(self) -> bool:
        return bool(self.unplaced)

    @property
    def again(self) -> list[str]:
        """The modules outside the quick tier to run again (the quick tier runs anyway)."""
        return sorted(m for m in self.used if not self.collected[m][1])

    def explain(self) -> str:
        if self.whole:
            shown = "; ".join(self.unplaced[:5]) + ("; ..." if len(self.unplaced) > 5 else "")
            return (
                f"[test] numpy pass: {len(self.unplaced)} kernel use(s) outside one test module's processes "
                f"({shown}): the whole selection again with the kernels off"
            )
        tests = sum(self.collected[m][0] for m in self.again)
        used, again, unused = len(self.used), len(self.again), len(self.collected) - len(self.used)
        lines = [
            f"[test] numpy pass: the processes of {used} of {len(self.collected)} test modules used a "
            f"compiled kernel in the kernels-on pass; the quick tier and the {again} of them outside it "
            f"({tests} tests) run again with the kernels off; the other {unused} modules ran no kernel "
            "(the same code on numpy)"
        ]
        lines += [f"[test]   {m}: {self.used[m][0]} by {', '.join(self.used[m][1])}" for m in self.again]
        return "\n".join(lines)


def plan(folder: Path) -> Plan:
    """Read a kernels-on pass's ``collected.tsv`` and ``touches.tsv`` (none: no kernel was used)."""
    with (folder / COLLECTED).open(newline="") as rows:
        collected = {m: (int(n), q == "1") for m, n, q in csv.reader(rows, delimiter="\t")}
    used: dict[str, tuple[str, list[str]]] = {}
    unplaced: list[str] = []
    for line in touch_lines(folder):
        module, what, pid, program = line.split("\t")
        if module not in collected:
            unplaced.append(f"{module or '<no test>'} {what} pid {pid} {program}")
            continue
        _, programs = used.setdefault(module, (what, []))
        if program not in programs:
            programs.append(program)
    return Plan(collected, used, unplaced)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m support.kernel_trace", description=__doc__)
    parser.add_argument("folder", type=Path, help="the EDGEDRIFT_KERNEL_TRACE folder of the kernels-on pass")
    found = plan(parser.parse_args(argv).folder)
    print(found.explain(), file=sys.stderr)
    print(ALL if found.whole else "\n".join(found.again))
    return 0


if __name__ == "__main__":
    sys.exit(main())

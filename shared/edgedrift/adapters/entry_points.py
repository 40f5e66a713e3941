"""The strategies known by name: the built-in catalogue plus the entry-point group ``edgedrift.strategies``.

A package registers its own learners, monitors and strategies without forking EdgeDrift by declaring
entry points in its ``pyproject.toml``::

    [project.entry-points."edgedrift.strategies"]
    my-strategy = "my_package.strategies:my_strategy"

The object an entry point names is a :class:`~edgedrift.strategies.Strategy` (see
:mod:`edgedrift.adapters.builders` to make one from a learner or a monitor), or a callable without
arguments that returns one. The entry point's name is the strategy's name wherever it is used: the
evaluator's ``--strategies``, the agent's ``strategy`` setting. A built-in name cannot be taken over.

:func:`strategy_catalogue` is a read-only mapping. Looking a name up loads that entry point only (so
asking for ``druid`` imports no plugin); listing the catalogue loads them all. An entry point that fails
to load (e.g. river's strategies without the ``river`` extra) is left out and its error is kept, so an
unknown-name message says why the name is missing. A name that is not found triggers one fresh look at
the installed distributions, so a package installed after the first look is seen.

Examples
--------
>>> catalogue = strategy_catalogue()
>>> catalogue["druid"].param
'alpha'
>>> "river-kswin" in catalogue
True
>>> catalogue.get("no-such-strategy") is None
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from importlib import metadata

from edgedrift.strategies.catalogue import STRATEGIES, Strategy

__all__ = ["GROUP", "StrategyCatalogue", "get_strategy", "strategy_catalogue"]

#: The entry-point group third-party strategies are registered under.
GROUP = "edgedrift.strategies"


def _as_strategy(name: str, obj: object) -> Strategy:
    """The entry point's object as a Strategy named ``name``; TypeError for anything else."""
    if not isinstance(obj, Strategy) and callable(obj):
        obj = obj()
    if not isinstance(obj, Strategy):
        raise TypeError(f"names a {type(obj).__name__}, not an edgedrift.strategies.Strategy")
    return obj if obj.name == name else dataclasses.replace(obj, name=name)


class StrategyCatalogue(Mapping[str, Strategy]):
    """Built-in strategies first, then the entry points of :data:`GROUP` (loaded on demand)."""

    def __init__(self, builtins: Mapping[str, Strategy]) -> None:
        self._builtins = builtins
        self._points: dict[str, metadata.EntryPoint] | None = None
        self._loaded: dict[str, Strategy] = {}
        #: Entry point name -> why it could not be loaded.
        self.errors: dict[str, str] = {}

    def refresh(self) -> None:
        """Look at the installed distributions' entry points again (and forget the uninstalled ones)."""
        points: dict[str, metadata.EntryPoint] = {}
        errors: dict[str, str] = {}
        for point in metadata.entry_points(group=GROUP):
            if point.name in self._builtins:
                errors[point.name] = f"{point.value} would replace a built-in strategy; ignored"
            else:
                points.setdefault(point.name, point)
        self._points = points
        self._loaded = {name: s for name, s in self._loaded.items() if name in points}
        self.errors = {**errors, **{name: e for name, e in self.errors.items() if name in points}}

    def _load(self, name: str) -> Strategy | None:
        if name in self._loaded:
            return self._loaded[name]
        if self._points is None:
            self.refresh()
        assert self._points is not None
        point = self._points.get(name)
        if point is None:
            return None
        try:
            strategy = _as_strategy(name, point.load())
        except Exception as exc:  # a broken plugin must not break the catalogue: report it by name
            self.errors[name] = f"{point.value}: {type(exc).__name__}: {exc}"
            return None
        self.errors.pop(name, None)
        self._loaded[name] = strategy
        return strategy

    def __getitem__(self, name: str) -> Strategy:
        if name in self._builtins:
            return self._builtins[name]
        strategy = self._load(name)
        if strategy is None and name not in self.errors:
            self.refresh()
            strategy = self._load(name)
        if strategy is None:
            raise KeyError(self.unknown(name))
        return strategy

    def _all(self) -> list[str]:
        if self._points is None:
            self.refresh()
        assert self._points is not None
        plugins = [name for name in self._points if self._load(name) is not None]
        return [*self._builtins, *plugins]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def unknown(self, name: str) -> str:
        """The message for a name that is not in the catalogue: what is known, and what failed to load."""
        message = f"unknown strategy {name!r}; known: {', '.join(sorted(self))}"
        if name in self.errors:
            message += f"; {name!r} is registered but failed to load: {self.errors[name]}"
        elif self.errors:
            message += "; failed to load: " + "; ".join(f"{k} ({v})" for k, v in sorted(self.errors.items()))
        return message


_CATALOGUE = StrategyCatalogue(STRATEGIES)


def strategy_catalogue() -> StrategyCatalogue:
    """The process's catalogue: built-in strategies and the registered ones."""
    return _CATALOGUE


def get_strategy(name: str) -> Strategy:
    """The strategy named ``name``; KeyError naming the known ones (and failed plugins) otherwise."""
    return _CATALOGUE[name]

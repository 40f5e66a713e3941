"""Which test module's processes used the compiled kernels: the record behind CI's numpy pass.

``scripts/test.sh`` runs the suite once with the kernels (``EDGEDRIFT_KERNEL_TRACE=<folder>``) and then,
with ``EDGEDRIFT_NO_KERNELS=1``, only the test modules whose processes used a kernel: a test none of whose
processes reads a kernel runs the same code either way. With the variable set,
:data:`edgedrift.kernels.MODULE` is a :class:`TracedKernels` and :func:`edgedrift.kernels.path` calls its
:meth:`~TracedKernels.touch`: the first use in a process for a test module appends one line to
``<folder>/touches.tsv``. The module is ``EDGEDRIFT_KERNEL_TRACE_MODULE``, read when the kernel is used:
the pytest plugin (``tests/support/kernel_trace.py``) sets it (:func:`publish`) before each test, so a
process a fixture starts carries the module it was started for. A child of a multiprocessing fork server
has the server's environment, not its requester's: when the requester is the pytest process, the child
reads the module the plugin published for it in the folder. Without ``EDGEDRIFT_KERNEL_TRACE`` this module
is not imported and ``MODULE`` is the extension itself.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["MODULE_VAR", "TOUCHES", "TRACE_VAR", "Trace", "TracedKernels", "publish", "traced"]

#: The folder the touches go to; unset: no trace (the default).
TRACE_VAR = "EDGEDRIFT_KERNEL_TRACE"
#: The test module (its path from the rootdir) the current process works for, set by the pytest plugin.
MODULE_VAR = "EDGEDRIFT_KERNEL_TRACE_MODULE"
#: The file of the folder the touches go to: ``module<TAB>what<TAB>pid<TAB>program`` a line (an empty
#: module: a kernel used outside any test; the plugin's placeholder for shared fixtures is another value).
TOUCHES = "touches.tsv"


def _published(folder: Path, pid: int) -> Path:
    """Where the pytest process ``pid`` keeps the test module it runs now (:func:`publish`)."""
    return folder / f"pytest-{pid}.module"


def publish(folder: Path, module: str) -> None:
    """Mark what follows in this (pytest) process and the processes it starts as ``module``'s."""
    os.environ[MODULE_VAR] = module
    _published(folder, os.getpid()).write_text(module)


class Trace:
    """Appends a line to ``folder/touches.tsv`` for the first use of a kernel per (process, test module).

    One ``write`` per line on an ``O_APPEND`` descriptor, so the lines of concurrent processes do not mix.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._seen: set[tuple[int, str]] = set()
        self._lock = threading.Lock()
        self._requester: tuple[int, Path | None] | None = None

    def module(self) -> str:
        """The test module this process works for now (empty: none)."""
        published = self._requester_file()
        if published is not None:
            try:
                return published.read_text()
            except FileNotFoundError:
                pass
        return os.environ.get(MODULE_VAR, "")

    def _requester_file(self) -> Path | None:
        """The module file of the pytest process that asked a fork server for this process, if it did."""
        pid = os.getpid()
        if self._requester is None or self._requester[0] != pid:
            parent = multiprocessing.parent_process()
            found = None
            if parent is not None and parent.pid is not None and parent.pid != os.getppid():
                found = _published(self.folder, parent.pid)  # forked by a server for another process
                found = found if found.exists() else None
            self._requester = (pid, found)
        return self._requester[1]

    def touch(self, what: str) -> None:
        """Record that this process used ``what`` for the test module it works for now."""
        module = self.module()
        key = (os.getpid(), module)  # a forked child records its own uses
        if key in self._seen:
            return
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
        program = "/".join(Path(sys.argv[0]).parts[-2:]) if sys.argv and sys.argv[0] else sys.executable
        line = f"{module}\t{what}\t{key[0]}\t{program}\n".encode()
        fd = os.open(self.folder / TOUCHES, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


class TracedKernels(ModuleType):
    """``edgedrift._kernels`` behind a :class:`Trace`: every attribute read (a kernel, ``LayoutError``) is
    recorded, then answered by the extension itself (the same function object)."""

    def __init__(self, module: ModuleType, trace: Trace) -> None:
        super().__init__(module.__name__, module.__doc__)
        self._traced_module = module
        self._trace = trace

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("__"):
            self._trace.touch(name)
        return getattr(self._traced_module, name)

    def touch(self, what: str) -> None:
        """Record a use that reads no attribute (:func:`edgedrift.kernels.path`)."""
        self._trace.touch(what)

    def __dir__(self) -> list[str]:
        return dir(self._traced_module)


def traced(module: ModuleType, environ: Mapping[str, str]) -> TracedKernels | None:
    """``module`` behind a trace into the folder ``environ`` names, or None where it names none."""
    folder = environ.get(TRACE_VAR, "")
    if not folder:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    return TracedKernels(module, Trace(Path(folder)))

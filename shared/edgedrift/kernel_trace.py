"""Which test module's processes used the compiled kernels: the record behind CI's numpy pass.

``scripts/test.sh`` runs the suite once with the kernels (``EDGEDRIFT_KERNEL_TRACE=<folder>``) and then,
with ``EDGEDRIFT_NO_KERNELS=1``, only the test modules whose processes used a kernel: a test none of whose
processes reads a kernel runs the same code either way. With the variable set,
:data:`edgedrift.kernels.MODULE` is a :class:`TracedKernels` and :func:`edgedrift.kernels.path` calls its
trace's :meth:`~Trace.touch`: the first use in a process for a test module appends one line to
``<folder>/touches.tsv``. The module is ``EDGEDRIFT_KERNEL_TRACE_MODULE`` as the process started with,
then what :func:`publish` says: the pytest plugin (``tests/support/kernel_trace.py``) publishes each
test's module before it runs, so a process a fixture starts carries the module it was started for. A
child of a multiprocessing fork server has the server's environment, not its requester's: when the
requester is the pytest process, the child reads the module the plugin published for it in the folder.
Without ``EDGEDRIFT_KERNEL_TRACE`` this module is not imported and ``MODULE`` is the extension itself.
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

__all__ = ["MODULE_VAR", "TOUCHES", "TRACE_VAR", "Trace", "TracedKernels", "publish", "touch_lines", "traced"]

#: The folder the touches go to; unset: no trace (the default).
TRACE_VAR = "EDGEDRIFT_KERNEL_TRACE"
#: The test module (its path from the rootdir) the current process works for, set by the pytest plugin.
MODULE_VAR = "EDGEDRIFT_KERNEL_TRACE_MODULE"
#: The file of the folder the touches go to: ``module<TAB>what<TAB>pid<TAB>program`` a line (an empty
#: module: a kernel used outside any test; the plugin's placeholder for shared fixtures is another value).
TOUCHES = "touches.tsv"


#: The test module this process works for: its environment's, then what :func:`publish` says (the
#: environment is read once: in a process only the plugin changes it, through :func:`publish`).
_current = os.environ.get(MODULE_VAR, "")


def _published(folder: Path, pid: int) -> Path:
    """Where the pytest process ``pid`` keeps the test module it runs now (:func:`publish`)."""
    return folder / f"pytest-{pid}.module"


def publish(folder: Path, module: str) -> None:
    """Mark what follows in this (pytest) process and the processes it starts as ``module``'s."""
    global _current
    os.environ[MODULE_VAR] = _current = module
    _published(folder, os.getpid()).write_text(module)


_UNRESOLVED = Path()


class Trace:
    """Appends a line to ``folder/touches.tsv`` for the first use of a kernel per (process, test module).

    One ``write`` per line on an ``O_APPEND`` descriptor, so the lines of concurrent processes do not mix;
    a forked child starts with nothing recorded.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._forked()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self._seen: set[str] = set()
        #: The module file of the pytest process that asked a fork server for this process (None: not
        #: one), looked up at the first use (a fork server's child learns its requester after the fork).
        self._requester: Path | None = _UNRESOLVED

    def module(self) -> str:
        """The test module this process works for now (empty: none)."""
        if self._requester is _UNRESOLVED:
            self._requester = self._requester_file()
        if self._requester is not None:
            try:
                return self._requester.read_text()
            except FileNotFoundError:
                pass
        return _current

    def _requester_file(self) -> Path | None:
        parent = multiprocessing.parent_process()
        if parent is None or parent.pid is None or parent.pid == os.getppid():
            return None
        found = _published(self.folder, parent.pid)  # forked by a server for another process
        return found if found.exists() else None

    def touch(self, what: str) -> None:
        """Record that this process used ``what`` for the test module it works for now."""
        module = self.module()
        if module in self._seen:
            return
        with self._lock:
            if module in self._seen:
                return
            self._seen.add(module)
        program = "/".join(Path(sys.argv[0]).parts[-2:]) if sys.argv and sys.argv[0] else sys.executable
        line = f"{module}\t{what}\t{os.getpid()}\t{program}\n".encode()
        for name in (TOUCHES, f"touches-{os.getpid()}.tsv"):
            try:
                _append(self.folder / name, line)
                return
            except OSError:  # a process under a file-size limit or on a full disk (the fault tests make both)
                continue
        print(f"edgedrift.kernel_trace: could not record {line!r}", file=sys.stderr)


def _append(path: Path, line: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def touch_lines(folder: Path) -> list[str]:
    """Every recorded line: ``folder/touches.tsv``, then the files of processes that could not append to
    it (a file-size limit below its size: their own small ``touches-PID.tsv``)."""
    files = [folder / TOUCHES, *sorted(folder.glob("touches-*.tsv"))]
    return [line for f in files if f.exists() for line in f.read_text().splitlines()]


class TracedKernels(ModuleType):
    """``edgedrift._kernels`` behind a :class:`Trace` (its ``trace``): every read of a public attribute (a
    kernel, ``LayoutError``) is recorded, then answered by the extension itself (the same function object)."""

    trace: Trace
    _traced_module: ModuleType

    def __init__(self, module: ModuleType, trace: Trace) -> None:
        super().__init__(module.__name__, module.__doc__)
        ModuleType.__getattribute__(self, "__dict__").update(_traced_module=module, trace=trace)

    def __getattribute__(self, name: str) -> Any:
        # Every read comes here (no failed lookup first, which costs microseconds on a module).
        own = ModuleType.__getattribute__(self, "__dict__")
        if name in own:
            return own[name]
        if not name.startswith("_"):  # a kernel or LayoutError, not a probe (a dunder, mock's _mock_name)
            own["trace"].touch(name)
        return getattr(own["_traced_module"], name)

    def __dir__(self) -> list[str]:
        return dir(self._traced_module)


def traced(module: ModuleType, environ: Mapping[str, str]) -> TracedKernels | None:
    """``module`` behind a trace into the folder ``environ`` names, or None where it names none."""
    folder = environ.get(TRACE_VAR, "")
    if not folder:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    return TracedKernels(module, Trace(Path(folder)))

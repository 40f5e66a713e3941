"""What the benchmarks read about processes: CPU time, memory and per-thread scheduling from Linux's
``/proc``, and py-spy (not a project dependency: ``pip install py-spy``) around a phase."""

from __future__ import annotations

import math
import os
import re
import resource
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

__all__ = [
    "CpuWatch",
    "cpu_seconds",
    "load_average",
    "machine_busy_seconds",
    "named_cpu_seconds",
    "process_tree",
    "py_spy_command",
    "py_spy_record",
    "py_spy_thread_names",
    "rss_mb",
    "self_cpu_seconds",
    "task_stats",
]

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_cpu(text: str) -> float:
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_seconds(pid: int | str, missing: float = math.nan) -> float:
    """utime + stime of a process (or ``PID/task/TID``); ``missing`` once it is gone."""
    try:
        return _stat_cpu(Path(f"/proc/{pid}/stat").read_text())
    except (FileNotFoundError, ProcessLookupError):
        return missing


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    pids, stack = [], [pid]
    while stack:
        p = stack.pop()
        pids.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with suppress(FileNotFoundError, ProcessLookupError):
                stack.extend(int(c) for c in (task / "children").read_text().split())
    return pids


def named_cpu_seconds(name: str) -> float:
    """CPU seconds of every process on the machine whose command name is ``name`` (e.g. all PostgreSQL
    server processes: backends, WAL writer, ...)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if text[text.find("(") + 1 : text.rfind(")")] == name:
            total += _stat_cpu(text)
    return total


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (/proc/stat: everything but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLK_TCK


def self_cpu_seconds() -> float:
    """User + system CPU seconds of this process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_average() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def rss_mb(pid: int) -> float:
    """Resident memory (VmRSS) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def pss_mb(pid: int) -> float:
    """Proportional set size in MB (``smaps_rollup``): resident pages with each shared page divided among
    the processes that map it, so that the sum over processes is the memory they take together (the sum
    of their RSS counts a shared library once per process)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return math.nan


def task_stats(pid: int) -> dict[int, tuple[float, float, int, int]]:
    """Per thread of ``pid``: (CPU s, run-queue wait s, voluntary, involuntary context switches)."""
    out: dict[int, tuple[float, float, int, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
            cpu_ns, runq_ns, _ = (task / "schedstat").read_text().split()
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        switches = dict(re.findall(r"^(\w*ctxt_switches):\s+(\d+)", status, re.M))
        out[int(task.name)] = (
            int(cpu_ns) / 1e9,
            int(runq_ns) / 1e9,
            int(switches.get("voluntary_ctxt_switches", 0)),
            int(switches.get("nonvoluntary_ctxt_switches", 0)),
        )
    return out


class CpuWatch:
    """CPU seconds of named processes over a phase, as shares of one core, and of the rest of the machine
    (anything else that runs meanwhile competes for the same cores: check that share before trusting a
    figure)."""

    def __init__(self, procs: dict[str, int]) -> None:
        self.procs = procs
        self.t0 = time.monotonic()
        self.c0 = {k: cpu_seconds(p) for k, p in procs.items()}
        self.m0 = machine_busy_seconds()

    def used(self) -> dict[str, float]:
        """CPU seconds of each named process since the start."""
        return {k: cpu_seconds(p) - self.c0[k] for k, p in self.procs.items()}

    def shares(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        out = {k: used / wall for k, used in self.used().items()}
        # Clipped at 0: /proc/stat and the per-process ticks are sampled apart (a few % of noise).
        out["rest of the machine"] = max(0.0, (machine_busy_seconds() - self.m0) / wall - sum(out.values()))
        return out


def py_spy_command(flags: str = "record --rate 250") -> str:
    """``py-spy FLAGS`` with py-spy from PATH (the default of the benchmarks' ``--py-spy`` option)."""
    return f"{shutil.which('py-spy') or 'py-spy'} {flags}"


def py_spy_record(py_spy: list[str], pid: int, out: Path, *flags: str) -> Callable[[], None]:
    """Start recording ``pid`` as raw stacks into ``out``; the returned function stops it (SIGINT)."""
    proc = subprocess.Popen(
        [*py_spy, "--pid", str(pid), *flags, "--format", "raw", "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def stop() -> None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    return stop


def py_spy_thread_names(py_spy: str, pid: int) -> dict[int, str]:
    """TID -> Python thread name, from ``py-spy dump`` (empty without py-spy)."""
    try:
        out = subprocess.run(
            [py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(tid): name for tid, name in re.findall(r'^Thread (\d+) \([^)]*\): "([^"]*)"', out, re.M)}

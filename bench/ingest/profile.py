"""Where the agent's time goes: per-thread CPU and scheduling from ``/proc`` over a phase, and py-spy's raw
stacks (``record --threads --idle``) folded into sections per thread (JSON decode, parse, EdgeLoop, JSON
encode, paho publish, paho packet reads/writes, waiting for work), with the share of wall time a thread is
blocked on the GIL (wall - CPU - run queue - waiting for work)."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ThreadTime:
    """One agent thread over a phase, as fractions of the phase's wall time (and context switches/s)."""

    name: str
    cpu: float  # on a CPU (/proc/PID/task/TID/schedstat)
    runq: float  # runnable, waiting for a CPU (other processes, the other thread)
    voluntary: float
    involuntary: float
    #: From py-spy --idle (profiled runs only): blocked waiting for work (an empty queue, select, a
    #: timer), and the rest of the wall time that is neither CPU nor run queue nor waiting for work:
    #: blocked on the GIL (or another lock) in the middle of Python code.
    waiting: float = math.nan
    gil: float = math.nan


#: Worker-thread sections, in priority order: a stack goes to the first whose substring one frame holds.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("checkpoint (pickle + fsync)", ("checkpoint (",)),
    ("warm-up / first model", ("_finish_warmup (", "_warmup (")),
    ("JSON decode (json.loads)", ("_load (",)),
    ("parse + validate + numpy rows (parse_samples)", ("parse_samples (", "parse_labels (")),
    ("dedup by id (_seen)", ("_seen (",)),
    ("EdgeLoop (process_one / process_many / learn)", ("edgedrift/loop.py", "learn_one (")),
    ("accuracy + recent samples (_track)", ("_track (", "_score (", "_remember (")),
    ("prediction dicts (_run)", ("_run (",)),
    ("JSON encode of predictions (json.dumps)", ("json/__init__.py", "json/encoder.py")),
    ("paho publish (client.publish, socketpair wake-up)", ("paho/",)),
    ("model installs + events", ("_apply_installs (", "event (", "_report_drops (", "_reject (")),
    ("queue get (inbox)", ("queue.py",)),
)
PAHO_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("on_message (enqueue)", ("_on_message (",)),
    ("read + parse packets", ("_packet_read (", "_handle_publish (", "_handle_pub", "_packet_handle (")),
    ("write packets", ("_packet_write (", "loop_write (")),
    ("loop bookkeeping (misc)", ("",)),
)


def thread_kind(name: str) -> str:
    if name.startswith("paho-mqtt-client"):
        return "paho network thread"
    if name.startswith("edgedrift-"):
        return name.removeprefix("edgedrift-") + " thread"
    return name


#: Leaf frames of a thread blocked waiting for work (py-spy --idle records them; they are not CPU):
#: the worker on its empty inbox, paho in select(), the heartbeat and main threads on their events.
WAIT_LEAVES = ("Condition.wait (", "Event.wait (", "Client._loop (", "select (", "sleep (")
WAITING = "waiting for work (empty queue, select, timers)"


def profile_sections(raw: Path) -> tuple[dict[str, Counter[str]], dict[int, str]]:
    """py-spy samples per thread kind and section (``WAITING`` for blocked-waiting stacks), and the
    TID -> thread name map."""
    counts: dict[str, Counter[str]] = {}
    names: dict[int, str] = {}
    if not raw.exists():
        return counts, names
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        head, _, rest = stack.partition(";")
        m = re.match(r"thread \((\d+)\): (.*)", head)
        tid, name = (int(m.group(1)), m.group(2)) if m else (0, head)
        names[tid] = name
        kind = thread_kind(name)
        if rest.rsplit(";", 1)[-1].startswith(WAIT_LEAVES):
            section = WAITING
        else:
            table = SECTIONS if kind == "worker thread" else PAHO_SECTIONS if kind.startswith("paho") else ()
            section = next((s for s, keys in table if any(k in rest for k in keys)), "other")
        counts.setdefault(kind, Counter())[section] += int(n)
    return counts, names


#: (CPU s, run-queue s, voluntary, involuntary context switches) per thread id, as ``task_stats`` reads them.
TaskStats = dict[int, tuple[float, float, int, int]]


def thread_times(before: TaskStats, after: TaskStats, wall: float, names: dict[int, str]) -> list[ThreadTime]:
    """Every thread that used more than 0.5% of a core over ``wall`` seconds, as shares of the phase."""
    names = {**dict.fromkeys(after, "native thread (no Python frames: OpenBLAS pool)"), **names}
    out = []
    for tid, (c1, q1, v1, i1) in sorted(after.items()):
        c0, q0, v0, i0 = before.get(tid, (0.0, 0.0, 0, 0))
        if c1 - c0 > 0.005 * wall:
            out.append(
                ThreadTime(
                    thread_kind(names.get(tid, f"tid {tid}")),
                    (c1 - c0) / wall,
                    (q1 - q0) / wall,
                    (v1 - v0) / wall,
                    (i1 - i0) / wall,
                )
            )
    return out


def per_message_profile(
    threads: list[ThreadTime], spied: dict[str, Counter[str]], wall: float, prof_wall: float, messages: int
) -> dict[str, dict[str, float]]:
    """Thread kind -> section -> µs of that thread's wall time per message; fills each thread's
    ``waiting`` and ``gil`` shares. The samples outside the phase (attach, tail) are all "waiting": they are
    taken off."""
    per_msg = 1e6 * wall / messages
    profile: dict[str, dict[str, float]] = {"all": {"wall time per message": per_msg}}
    for t in threads:
        counts = spied.get(t.name)
        if not counts:
            continue
        rate = sum(counts.values()) / prof_wall
        shares: dict[str, float] = dict(counts.most_common())
        shares[WAITING] = max(0.0, counts[WAITING] - rate * (prof_wall - wall))
        total = sum(shares.values())
        t.waiting = shares[WAITING] / total
        t.gil = max(0.0, 1 - t.waiting - t.cpu - t.runq)
        profile[t.name] = {sec: per_msg * v / total for sec, v in shares.items()}
    return profile

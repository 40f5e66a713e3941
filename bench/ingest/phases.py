"""The timed phases: the publisher alone, the bare peer, the agent (each warmed up first), and the memory
run of a fresh agent over many samples."""

from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from edgedrift_harness.agent import AgentProcess
from edgedrift_harness.proc import (
    CpuWatch,
    cpu_seconds,
    py_spy_record,
    py_spy_thread_names,
    rss_mb,
    task_stats,
)
from ingest.data import Data
from ingest.lab import Config, IngestLab, topic
from ingest.profile import TaskStats, ThreadTime, per_message_profile, profile_sections, thread_times
from ingest.publisher import Publisher
from ingest.sink import Sink, Tally


@dataclass
class Result:
    """One timed phase."""

    what: str  # "publisher" | "peer" | "agent"
    kind: str  # "single" | "batch"
    qos: int
    mode: str
    samples: int
    msgs: int
    delivered: int
    seconds: float
    cpu: dict[str, float] = field(default_factory=dict)
    #: CPU seconds of each process over the phase (``cpu`` as seconds, not shares).
    cpu_s: dict[str, float] = field(default_factory=dict)
    threads: list[ThreadTime] = field(default_factory=list)
    #: Thread kind -> section -> µs of that thread's wall time per message (py-spy --idle).
    profile: dict[str, dict[str, float]] | None = None
    rss_mb: float = math.nan

    @property
    def sps(self) -> float:
        return self.delivered / self.seconds if self.seconds > 0 else math.nan

    @property
    def mps(self) -> float:
        return self.sps * self.msgs / self.samples


@dataclass
class Memory:
    """The memory run: (samples, VmRSS MB) points, agent CPU share, samples delivered, seconds."""

    points: list[tuple[int, float]]
    cpu: float
    delivered: int
    seconds: float


def describe(r: Result) -> str:
    """One line per phase for the progress output."""
    mode = f" {r.mode}" if r.mode and r.mode != "vectorised" else ""
    lost = f", LOST {r.samples - r.delivered}" if r.delivered < r.samples else ""
    return (
        f"{r.what:<9} {r.kind:<6} QoS {r.qos}{mode}: {r.sps:>10,.0f} samples/s {r.mps:>9,.0f} msgs/s "
        f"({r.delivered:,}/{r.samples:,} in {r.seconds:.2f} s{lost})"
    )


def wait_count(
    sink: Sink, target: int, idle: float = 15.0, on_done: Callable[[], None] | None = None
) -> Tally:
    """Until ``sink`` counted ``target`` samples, or nothing arrived for ``idle`` seconds; ``on_done``
    runs at once then (before the short wait that would catch anything beyond the target)."""
    last, since = sink.read(), time.monotonic()
    while last.samples < target:
        time.sleep(0.002)
        now = sink.read()
        if now.samples != last.samples:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > idle:
            break
    if on_done is not None:
        on_done()
    time.sleep(0.2)  # anything beyond the target (duplicates) would show up here
    return sink.read()


def timed_phase(
    what: str,
    kind: str,
    pub: Publisher,
    to: str,
    payloads: list[bytes],
    n: int,
    sink: Sink | None,
    window: int,
    procs: dict[str, int],
    mode: str = "",
    on_done: Callable[[], None] | None = None,
) -> Result:
    """Publish ``payloads`` to ``to`` (closed loop on what ``sink`` counted); None as sink: the publisher
    alone, until the broker took everything."""
    packets = pub.encode(to, payloads)
    cpu = CpuWatch(procs)
    if sink is None:
        t0, _t1, t2 = pub.run(packets)
        return Result(what, kind, pub.qos, mode, n, len(payloads), n, t2 - t0, cpu.shares(), cpu.used())
    before = sink.read()
    t0, _t1, _t2 = pub.run(packets, lambda: sink.read().msgs - before.msgs, window)
    shares: dict[str, float] = {}
    used: dict[str, float] = {}

    def done() -> None:
        shares.update(cpu.shares())
        used.update(cpu.used())
        if on_done is not None:
            on_done()

    after = wait_count(sink, before.samples + n, on_done=done)
    delivered = after.samples - before.samples
    return Result(what, kind, pub.qos, mode, n, len(payloads), delivered, after.t_last - t0, shares, used)


def warm_up(agent: AgentProcess, pub: Publisher, preds: Sink, data: Data) -> float:
    """2000 warm-up samples + 500 more, then one sample every 20 ms until a prediction comes from the
    first model (samples that arrive while it is trained are answered with null); seconds from the first
    publish to the first model prediction."""
    samples = topic(agent.device, "samples")
    payloads = data.take(2500, 1)
    before = preds.read().samples
    t0 = time.monotonic()
    pub.run(pub.encode(samples, payloads))
    tally = wait_count(preds, before + 2500, idle=60)
    sent = 2500
    deadline = time.monotonic() + 60
    while not tally.t_first_model and tally.samples >= before + sent and time.monotonic() < deadline:
        pub.run(pub.encode(samples, data.take(1, 1)))
        sent += 1
        time.sleep(0.02)
        tally = wait_count(preds, before + sent, idle=60)
    if tally.samples < before + sent or not tally.t_first_model:
        raise RuntimeError(f"warm-up: {tally.samples - before} of {sent} predictions, see {agent.log}")
    return tally.t_first_model - t0


def snapshot(into: list[tuple[float, TaskStats]], pid: int) -> None:
    """The moment the last prediction arrived, and the agent's thread times then."""
    into.append((time.monotonic(), task_stats(pid)))


def agent_phases(
    cfg: Config,
    lab: IngestLab,
    data: Data,
    qos: int,
    peer: Sink,
    results: list[Result],
    warmups: list[tuple[int, str, float]],
    mode: str = "vectorised",
    kinds: tuple[str, ...] = ("single", "batch"),
) -> None:
    """For a fresh agent: per message kind, the publisher alone and the peer (vectorised mode only), then
    the agent."""
    agent = lab.agent(qos, batch_mode=mode)
    pub = Publisher(lab.broker.port, qos)
    preds = None
    try:
        agent.wait_ready()
        preds = Sink(lab.workdir, lab.broker.url, topic(agent.device, "predictions"), qos, "predictions")
        warmups.append((qos, mode, warm_up(agent, pub, preds, data)))
        procs = {"publisher (this process)": os.getpid(), "broker": lab.broker.pid, "cloud": lab.cloud.pid}
        for kind in kinds:
            batch = 1 if kind == "single" else 100
            window = cfg.window if batch == 1 else cfg.batch_window
            payloads = data.take(cfg.samples, batch)
            if mode == "vectorised":
                alone = timed_phase(
                    "publisher", kind, pub, "bench/void", payloads, cfg.samples, None, 0, procs
                )
                results.append(alone)
                print(f"  {describe(alone)}", flush=True)
                payloads = data.take(cfg.samples, batch)
                bare = timed_phase(
                    "peer", kind, pub, peer.topic, payloads, cfg.samples, peer, window,
                    {**procs, "peer": peer.proc.pid},
                )  # fmt: skip
                results.append(bare)
                print(f"  {describe(bare)}", flush=True)
                payloads = data.take(cfg.samples, batch)
            results.append(agent_phase(cfg, agent, pub, preds, kind, qos, mode, payloads, window, procs))
            print(f"  {describe(results[-1])}", flush=True)
            time.sleep(0.5)
    finally:
        if preds is not None:
            preds.stop()
        pub.close()
        agent.stop(60)


def agent_phase(
    cfg: Config,
    agent: AgentProcess,
    pub: Publisher,
    preds: Sink,
    kind: str,
    qos: int,
    mode: str,
    payloads: list[bytes],
    window: int,
    procs: dict[str, int],
) -> Result:
    """One timed agent phase, with its threads' times (and py-spy's sections with ``--profile``)."""
    stop_profiler = None
    raw = None
    t_prof = time.monotonic()
    if cfg.profile is not None:
        raw = cfg.profile / f"agent-{kind}-qos{qos}-{mode}.txt"
        stop_profiler = py_spy_record(cfg.py_spy, agent.pid, raw, "--threads", "--idle")
        time.sleep(1.0)  # py-spy attaches
    tasks0 = task_stats(agent.pid)
    t0 = time.monotonic()
    ends: list[tuple[float, TaskStats]] = []
    r = timed_phase(
        "agent", kind, pub, topic(agent.device, "samples"), payloads, cfg.samples, preds, window,
        {**procs, "agent": agent.pid, "counting subscriber": preds.proc.pid}, mode,
        partial(snapshot, ends, agent.pid),
    )  # fmt: skip
    wall, tasks1 = ends[0][0] - t0, ends[0][1]
    spied: dict[str, Counter[str]] = {}
    spied_names: dict[int, str] = {}
    prof_wall = math.nan
    if stop_profiler is not None and raw is not None:
        stop_profiler()
        prof_wall = time.monotonic() - t_prof
        spied, spied_names = profile_sections(raw)
    r.rss_mb = rss_mb(agent.pid)
    names = {**spied_names, **py_spy_thread_names(cfg.py_spy[0], agent.pid)}
    r.threads = thread_times(tasks0, tasks1, wall, names)
    if spied:
        r.profile = per_message_profile(r.threads, spied, wall, prof_wall, len(payloads))
    return r


def run_memory(cfg: Config, lab: IngestLab, data: Data) -> Memory:
    """A fresh agent (QoS 1, batches of 100) takes ``cfg.memory_samples`` samples; VmRSS every 50k."""
    agent = lab.agent(1)
    pub = Publisher(lab.broker.port, 1)
    preds = None
    try:
        agent.wait_ready()
        preds = Sink(lab.workdir, lab.broker.url, topic(agent.device, "predictions"), 1, "predictions")
        warm_up(agent, pub, preds, data)
        print(f"  encoding {cfg.memory_samples:,} samples ...", flush=True)
        packets = pub.encode(topic(agent.device, "samples"), data.take(cfg.memory_samples, 100))
        time.sleep(0.5)
        base = preds.read().samples
        points = [(0, rss_mb(agent.pid))]
        stop = threading.Event()
        counter = preds

        def sample_rss() -> None:
            step = 50_000
            nxt = step
            while not stop.is_set():
                done = counter.read().samples - base
                if done >= nxt:
                    points.append((done, rss_mb(agent.pid)))
                    nxt += step
                time.sleep(0.005)

        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        c0 = cpu_seconds(agent.pid)
        before = preds.read()
        t0, _, _ = pub.run(packets, lambda: counter.read().msgs - before.msgs, cfg.batch_window)
        after = wait_count(preds, base + cfg.memory_samples)
        stop.set()
        sampler.join()
        if points[-1][0] < after.samples - base:
            points.append((after.samples - base, rss_mb(agent.pid)))
        seconds = after.t_last - t0
        return Memory(points, (cpu_seconds(agent.pid) - c0) / seconds, after.samples - base, seconds)
    finally:
        if preds is not None:
            preds.stop()
        pub.close()
        agent.stop(60)

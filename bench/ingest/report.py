"""The benchmark's report: throughput against the peer and the targets, CPU per process, the agent's
threads (and where their time goes with ``--profile``), memory and start-up."""

from __future__ import annotations

import math
import os
import statistics

from ingest.lab import Config
from ingest.phases import Memory, Result
from ingest.profile import WAITING
from ingest.startup import Startup

TARGETS = {
    "single": 8_000.0,  # messages/s (= samples/s) of single-sample messages
    "batch": 80_000.0,  # samples/s in batches of 100
    "rss_mb": 80.0,
    "rss_drift": 0.05,
    "startup_s": 2.0,
}


def pct(v: float) -> str:
    return "" if math.isnan(v) else f"{100 * v:.0f}%"


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def report(
    cfg: Config,
    results: list[Result],
    warmups: list[tuple[int, str, float]],
    memory: Memory | None,
    startup: list[Startup],
    imports: tuple[float, float] | None,
) -> None:
    agents = [r for r in results if r.what == "agent"]
    if agents or memory is not None:
        report_throughput(cfg, results, memory)
    if results:
        report_cpu(results)
    if agents:
        report_threads(agents)
    if warmups:
        print()
        print(
            "Warm-up (2000 samples, every 10th labeled, then the first model from the cloud), "
            "first publish -> first model prediction: "
            + ", ".join(f"QoS {q} {m}: {s:.2f} s" for q, m, s in warmups)
        )
    if memory is not None:
        report_memory(memory)
    if startup:
        report_startup(startup, imports)


def report_throughput(cfg: Config, results: list[Result], memory: Memory | None) -> None:
    print()
    print(
        f"## MQTT ingest: Mosquitto -> edge agent (druid, d={cfg.d}) -> predictions; "
        f"{cfg.samples:,} samples per phase, at most {cfg.window:,} single / {cfg.batch_window:,} batch "
        f"messages outstanding, {os.cpu_count()} cores; targets judged at QoS 1"
    )
    print()
    print(
        "| messages | QoS | agent samples/s | agent msgs/s | peer samples/s (bare paho + json) "
        "| ratio agent/peer | publisher alone samples/s | agent RSS MB | target | met |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    by = {(r.what, r.kind, r.qos): r for r in results if r.what != "agent"}
    for r in (r for r in results if r.what == "agent"):
        peer, alone = by.get(("peer", r.kind, r.qos)), by.get(("publisher", r.kind, r.qos))
        label = "single samples" if r.kind == "single" else "batches of 100"
        if r.mode != "vectorised":
            label += f" (batch_mode={r.mode})"
        target = TARGETS[r.kind]
        unit = "msgs/s" if r.kind == "single" else "samples/s"
        judged = r.qos == 1 and r.mode == "vectorised"
        ok = r.sps >= target and r.delivered == r.samples
        lost = f" (lost {r.samples - r.delivered:,})" if r.delivered < r.samples else ""
        peer_sps = peer.sps if peer else math.nan
        print(
            f"| {label} | {r.qos} | {r.sps:,.0f}{lost} | {r.mps:,.0f} | {peer_sps:,.0f} | "
            f"{r.sps / peer_sps:.2f} | {alone.sps if alone else math.nan:,.0f} | {r.rss_mb:.1f} | "
            f"≥ {target:,.0f} {unit}{'' if judged else ' (info)'} | "
            f"{verdict(ok) if judged else ('yes' if ok else 'no')} |"
        )
    if memory is not None:
        sps = memory.delivered / memory.seconds
        print(
            f"| batches of 100, the {memory.delivered:,}-sample memory run | 1 | {sps:,.0f} | "
            f"{sps / 100:,.0f} | | | | {memory.points[-1][1]:.1f} | "
            f"≥ {TARGETS['batch']:,.0f} samples/s (info) | {'yes' if sps >= TARGETS['batch'] else 'no'} |"
        )


def report_cpu(results: list[Result]) -> None:
    print()
    print(
        f"CPU per process during each phase (share of one core; {os.cpu_count()} cores; phases under 0.5 s "
        "are too short for /proc's 10 ms ticks):"
    )
    print()
    names = list(dict.fromkeys(k for r in results for k in r.cpu))
    print("| phase | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for r in results:
        short = r.seconds < 0.5
        cells = " | ".join(f"{100 * r.cpu[n]:.0f}%" if n in r.cpu and not short else "" for n in names)
        mode = f" {r.mode}" if r.mode and r.mode != "vectorised" else ""
        print(f"| {r.what} {r.kind} QoS {r.qos}{mode} | {cells} |")
    report_cpu_per_sample(results)


def report_cpu_per_sample(results: list[Result]) -> None:
    """CPU µs per sample of the agent against the peer's in the same run: the figure that a loaded machine
    leaves meaningful (a rate is not: it measures the other work as well)."""
    peers = {(r.kind, r.qos): r for r in results if r.what == "peer"}
    agents = [r for r in results if r.what == "agent" and r.cpu_s]
    if not agents:
        return
    print()
    print(
        "CPU µs per sample (utime + stime over the phase / samples delivered; a single-sample message is one "
        "sample): the agent process against the bare paho peer of the same phase kind, and the broker's:"
    )
    print()
    print("| phase | agent µs/sample | peer µs/sample | agent / peer | broker µs/sample (agent phase) |")
    print("|---|---:|---:|---:|---:|")
    for r in agents:
        agent = 1e6 * r.cpu_s.get("agent", math.nan) / r.delivered
        peer_run = peers.get((r.kind, r.qos))
        peer = 1e6 * peer_run.cpu_s.get("peer", math.nan) / peer_run.delivered if peer_run else math.nan
        broker = 1e6 * r.cpu_s.get("broker", math.nan) / r.delivered
        ratio = agent / peer
        print(f"| {r.kind} QoS {r.qos} {r.mode} | {agent:.2f} | {peer:.2f} | {ratio:.2f} | {broker:.2f} |")


def report_threads(agents: list[Result]) -> None:
    print()
    print(
        "Agent threads during each agent phase, share of the phase's wall time: on a CPU, runnable but "
        "waiting for a CPU (run queue), blocked waiting for work, and the rest = blocked on the GIL (or "
        "another lock) in the middle of Python code (the last two need --profile):"
    )
    print()
    print(
        "| phase | thread | CPU | run queue | waiting for work | GIL / lock wait "
        "| voluntary cs/s | involuntary cs/s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in agents:
        for t in sorted(r.threads, key=lambda t: -t.cpu):
            print(
                f"| {r.kind} QoS {r.qos} {r.mode} | {t.name} | {pct(t.cpu)} | {pct(t.runq)} | "
                f"{pct(t.waiting)} | {pct(t.gil)} | {t.voluntary:,.0f} | {t.involuntary:,.0f} |"
            )
    profiled = [r for r in agents if r.profile]
    if not profiled:
        return
    print()
    print(
        "Where the agent's time goes, µs of each thread's wall time per message (py-spy --idle --threads; "
        "a section's time includes waiting for the GIL inside it; a batch message carries 100 samples):"
    )
    print()
    rows = list(dict.fromkeys((k, s) for r in profiled for k, c in (r.profile or {}).items() for s in c))
    rows.sort(
        key=lambda ks: (
            ks[0] == "all",
            ks[0] != "worker thread",
            not ks[0].startswith("paho"),
            ks[0],
            ks[1] == WAITING,
        )
    )
    print("| thread | section | " + " | ".join(f"{r.kind} QoS {r.qos} {r.mode}" for r in profiled) + " |")
    print("|---|---|" + "---:|" * len(profiled))
    for k, sec in rows:
        cells = " | ".join(f"{(r.profile or {}).get(k, {}).get(sec, 0.0):,.1f}" for r in profiled)
        print(f"| {k} | {sec} | {cells} |")


def report_memory(memory: Memory) -> None:
    rss = [p[1] for p in memory.points]
    start, end, peak = rss[0], rss[-1], max(rss)
    drift = (end - start) / start
    steady = [p for p in memory.points if p[0] >= 200_000]
    steady_drift = (steady[-1][1] - steady[0][1]) / steady[0][1] if len(steady) >= 2 else math.nan
    print()
    print(
        f"## Memory: {memory.delivered:,} samples in batches of 100 (QoS 1) in {memory.seconds:.1f} s "
        f"({memory.delivered / memory.seconds:,.0f} samples/s, agent CPU {100 * memory.cpu:.0f}%)"
    )
    print()
    print("| samples | " + " | ".join(f"{n // 1000}k" for n, _ in memory.points) + " |")
    print("|---|" + "---:|" * len(memory.points))
    print("| agent VmRSS MB | " + " | ".join(f"{v:.1f}" for _, v in memory.points) + " |")
    print()
    print("| memory | value | target | met |")
    print("|---|---:|---|---|")
    print(f"| RSS at start (after warm-up) | {start:.1f} MB | | |")
    print(f"| RSS at end | {end:.1f} MB | | |")
    limit, flat = TARGETS["rss_mb"], TARGETS["rss_drift"]
    print(f"| RSS max | {peak:.1f} MB | ≤ {limit:.0f} MB | {verdict(peak <= limit)} |")
    print(
        f"| drift start -> end | {100 * drift:+.1f}% | within ±{100 * flat:.0f}% | "
        f"{verdict(abs(drift) <= flat)} |"
    )
    if not math.isnan(steady_drift):
        print(
            f"| drift from 200k (recent samples full) -> end | {100 * steady_drift:+.1f}% | "
            f"(info) | {'yes' if abs(steady_drift) <= flat else 'no'} |"
        )


def report_startup(startup: list[Startup], imports: tuple[float, float] | None) -> None:
    keys = ("online", "ready", "first_prediction")
    med = {k: statistics.median(getattr(s, k) for s in startup) for k in keys}
    runs = {k: ", ".join(f"{getattr(s, k):.2f}" for s in startup) for k in keys}
    rss_ready = statistics.median(s.rss_ready for s in startup)
    limit = TARGETS["rss_mb"]
    print()
    print(f"## Startup: {len(startup)} spawns of `python -m edgedrift_edge.cli run` (median, all runs)")
    print()
    print("| from the spawn to | median | runs | target | met |")
    print("|---|---:|---|---|---|")
    print(f"| retained `online` status | {med['online']:.2f} s | {runs['online']} | | |")
    print(
        f"| `ready` line (connected, subscribed) | {med['ready']:.2f} s | {runs['ready']} | "
        f"≤ {TARGETS['startup_s']:.0f} s | {verdict(med['ready'] <= TARGETS['startup_s'])} |"
    )
    print(
        f"| first prediction (a probe sample every 5 ms from the spawn on) | {med['first_prediction']:.2f} s "
        f"| {runs['first_prediction']} | | |"
    )
    print(
        f"| RSS when ready | {rss_ready:.1f} MB | {', '.join(f'{s.rss_ready:.1f}' for s in startup)} | "
        f"≤ {limit:.0f} MB | {verdict(rss_ready <= limit)} |"
    )
    if imports is not None:
        print(
            f"| (a bare `python -c pass`; python importing the agent's modules) | {imports[0]:.2f} s; "
            f"{imports[1]:.2f} s | | | |"
        )

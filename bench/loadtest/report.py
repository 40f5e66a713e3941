"""The report: the load table, the in-process section timing, the py-spy sections, and the targets."""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from loadtest.breakdown import Breakdown
from loadtest.load import LoadResult, pct


def print_report(
    results: list[LoadResult],
    breakdowns: list[Breakdown],
    problems: list[str],
    ok: Counter[str],
    args: argparse.Namespace,
) -> None:
    print()
    print(
        "| d | body | K | workers | retrains/s | p50 ms | p99 ms | bytes in | bytes out "
        "| train p50 ms in-proc (a) | train_ms p50 service (b) | overhead p50/(a) "
        "| in-proc retrains/s (1 core) | service / in-proc "
        "| CPU ms/req: service / client / PostgreSQL / rest | non-2xx | load avg |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for r in results:
        t = r.tally
        p50 = pct(t.latencies_ms, 50)
        bad = sum(v for s, v in t.statuses.items() if not 200 <= s < 300)
        print(
            f"| {r.d} | {r.encoding} | {r.clients} | {r.workers} | {r.rate:.1f} | {p50:.2f} "
            f"| {pct(t.latencies_ms, 99):.2f} | {np.mean(t.bytes_in):,.0f} | {np.mean(t.bytes_out):,.0f} "
            f"| {r.inproc.p50_ms:.3f} | {pct(t.train_ms, 50):.3f} | {p50 / r.inproc.p50_ms:.1f}x "
            f"| {r.inproc.retrains_per_s:,.0f} | {r.rate / r.inproc.retrains_per_s:.3f} "
            f"| {r.per_request_ms(r.cpu.service):.2f} / {r.per_request_ms(r.cpu.client):.2f} / "
            f"{r.per_request_ms(r.cpu.postgres):.2f} / {r.per_request_ms(r.cpu.rest):.2f} "
            f"| {bad} | {r.load.split()[0]} |"
        )
    print()
    print(
        "(b) is wall time in the service's worker thread: under load it includes waiting for the GIL that "
        "the event loop holds (switch interval 5 ms), so (b) > (a) there."
    )
    if breakdowns:
        k1 = {(r.d, r.encoding, r.workers): pct(r.tally.latencies_ms, 50) for r in results if r.clients == 1}
        names = list(dict.fromkeys(n for b in breakdowns for n in b.sections))
        print()
        print("In-process time of each request section (median ms, the service's own functions):")
        print()
        w1 = min(args.workers)
        print(
            "| d | body | "
            + " | ".join(names)
            + f" | sum | K=1 W={w1} p50 latency | rest: HTTP, ASGI, FastAPI, client, GIL |"
        )
        print("|---:|---|" + "---:|" * (len(names) + 3))
        for b in breakdowns:
            total = sum(v for k, v in b.sections.items() if "miss" not in k)
            lat = k1.get((b.d, b.encoding, w1))
            cells = " | ".join(f"{b.sections[n]:.3f}" if n in b.sections else "" for n in names)
            tail = "– | –" if lat is None else f"{lat:.2f} | {lat - total:.2f}"
            print(f"| {b.d} | {b.encoding} | {cells} | {total:.3f} | {tail} |")
        print()
        print(
            "(the K=1 columns need --clients 1 in the run; 'store + commit' includes PostgreSQL round trips)"
        )
    profiled = [r for r in results if r.profile]
    if profiled:
        names = list(dict.fromkeys(n for r in profiled for n in r.profile or {}))
        print()
        print("Where the service's CPU goes (py-spy, share of non-idle samples of all service processes):")
        print()
        print(
            "| section | "
            + " | ".join(f"d={r.d} {r.encoding} K={r.clients} W={r.workers}" for r in profiled)
            + " |"
        )
        print("|---|" + "---:|" * len(profiled))
        for n in names:
            cells = " | ".join(f"{100 * (r.profile or {}).get(n, 0.0):.1f}%" for r in profiled)
            print(f"| {n} | {cells} |")
        print(
            "| = service CPU ms per request | "
            + " | ".join(f"{r.per_request_ms(r.cpu.service):.2f}" for r in profiled)
            + " |"
        )
    print()
    for d in (5,):
        rows = [r for r in results if r.d == d]
        if not rows:
            continue
        best = max(rows, key=lambda r: r.rate)
        ratio = min(pct(r.tally.latencies_ms, 50) / r.inproc.p50_ms for r in rows)
        print(
            f"target d={d}: >= 100 retrains/s -> best {best.rate:.1f} ({best.encoding}, K={best.clients}, "
            f"W={best.workers}): {'MET' if best.rate >= 100 else 'NOT MET'}"
        )
        print(
            f"target d={d}: p50 latency <= 2x pure training -> best {ratio:.1f}x: "
            f"{'MET' if ratio <= 2 else 'NOT MET'}"
        )
    total = sum(ok.values())
    lost = [p for p in problems if "registry" in p or "counters" in p]
    verdict = "MISMATCH" if lost else "all equal to the 2xx responses"
    print(f"registry counters: {verdict} ({total} retrains stored over {len(ok)} devices, warm-up included)")
    if problems:
        print(f"problems ({len(problems)}):")
        for p in problems[:40]:
            print(f"  {p}")
    else:
        print("no non-2xx responses, nothing lost")

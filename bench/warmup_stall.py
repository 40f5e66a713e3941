"""A device stuck in warm-up against one still filling its first window: µs per sample in
``DeviceSession.handle``, the two in the same run.

A device whose first window is full but cannot train (no labels, one class, labels in another encoding,
the cloud refusing the first model) asks at every sample whether it can train now. Each sample of such a
device should cost what a warming sample costs, whatever the window's size.

    .venv/bin/python bench/warmup_stall.py [--warmup 200,2000] [--samples 5000] [--json PATH] [--quick]

Single-sample messages, d = 5, unlabeled (a device whose labels never come), no cloud: ``warming`` is the
first ``warmup`` samples (the window fills), ``stuck`` the ``--samples`` after it. Best of ``--repeat``
runs. To compare with another tree, put its ``edge_agent`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from edgedrift_edge.session.device_session import DeviceSession, SessionConfig


def run(warmup: int, samples: int) -> dict[str, float]:
    """µs per sample while the window fills, then while it is full and stuck."""
    session = DeviceSession(
        SessionConfig(device_id="dev-b", warmup_samples=warmup), lambda _r: None, time.monotonic
    )
    bodies = [
        json.dumps({"id": i, "x": [i % 7 / 7, 0.5, 1.0, -1.0, i % 3]}).encode()
        for i in range(warmup + samples)
    ]
    t0 = time.perf_counter()
    for body in bodies[:warmup]:
        session.handle("samples", body)
    t1 = time.perf_counter()
    for body in bodies[warmup:]:
        session.handle("samples", body)
    t2 = time.perf_counter()
    assert session.phase == "warmup" and session.warmup_state() is not None
    return {"warming_us": (t1 - t0) / warmup * 1e6, "stuck_us": (t2 - t1) / samples * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--warmup", default="200,2000", help="warm-up window sizes (comma-separated)")
    parser.add_argument("--samples", type=int, default=5000, help="samples handled while stuck")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true", help="one small run (the smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.warmup, args.samples, args.repeat = "50", 200, 1
    rows: list[dict[str, Any]] = []
    print(f"{'warmup_samples':>14} {'warming µs/sample':>18} {'stuck µs/sample':>16} {'stuck / warming':>16}")
    for warmup in (int(w) for w in args.warmup.split(",")):
        best = [run(warmup, args.samples) for _ in range(args.repeat)]
        row = {"warmup_samples": warmup, **{k: min(b[k] for b in best) for k in best[0]}}
        row["ratio"] = row["stuck_us"] / row["warming_us"]
        rows.append(row)
        print(f"{warmup:>14} {row['warming_us']:>18.1f} {row['stuck_us']:>16.1f} {row['ratio']:>15.1f}x")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()

"""The gateway's per-device work in process: ``DeviceSession.handle`` per sample, compiled kernels against
the numpy/Python reference (``EDGEDRIFT_NO_KERNELS=1``) in the same run.

``--devices`` sessions (the gateway's defaults: druid, d = 5 from ELEC2, 200-sample warm-up, the
900-entry recent samples) are warmed up with 300 samples each, then fed ``--rounds`` rounds of one
message per device (``--batch`` samples, every 10th labeled inline), round-robin as a gateway sees them.
Payloads are encoded before the clock starts. No MQTT, no threads: the session's own cost.

Timing (default): µs per sample inside ``handle``, best of ``--repeat`` child processes per variant.
``--modes`` compares the sessions' ``batch_mode``: ``exact`` (per-sample semantics, the default: each
labeled sample of a message is learned before the next is predicted) and ``vectorised`` (the opt-in that
predicts a message with the state at its start).
``--callgrind``: instructions per sample instead, counted by valgrind (repeatable whatever else the
machine does): each variant runs twice, with ``--rounds`` and with 3x as many, and the difference is
divided by the extra samples (warm-up and start-up cancel out; the payloads are read from a file).

    python bench/session_cost.py                           # batches of 100, 1,000 devices, timing
    python bench/session_cost.py --batch 1 --rounds 30     # single-sample messages
    python bench/session_cost.py --devices 100 --rounds 3 --callgrind [--batch 1 --rounds 20]
    python bench/session_cost.py --quick                   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from footprint import gateway_sessions, prepare

WARM = 300
LABEL_EVERY = 10


def payloads(
    X: np.ndarray, y: np.ndarray, devices: int, batch: int, rounds: int, start: int
) -> list[list[bytes]]:
    """``rounds`` rounds of one message per device, sample ids from ``start``, every 10th labeled."""
    n = len(y) - 2000
    out: list[list[bytes]] = []
    for r in range(rounds):
        row: list[bytes] = []
        for i in range(devices):
            items: list[dict[str, Any]] = []
            for k in range(batch):
                sid = start + r * batch + k
                j = 2000 + (i * 7919 + sid) % n
                item: dict[str, Any] = {"id": sid, "x": X[j].tolist()}
                if sid % LABEL_EVERY == 0:
                    item["y"] = float(y[j])
                items.append(item)
            row.append(json.dumps({"samples": items} if batch > 1 else items[0]).encode())
        out.append(row)
    return out


def child(data: Path, devices: int, batch: int, rounds: int, mode: str) -> dict[str, Any]:
    """In the child: build and warm the sessions (``batch_mode`` ``mode``), then time ``rounds`` rounds."""
    sessions, X, y = gateway_sessions(data, devices, {"batch_mode": mode})
    for row in payloads(X, y, devices, 1, WARM, 0):
        for session, payload in zip(sessions, row, strict=True):
            session.handle("samples", payload)
    cached = data / f"payloads-{devices}-{batch}-{rounds}.pickle"
    if cached.exists():
        measured = pickle.loads(cached.read_bytes())
    else:
        measured = payloads(X, y, devices, batch, rounds, WARM)
    start = time.perf_counter()
    for row in measured:
        for session, payload in zip(sessions, row, strict=True):
            session.handle("samples", payload)
    elapsed = time.perf_counter() - start
    predictions = sum(s.counters.predictions for s in sessions)
    return {"us_per_sample": elapsed / (rounds * devices * batch) * 1e6, "predictions": predictions}


def run_child(
    data: Path, args: argparse.Namespace, kernels: bool, rounds: int, valgrind: bool, mode: str
) -> dict[str, Any]:
    env = {**os.environ, "EDGEDRIFT_NO_KERNELS": "" if kernels else "1", "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, __file__, "--child", str(data), "--devices", str(args.devices)]
    cmd += ["--batch", str(args.batch), "--rounds", str(rounds), "--batch-mode", mode]
    if valgrind:
        cmd = ["setarch", "-R", "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if valgrind:
        line = next(v for v in done.stderr.splitlines() if "Collected :" in v)
        out["instructions"] = int(line.split("Collected :")[1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100, help="samples per message (1: single messages)")
    parser.add_argument("--rounds", type=int, default=5, help="messages per device, measured")
    parser.add_argument("--repeat", type=int, default=3, help="timing: child processes per variant (best)")
    parser.add_argument("--callgrind", action="store_true", help="count instructions with valgrind instead")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 devices, 2 rounds")
    parser.add_argument(
        "--modes",
        default="exact,vectorised",
        help="the sessions' batch_mode values to compare (exact: per-sample semantics, the default)",
    )
    parser.add_argument("--batch-mode", default="exact", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.devices, args.batch, args.rounds, args.batch_mode)))
        return
    if args.quick:
        args.devices, args.rounds, args.repeat = 20, 2, 1
    if args.callgrind and shutil.which("valgrind") is None:
        sys.exit("--callgrind needs valgrind on PATH")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="edgedrift-session-cost-") as tmp:
        data = Path(tmp)
        prepare(data)
        X, y = np.load(data / "X.npy"), np.load(data / "y.npy")
        counts = (args.rounds, 3 * args.rounds)
        for rounds in counts:  # the same payloads for every variant, read by the children
            measured = payloads(X, y, args.devices, args.batch, rounds, WARM)
            (data / f"payloads-{args.devices}-{args.batch}-{rounds}.pickle").write_bytes(
                pickle.dumps(measured)
            )
        for mode, kernels in [(m, k) for m in args.modes.split(",") for k in (True, False)]:
            name = f"{'compiled kernels' if kernels else 'numpy/Python reference'}, {mode}"
            row: dict[str, Any] = {
                "variant": name,
                "devices": args.devices,
                "batch": args.batch,
                "mode": mode,
            }
            if args.callgrind:
                few, many = (run_child(data, args, kernels, r, True, mode) for r in counts)
                extra = (counts[1] - counts[0]) * args.devices * args.batch
                row["instructions_per_sample"] = (many["instructions"] - few["instructions"]) / extra
            else:
                runs = [run_child(data, args, kernels, args.rounds, False, mode) for _ in range(args.repeat)]
                row["us_per_sample"] = min(r["us_per_sample"] for r in runs)
                row["predictions"] = runs[0]["predictions"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    key = "instructions_per_sample" if args.callgrind else "us_per_sample"
    unit, digits = ("instructions", 0) if args.callgrind else ("µs", 2)
    title = f"{args.devices} devices, messages of {args.batch}, d = 5, druid"
    print(f"\n## DeviceSession.handle per sample: {title}\n")
    print(f"| variant | {unit} per sample | ratio to the reference ({rows[1]['variant']}) |")
    print("|---|---:|---:|")
    for row in rows:
        print(f"| {row['variant']} | {row[key]:,.{digits}f} | {row[key] / rows[1][key]:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()

"""Run every fault scenario once against real processes and print (and optionally write) the ledger.

    .venv/bin/python bench/faults.py [--json PATH] [--only NAME,NAME] [--quick] [--tls]

Each scenario (edgedrift_harness.faults) starts from the same lab: Mosquitto with the shipped configuration,
the cloud trainer under uvicorn on SQLite, and ``edgedrift-edge run`` subprocesses. ``lost`` = published −
predicted − rejected − dropped; it is 0 for every scenario except a broker SIGKILL, where Mosquitto 2.0
keeps everything up to its last save (at most ``autosave_interval`` messages are lost). ``--quick``
runs three scenarios (the smoke run of the test suite). ``--tls``: every agent connects over mutual TLS with
its own device certificate to the shipped TLS listener (deploy/mosquitto/tls.conf, certificates made by
deploy/mosquitto/make-certs.sh) instead of with a password over TCP.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from edgedrift_harness.faults import SCENARIOS, FaultLab, Ledger
from edgedrift_harness.results import write_json

QUICK = ("agent_sigkill", "bad_items_100k", "crafted_checkpoint")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="write {'scenarios': [...]} here")
    parser.add_argument("--only", help="comma-separated scenario names (default: all)")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument(
        "--tls",
        action="store_true",
        help="agents connect over mutual TLS with a device certificate (the shipped TLS listener)",
    )
    args = parser.parse_args(argv)
    names = list(QUICK) if args.quick else (args.only.split(",") if args.only else list(SCENARIOS))
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    rows: list[Ledger] = []
    started = time.monotonic()
    transport: Literal["tcp", "tls"] = "tls" if args.tls else "tcp"
    with (
        tempfile.TemporaryDirectory(prefix="edgedrift-faults-") as tmp,
        FaultLab(Path(tmp), transport=transport) as lab,
    ):
        print(f"agents connect over {'mutual TLS (device certificates)' if args.tls else 'TCP (passwords)'}")
        header = ("scenario", "published", "predicted", "rejected", "dropped", "lost", "s")
        print("{:<28} {:>9} {:>9} {:>8} {:>7} {:>5} {:>6}".format(*header))
        for name in names:
            result = SCENARIOS[name](lab)
            rows.append(result)
            print(
                f"{name:<28} {result.published:>9} {result.predicted:>9} {result.rejected:>8} "
                f"{result.dropped:>7} {result.lost:>5} {result.seconds:>6.1f}  {result.checks}",
                flush=True,
            )
    print(f"{len(rows)} scenarios in {time.monotonic() - started:.0f} s")
    if args.json:
        write_json(args.json, {"transport": transport, "scenarios": [r.row() for r in rows]}, indent=1)
    exempt = {"broker_kill9_offline_agent"}
    return 0 if all(r.lost == 0 for r in rows if r.name not in exempt) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Run every fault scenario once against real processes and print (and optionally write) the ledger.

    .venv/bin/python bench/faults.py [--json PATH] [--only NAME,NAME] [--quick] [--tls]
                                     [--broker mosquitto|rabbitmq|both]

Each scenario (edgedrift_harness.faults) starts from the same lab: a broker with the shipped configuration
(Mosquitto, deploy/mosquitto; or RabbitMQ's MQTT plugin, deploy/rabbitmq), the cloud trainer under uvicorn
on SQLite, and ``edgedrift-edge run`` subprocesses. ``lost`` = published − predicted − rejected − dropped
must be 0 for every scenario on both brokers. The broker SIGKILL comes a second past Mosquitto's save window
(a save every second, up to 2 s apart: what a kill inside it loses is tested in
tests/integration/test_broker_durability.py); RabbitMQ keeps everything it acknowledged (durable sessions
on quorum queues). ``--broker both`` runs the scenarios on each broker in turn, in the
same run, and prints their tables one after the other. ``--tls``: every agent connects over mutual TLS
with its own device certificate to the broker's TLS listener (Mosquitto: deploy/mosquitto/tls.conf;
certificates made by deploy/mosquitto/make-certs.sh) instead of with a password over TCP. ``--quick``
runs three scenarios (the smoke run of the test suite).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from edgedrift_harness.faults import BROKERS, SCENARIOS, FaultLab, Ledger
from edgedrift_harness.results import write_json

QUICK = ("agent_sigkill", "bad_items_100k", "crafted_checkpoint")


def run_broker(broker: str, names: list[str], transport: Literal["tcp", "tls"]) -> list[Ledger]:
    """Every scenario of ``names`` once on a lab with ``broker``; the table printed as it goes."""
    rows: list[Ledger] = []
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="edgedrift-faults-") as tmp,
        FaultLab(Path(tmp), transport=transport, broker=broker) as lab,
    ):
        how = "mutual TLS (device certificates)" if transport == "tls" else "TCP (passwords)"
        print(f"broker: {broker}; agents connect over {how}")
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
    print(f"{len(rows)} scenarios on {broker} in {time.monotonic() - started:.0f} s\n")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--json", type=Path, help="write {'scenarios': [...]} here (each row names its broker)"
    )
    parser.add_argument("--only", help="comma-separated scenario names (default: all)")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument(
        "--broker",
        choices=[*BROKERS, "both"],
        default="mosquitto",
        help="the lab's broker (default mosquitto)",
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="agents connect over mutual TLS with a device certificate (the broker's TLS listener)",
    )
    args = parser.parse_args(argv)
    names = list(QUICK) if args.quick else (args.only.split(",") if args.only else list(SCENARIOS))
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    brokers = list(BROKERS) if args.broker == "both" else [args.broker]
    transport: Literal["tcp", "tls"] = "tls" if args.tls else "tcp"
    results = {broker: run_broker(broker, names, transport) for broker in brokers}
    if len(brokers) > 1:
        print("lost of acknowledged, per broker:")
        for i, name in enumerate(names):
            lost = ", ".join(f"{b} {results[b][i].lost}" for b in brokers)
            print(f"  {name:<28} {lost}")
    if args.json:
        rows = [{**r.row(), "broker": b} for b, ledgers in results.items() for r in ledgers]
        write_json(args.json, {"transport": transport, "scenarios": rows}, indent=1)
    ok = all(r.lost == 0 for ledgers in results.values() for r in ledgers)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

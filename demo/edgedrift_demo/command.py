"""The ``edgedrift demo`` parser, light to import: the demo (agents, harness, evaluator) is imported when
the command runs (``edgedrift_demo.demo.demo``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from edgedrift.cli import Formatter, lazy

#: The demo's devices, one stream each.
DEVICES = ("elec2", "sine", "ridge")
#: Warm-up samples of every device (the DRUiD protocol's window).
WARMUP = 2000
QUICK_LIMIT = 10_000


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``edgedrift demo`` subcommand (entry-point group ``edgedrift.commands``)."""
    p = sub.add_parser(
        "demo",
        help="broker + cloud trainer + edge agents on this machine, checked against the offline evaluator",
        description="Broker, cloud trainer and edge agents on this machine, checked against the offline "
        "evaluator.",
        formatter_class=Formatter,
    )
    p.add_argument(
        "--devices",
        default=",".join(DEVICES),
        help=f"comma-separated subset of {','.join(DEVICES)} (default: all)",
    )
    p.add_argument("--limit", type=int, help=f"samples per stream (default: all; > {WARMUP}, the warm-up)")
    p.add_argument("--quick", action="store_true", help=f"{QUICK_LIMIT:,} samples per stream")
    p.add_argument(
        "--rate", type=float, default=0.0, help="samples/s per device (default 0: as fast as possible)"
    )
    p.add_argument("--workdir", type=Path, default=Path("out/demo"), help="registry, logs, summary")
    p.add_argument("--broker-url", help="use this MQTT broker (mqtt://host:port) instead of starting one")
    p.add_argument(
        "--broker",
        choices=["auto", "mosquitto", "embedded"],
        default="auto",
        help="which broker to start: Mosquitto when installed (auto), or the embedded amqtt one",
    )
    p.add_argument(
        "--keep-serving",
        action="store_true",
        help="after the table, keep the cloud trainer (and its dashboard) up until Ctrl-C",
    )
    p.set_defaults(func=lazy("edgedrift_demo.demo:demo"))

"""What a gateway's ``/metrics`` costs: its number of series and the time of a scrape for N devices, and the
latency histogram's cost per message handled (the only per-message work the metrics add).

The gateway is an :class:`~edgedrift_edge.agent.EdgeAgent` with N devices built but not connected (no
broker needed: the scrape reads the same counters a running gateway's does), each device's latency
child observed once; the scrape is ``generate_latest`` of its registry, as the HTTP handler runs it.

    python bench/edge_metrics.py                     # 1,000 devices, the default label cap (100)
    python bench/edge_metrics.py --devices 100 --labels 100
    python bench/edge_metrics.py --quick             # 50 devices (the smoke run)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.settings import AgentSettings
from edgedrift_harness.results import write_json


def measure(devices: int, labels: int, repeat: int, workdir: Path) -> dict[str, Any]:
    settings = AgentSettings.model_validate(
        {
            "gateway_id": "gw-bench",
            "devices": ",".join(f"b-{i}" for i in range(devices)),
            "checkpoint_dir": str(workdir),
            "metrics_port": 0,
            "metrics_device_labels": labels,
        }
    )
    agent = EdgeAgent(settings)
    metrics = agent.metrics
    assert metrics is not None
    for device in agent.devices:
        metrics.observe(device, 0.001)
    times = []
    text = ""
    for _ in range(repeat):
        started = time.perf_counter()
        text = generate_latest(metrics.registry).decode()
        times.append((time.perf_counter() - started) * 1000)
    series = sum(1 for line in text.splitlines() if line and line[0] != "#")
    number = 200_000
    observe_us = timeit.timeit(lambda: metrics.observe("b-0", 0.001), number=number) / number * 1e6
    return {
        "devices": devices,
        "labels": labels,
        "series": series,
        "scrape_p50_ms": statistics.median(times),
        "scrape_max_ms": max(times),
        "bytes": len(text),
        "observe_us": observe_us,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--labels", type=int, default=100, help="metrics_device_labels")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="50 devices, 3 scrapes")
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args(argv)
    if args.quick:
        args.devices, args.repeat = 50, 3
    with tempfile.TemporaryDirectory(prefix="edge-metrics-") as workdir:
        result = measure(args.devices, args.labels, args.repeat, Path(workdir))
    print(
        f"{result['devices']} devices, {result['labels']} device labels: {result['series']} series, "
        f"{result['bytes']} bytes; scrape p50 {result['scrape_p50_ms']:.1f} ms, max "
        f"{result['scrape_max_ms']:.1f} ms; observe {result['observe_us']:.2f} µs per message"
    )
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

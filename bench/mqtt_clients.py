"""Which MQTT client can carry a gateway: each candidate receives QoS-1 samples spread over N device topics,
spends ``--work-us`` of Python per sample (standing in for the session), publishes a QoS-1 prediction and
acknowledges the sample once the broker confirmed the prediction. Measured against the bare paho
JSON-decoding subscriber (the peer of ``bench/mqtt_ingest.py``) on the same Mosquitto, in the same run,
right before each candidate.

    python bench/mqtt_clients.py                       # all candidates, 30 µs of work, 1,000 devices
    python bench/mqtt_clients.py --work-us 0 --json out/mqtt_clients.json
    python bench/mqtt_clients.py --quick               # smoke run (~30 s)

The candidates are in ``bench/ingest/clients.py`` (gmqtt only when it is installed). What was chosen and
why: docs/benchmarks-history.md, section 6, "Choosing the MQTT client" (paho-mqtt replaced that choice
in issue 29).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ingest.data import Data
from ingest.phases import wait_count
from ingest.publisher import Publisher
from ingest.sink import Sink

from edgedrift_harness.mosquitto import local_mosquitto
from edgedrift_harness.results import write_json

CLIENTS = Path(__file__).resolve().parent / "ingest" / "clients.py"


def timed(pub: Publisher, packets: list[bytes], sink: Sink, samples: int, window: int) -> float:
    """Samples per second from the first publish to the last one the sink counted."""
    before = sink.read()
    t0, _, _ = pub.run(packets, lambda: sink.read().msgs - before.msgs, window)
    after = wait_count(sink, before.samples + samples, idle=30)
    return (after.samples - before.samples) / (after.t_last - t0)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work-us", type=float, default=30.0, help="µs of Python per single message")
    parser.add_argument("--devices", type=int, default=1000, help="device topics the messages spread over")
    parser.add_argument("--samples", type=int, default=60_000, help="single-sample messages per phase")
    parser.add_argument("--clients", default="paho-threaded,paho-loop,gmqtt,edgedrift")
    parser.add_argument("--quick", action="store_true", help="smoke run: 5,000 messages per phase")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    n = 5_000 if args.quick else args.samples
    kinds = [k for k in args.clients.split(",") if k != "gmqtt" or importlib.util.find_spec("gmqtt")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with local_mosquitto(work / "broker", persistence=False) as broker:
            pub = Publisher(broker.port, 1)
            data = Data(len(kinds) * 4 * n, 5, 0)
            peer = Sink(work, broker.url, "peer/samples", 1, "samples")
            preds = Sink(work, broker.url, "edgedrift/+/predictions", 1, "predictions")
            topics = [f"edgedrift/dev-{i}/samples" for i in range(args.devices)]
            try:
                for kind in kinds:
                    cmd = [sys.executable, str(CLIENTS), kind, str(broker.port), str(args.work_us)]
                    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
                    try:
                        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
                        time.sleep(0.5)
                        peer_rate = timed(pub, pub.encode(peer.topic, data.take(n, 1)), peer, n, 2000)
                        rate = timed(pub, pub.encode_spread(topics, data.take(n, 1)), preds, n, 2000)
                        batched = timed(
                            pub, pub.encode_spread(topics, data.take(2 * n, 100)), preds, 2 * n, 200
                        )
                    finally:
                        proc.terminate()
                        proc.wait(10)
                    row = {
                        "client": kind,
                        "work_us": args.work_us,
                        "devices": args.devices,
                        "msgs_per_s": rate,
                        "peer_msgs_per_s": peer_rate,
                        "ratio": rate / peer_rate,
                        "batched_samples_per_s": batched,
                    }
                    rows.append(row)
                    print(
                        f"{kind:14s} {rate:9,.0f} msg/s  peer {peer_rate:9,.0f}  "
                        f"ratio {rate / peer_rate:.2f}  batches of 100: {batched:9,.0f} samples/s",
                        flush=True,
                    )
            finally:
                peer.stop()
                preds.stop()
                pub.close()
    print(f"\nwork per message: {args.work_us:g} µs; {args.devices} device topics")
    print("| client | msg/s | peer msg/s | ratio | batches of 100: samples/s |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['client']} | {r['msgs_per_s']:,.0f} | {r['peer_msgs_per_s']:,.0f} | {r['ratio']:.2f} "
            f"| {r['batched_samples_per_s']:,.0f} |"
        )
    if args.json is not None:
        write_json(args.json, {"runs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

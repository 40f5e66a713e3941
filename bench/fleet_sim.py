"""Fleet simulator: N devices through G gateway processes on one Mosquitto, the cloud on PostgreSQL.

    .venv/bin/python bench/fleet_sim.py --devices 10000 --gateways 10 [--json PATH] [--quick]

Every device gets its own seeded Sine1+ stream (seed = its index); every stream changes concept at the
same sample (``--drift-at``): a fleet-wide drift. Samples go out in rounds, one batch message of
``--batch`` samples per device per round, unlabeled; every ``--label-every``-th sample's label follows
``--label-delay`` samples later on the device's labels topic. The gateways are provisioned through the
cloud's gateway API (each fetches its devices and their secrets with its own credential) and run
``edgedrift-edge run`` as deployed; the cloud runs with the fleet recompute budget ``--budget`` per
minute (``EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_MINUTE``).

Reported: the per-device ledger (published = predicted + rejected + dropped, lost = the rest, from what
the gateways published on MQTT), the recomputes per device from the cloud (the first model and those
after the drift), the budget's admitted/rejected counters, how long the fleet took to absorb the drift,
and the total VmRSS of the gateway processes (peak and at the end).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import secrets
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from ingest.publisher import Publisher

from edgedrift.data.generators import sine1plus
from edgedrift_harness.agent import AgentProcess
from edgedrift_harness.cloud import CloudProcess
from edgedrift_harness.mosquitto import local_mosquitto
from edgedrift_harness.mqtt import PredictionCollector, Subscriber
from edgedrift_harness.postgres import fresh_database, postgres_server
from edgedrift_harness.proc import rss_mb
from edgedrift_harness.results import write_json

OPERATOR = "fleet-operator-" + secrets.token_hex(16)


@dataclass
class Summary:
    """The run's figures (``--json``)."""

    devices: int
    gateways: int
    samples_per_device: int
    published: int
    predicted: int
    rejected: int
    dropped: int
    lost: int
    devices_with_ledger_gap: int
    devices_with_first_model: int
    devices_recomputed_after_drift: int
    recomputes_total: int
    budget_per_minute: int
    budget_admitted: float
    budget_rejected: float
    publish_seconds: float
    absorb_seconds: float
    gateways_rss_peak_mb: float
    gateways_rss_end_mb: float


class Ledger(Subscriber):
    """Per device: samples rejected (``rejected`` events) and dropped (the retained status' counters)."""

    def __init__(self, url: str) -> None:
        self.rejected: Counter[str] = Counter()
        self.dropped: dict[str, int] = {}
        super().__init__(url, [("edgedrift/+/events", 1), ("edgedrift/+/status", 1)], reconnect=(1, 30))

    def handle(self, topic: str, payload: bytes) -> None:
        device, kind = topic.split("/")[1:3]
        if not payload:
            return
        body = json.loads(payload)
        with self.lock:
            if kind == "events" and body.get("type") == "rejected" and body.get("topic") == "samples":
                self.rejected[device] += int(body["count"])
            elif kind == "status" and isinstance(body.get("counters"), dict):
                self.dropped[device] = int(body["counters"].get("dropped", 0))


def streams(n_devices: int, length: int, drift_at: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """(X[device, sample, feature], y[device, sample]): seeded per device, all drifting at ``drift_at``."""
    X = np.empty((n_devices, length, d))
    y = np.empty((n_devices, length))
    concepts = math.ceil(length / drift_at)
    for i in range(n_devices):
        s = sine1plus(d=d, n_concepts=concepts, concept_length=drift_at, seed=i)
        X[i], y[i] = s.X[:length], s.y[:length]
    return X, y


def round_messages(
    pub: Publisher, devices: list[str], X: np.ndarray, y: np.ndarray, lo: int, hi: int, every: int, delay: int
) -> list[bytes]:
    """One round: samples [lo, hi) of every device (unlabeled) and the labels now due (ids < hi - delay)."""
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    topics: list[str] = []
    payloads: list[bytes] = []
    first_label, last_label = max(0, lo - delay), max(0, hi - delay)
    for i, device in enumerate(devices):
        rows = X[i, lo:hi].round(6).tolist()
        samples = [{"id": lo + j, "x": row} for j, row in enumerate(rows)]
        topics.append(f"edgedrift/{device}/samples")
        payloads.append(dumps({"samples": samples}).encode())
        labels = [{"id": k, "y": float(y[i, k])} for k in range(first_label, last_label) if k % every == 0]
        if labels:
            topics.append(f"edgedrift/{device}/labels")
            payloads.append(dumps({"labels": labels}).encode())
    out = []
    for topic, payload in zip(topics, payloads, strict=True):
        out.extend(pub.encode(topic, [payload]))
    return out


def metric(text: str, name: str) -> float:
    """The sum of every sample of metric ``name`` in a Prometheus exposition."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def cloud_recomputes(op: httpx.Client) -> dict[str, dict[str, Any]]:
    """Every device's counters at the cloud, by id."""
    out: dict[str, dict[str, Any]] = {}
    offset, failures = 0, 0
    while True:
        try:
            reply = op.get("/v1/devices", params={"limit": 1000, "offset": offset}, timeout=30)
        except httpx.TimeoutException:
            reply = httpx.Response(504)
        if reply.status_code >= 500 and failures < 5:  # a busy database: ask again, a few times
            failures += 1
            time.sleep(1.0)
            continue
        page = reply.raise_for_status().json()
        out.update({c["device_id"]: c for c in page})
        if len(page) < 1000:
            return out
        offset += 1000


def run(args: argparse.Namespace, workdir: Path, database_url: str) -> Summary:
    n, g = args.devices, args.gateways
    devices = [f"fd-{i:05d}" for i in range(n)]
    print(f"generating {n:,} streams of {args.samples} samples (drift at {args.drift_at}) ...", flush=True)
    X, y = streams(n, args.samples, args.drift_at, args.d)
    broker = local_mosquitto(workdir / "broker", persistence=False).start()
    cloud = CloudProcess(
        database_url,
        workdir,
        operator_token=OPERATOR,
        workers=args.cloud_workers,
        log_path=workdir / "cloud.log",
        env={
            "EDGEDRIFT_CLOUD_LOG_LEVEL": args.cloud_log_level,
            "EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_MINUTE": str(args.budget),
        },
    )
    gateways: list[AgentProcess] = []
    op = httpx.Client(
        base_url="http://127.0.0.1", headers={"Authorization": f"Bearer {OPERATOR}"}, timeout=300
    )
    try:
        cloud.start(120)
        op.base_url = httpx.URL(cloud.url)
        for k in range(g):
            gid = f"fleet-gw-{k}"
            secret = op.put(f"/v1/gateways/{gid}").raise_for_status().json()["secret"]
            part = devices[k::g]
            for lo in range(0, len(part), 5000):
                op.post(
                    f"/v1/gateways/{gid}/devices", json={"devices": part[lo : lo + 5000]}
                ).raise_for_status()
            values = {
                "gateway_id": gid,
                "gateway_secret": secret,
                "broker_url": broker.url,
                "cloud_url": cloud.url,
                "strategy": "druid",
                "n_features": args.d,
                "warmup_samples": args.warmup,
                "window_labels": args.window_labels,
                "C": args.C,
                "recent_samples": max(4 * args.label_delay, 2 * args.batch) + 100,
                "heartbeat_every_s": 60,
                "checkpoint_every_s": 3600,
                "gateway_sync_s": 300,
                "http_timeout_s": 60,
                "log_level": "WARNING",
                "checkpoint_dir": workdir / "state",
            }
            gateways.append(AgentProcess(workdir / f"{gid}.log", values).spawn())
        for gateway in gateways:
            gateway.wait_ready(600)
        print(f"{g} gateways ready ({n:,} devices)", flush=True)
        collector = PredictionCollector(broker.url, dict.fromkeys(devices, args.samples))
        ledger = Ledger(broker.url)
        peak = [0.0]
        stop = threading.Event()

        def watch_rss() -> None:
            while not stop.wait(1.0):
                try:
                    peak[0] = max(peak[0], sum(rss_mb(a.pid) for a in gateways))
                except FileNotFoundError:  # a gateway is gone: the ledger will show it
                    return

        threading.Thread(target=watch_rss, daemon=True).start()
        pub = Publisher(broker.port, 1)
        t0 = time.monotonic()
        t_drift = math.nan
        for lo in range(0, args.samples, args.batch):
            hi = min(args.samples, lo + args.batch)
            if lo <= args.drift_at < hi:
                t_drift = time.monotonic()
            pub.run(round_messages(pub, devices, X, y, lo, hi, args.label_every, args.label_delay))
            expected = n * lo  # at most one round outstanding
            deadline = time.monotonic() + 600
            while sum(collector.count.values()) < expected and time.monotonic() < deadline:
                time.sleep(0.05)
            print(
                f"  round {lo // args.batch + 1}: samples up to {hi}, {time.monotonic() - t0:.0f} s",
                flush=True,
            )
        deadline = time.monotonic() + 600
        total = n * args.samples
        while sum(collector.count.values()) < total and time.monotonic() < deadline:
            time.sleep(0.2)
        publish_s = time.monotonic() - t0
        # absorbed: every device that had a model has asked for (and got) one after the drift, or the
        # counts stopped moving for a minute
        last, since = -1, time.monotonic()
        while time.monotonic() - since < args.settle_s:
            counters = cloud_recomputes(op)
            done = sum(c["recomputes"] for c in counters.values())
            if done != last:
                last, since = done, time.monotonic()
                print(f"  {done:,} recomputes at the cloud, {time.monotonic() - t0:.0f} s", flush=True)
            time.sleep(5)
        absorb_s = since - t_drift if not math.isnan(t_drift) else math.nan
        end_rss = sum(rss_mb(a.pid) for a in gateways)
        stop.set()
        text = op.get("/metrics").text
        counters = cloud_recomputes(op)
        predicted = dict(collector.count)
        gaps = 0
        for device in devices:
            if predicted[device] + ledger.rejected[device] + ledger.dropped.get(device, 0) != args.samples:
                gaps += 1
        rejected = sum(ledger.rejected.values())
        dropped = sum(ledger.dropped.values())
        first = sum(1 for d in devices if counters.get(d, {}).get("recomputes", 0) >= 1)
        after = sum(1 for d in devices if counters.get(d, {}).get("recomputes", 0) >= 2)
        collector.close()
        ledger.close()
        pub.close()
        return Summary(
            devices=n,
            gateways=g,
            samples_per_device=args.samples,
            published=total,
            predicted=sum(predicted.values()),
            rejected=rejected,
            dropped=dropped,
            lost=total - sum(predicted.values()) - rejected - dropped,
            devices_with_ledger_gap=gaps,
            devices_with_first_model=first,
            devices_recomputed_after_drift=after,
            recomputes_total=sum(c.get("recomputes", 0) for c in counters.values()),
            budget_per_minute=args.budget,
            budget_admitted=metric(text, "edgedrift_recompute_admitted_total"),
            budget_rejected=metric(text, "edgedrift_recompute_rejected_total"),
            publish_seconds=publish_s,
            absorb_seconds=absorb_s,
            gateways_rss_peak_mb=max(peak[0], end_rss),
            gateways_rss_end_mb=end_rss,
        )
    finally:
        for gateway in gateways:
            gateway.stop(60)
        op.close()
        cloud.stop()
        broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--gateways", type=int, default=10)
    parser.add_argument("--samples", type=int, default=600, help="samples per device")
    parser.add_argument("--drift-at", type=int, default=300, help="the sample at which every stream drifts")
    parser.add_argument("--warmup", type=int, default=100, help="warm-up samples per device")
    parser.add_argument("--window-labels", type=int, default=20)
    parser.add_argument(
        "--batch", type=int, default=50, help="samples per message (one message per device per round)"
    )
    parser.add_argument("--label-every", type=int, default=2)
    parser.add_argument(
        "--label-delay", type=int, default=25, help="labels follow their sample this many samples later"
    )
    parser.add_argument("--d", type=int, default=5)
    parser.add_argument("--C", default="1.0", help="C of the batch models (auto: tuned per device, slower)")
    parser.add_argument("--budget", type=int, default=3000, help="fleet recomputes per minute")
    parser.add_argument("--cloud-workers", type=int, default=2)
    parser.add_argument("--cloud-log-level", default="WARNING", help="INFO logs every request")
    parser.add_argument(
        "--settle-s", type=float, default=60.0, help="recompute counts unchanged this long = settled"
    )
    parser.add_argument("--sqlite", action="store_true", help="the cloud on SQLite instead of PostgreSQL")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--keep", type=Path, help="keep the gateways' and the cloud's logs and state here")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 40 devices, 2 gateways, 300 samples, every label"
    )
    args = parser.parse_args()
    if args.quick:
        args.devices, args.gateways, args.samples, args.drift_at, args.settle_s = 40, 2, 300, 150, 10.0
        args.label_every = 1
    with contextlib.ExitStack() as stack:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            workdir = args.keep.resolve()  # the broker and the gateways run from other directories
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="edgedrift-fleet-")))
        if args.sqlite:
            args.cloud_workers = 1
            summary = run(args, workdir, f"sqlite:///{workdir / 'registry.db'}")
        else:
            with postgres_server() as admin, fresh_database(admin) as url:
                summary = run(args, workdir, url)
    row = asdict(summary)
    for key, value in row.items():
        print(f"{key:<32} {value:,.1f}" if isinstance(value, float) else f"{key:<32} {value:,}")
    if args.json is not None:
        write_json(args.json, row, indent=1)
    ok = summary.lost == 0 and summary.devices_with_ledger_gap == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

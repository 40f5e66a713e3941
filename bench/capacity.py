"""Capacity plan: what serves 100,000 and 1,000,000 devices, from measured per-component costs.

Two parts:

* **Storage, measured here.** A fresh PostgreSQL database (the server at ``$EDGEDRIFT_TEST_PG`` or a
  throwaway one) with the cloud's schema; ``--devices`` devices registered as the cloud registers them,
  ``--heartbeats`` heartbeats each as the agent sends them (its ``extra`` statistics included), stored
  with the cloud's bulk statements, ``--versions`` model versions each (a real LIBLINEAR document of
  a 200 × d window, stored with ``registry.store_model``) and one re-tuning history of ``--history``
  labels each (``history.store_batch``). After ``VACUUM ANALYZE``, each table's total size (heap, TOAST,
  indexes) divided by its rows: bytes per heartbeat, per version, per device row and per history label.
* **The plan, computed.** Per-component rates (``--rates``: a JSON file, default :data:`RATES`, each
  with the section of docs/benchmarks.md it comes from) and a fleet's behaviour (:data:`FLEET`, each
  an option) give, for ``--sizes`` devices: API workers for the heartbeats, training workers for the
  plain and the re-tuning recomputes, gateway processes for the samples, broker nodes for the messages,
  memory, and the database's size at the heartbeats' retention.

    python bench/capacity.py --json out/capacity.json          # 1,000 devices, 50 heartbeats each
    python bench/capacity.py --quick                           # smoke run: 50 devices
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import text

from edgedrift.training.window import train_window
from edgedrift.wire import Heartbeat, WindowHeader
from edgedrift_cloud import bulk, history, registry
from edgedrift_cloud.db.engine import make_engine, make_sessionmaker, upgrade
from edgedrift_harness.postgres import fresh_database, postgres_server
from edgedrift_harness.results import write_json

#: Per-component rates on these 2-core machines (docs/benchmarks.md; the section in ``source``).
RATES: dict[str, dict[str, Any]] = {
    "heartbeats_per_s_per_api_worker": {
        "value": 1000.0,
        "source": "Fleet recompute storm: 2,008 heartbeats/s stored by 2 workers (all offered) during the "
        "10,000-device storm; a lower bound, the offered rate, not the saturation",
    },
    "plain_recomputes_per_s_per_training_worker": {
        "value": 54.0,
        "source": "§5 trainer_load: 107-111 retrains/s at d = 5 with 2 workers (request path included)",
    },
    "retune_recomputes_per_s_per_training_worker": {
        "value": 0.5,
        "source": "issue 32: a re-tuning recompute costs 0.4-1.9 CPU-s at d = 5-54 (the upper end)",
    },
    "samples_per_s_per_gateway_process": {
        "value": 150_000.0,
        "source": "§6 mqtt_ingest, 1,000 devices, batches of 100, QoS 1 (per-sample semantics target)",
    },
    "gateway_rss_mb_per_1000_devices": {
        "value": 200.0,
        "source": "§6 mqtt_ingest: 192-204 MB after 1-3M samples at 1,000 devices",
    },
    "broker_msgs_per_s_per_node": {
        "value": 30_000.0,
        "source": "§6 mqtt_ingest's peer: 29.6-33.7k QoS-1 messages/s published and delivered through one "
        "Mosquitto (one core); with 50k-100k queued for an offline device the shipped persistence "
        "sustains only 1.3-2.5k/s (§11)",
    },
    "api_worker_rss_mb": {
        "value": 800.0,
        "source": "Fleet recompute storm: server RSS 1,611 MB for 2 workers under the 10,000-device storm",
    },
}

#: A fleet's behaviour: what each device does (each an option of the same name).
FLEET: dict[str, float] = {
    "heartbeat_every_s": 10.0,  # the agent's default
    "samples_per_s_per_device": 1.0,
    "samples_per_message": 10.0,
    "recomputes_per_device_per_hour": 1.0,
    "retune_share": 0.1,
    "heartbeat_retention_hours": 72.0,  # the cloud's default
    "versions_kept": 10.0,
    "history_labels": 2_000.0,
    "devices_per_gateway": 10_000.0,  # 2 GB of RSS at the measured 200 MB per 1,000 devices
}


def _heartbeat(i: int) -> Heartbeat:
    """A heartbeat as the agent's ``SessionReports.heartbeat`` fills it (a binary device)."""
    extra = {"phase": "running", "label_misses": i % 7, "duplicates": i % 3, "outliers": 0, "id_reused": 0}
    return Heartbeat(
        samples=100_000 + i,
        labeled=10_000 + i,
        accuracy=0.8123 + (i % 97) / 1e4,
        accuracy_window=1000,
        warnings=i % 2,
        drift_events=i % 5,
        recomputes_requested=i % 11,
        model_version=i % 13 + 1,
        dropped=0,
        rejected=i % 4,
        extra={**extra, "rmse": None},  # type: ignore[typeddict-item]
    )


def _document(d: int, seed: int) -> tuple[dict[str, Any], WindowHeader, int]:
    """A real model document: LIBLINEAR on a 200 × d window; (document, header, window bytes)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(200, d))
    y = np.where(X @ rng.normal(size=d) > 0, 1.0, -1.0)
    header = WindowHeader(task="classification", learner="logistic", reason="drift", monitor={"alpha": 0.05})
    return train_window(header, X, y).document, header, X.nbytes + y.nbytes


def _table_sizes(session: Any) -> dict[str, tuple[int, int]]:
    """(total bytes, rows) of every table of the schema."""
    names = session.scalars(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).all()
    out: dict[str, tuple[int, int]] = {}
    for name in names:
        size = session.scalar(text("SELECT pg_total_relation_size(:t)"), {"t": name})
        rows = session.scalar(text(f'SELECT count(*) FROM "{name}"'))
        out[name] = (int(size), int(rows))
    return out


def measure_storage(url: str, devices: int, beats: int, versions: int, labels: int, d: int) -> dict[str, Any]:
    """Fill a fresh database as a fleet would and divide each table's size by its rows."""
    engine = make_engine(url)
    upgrade(engine)
    sessions = make_sessionmaker(engine)
    ids = [f"cap-{i:06d}" for i in range(devices)]
    document, header, window_bytes = _document(d, 0)
    limits = history.HistoryLimits(labels=labels, bytes=64 * 2**20)
    rng = np.random.default_rng(1)
    Xh = rng.normal(size=(labels, d))
    yh = np.where(Xh[:, 0] > 0, 1.0, -1.0)
    started = time.perf_counter()
    with sessions() as session:
        bulk.register_devices(session, {device: f"secret-of-{device}-0123456789" for device in ids})
        session.commit()
        for r in range(beats):
            bulk.add_heartbeats(
                session, [(device, _heartbeat(r * devices + i)) for i, device in enumerate(ids)]
            )
            session.commit()
        for v in range(versions):
            for device in ids:
                registry.store_model(
                    session,
                    registry.NewModel(
                        device_id=device, document=document, kind="linear", learner="logistic",
                        task="classification", rebalance="none", chosen=None, scores=None, n=200, d=d,
                        train_ms=0.4, bytes_in=window_bytes, encoding="binary", reason="drift",
                        requested_by="device", monitor=dict(header.monitor), request_id=f"r-{v}",
                    ),
                )  # fmt: skip
            session.commit()
        for device in ids:
            history.store_batch(session, device, "h-0", Xh, yh, Xh.nbytes + yh.nbytes, limits)
        session.commit()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
    with sessions() as session:
        sizes = _table_sizes(session)
    engine.dispose()

    def per_row(table: str) -> float:
        size, rows = sizes[table]
        return size / rows if rows else 0.0

    device_tables = ("devices", "device_counters", "device_recompute_counters")
    return {
        "devices": devices,
        "heartbeats_per_device": beats,
        "versions_per_device": versions,
        "history_labels": labels,
        "d": d,
        "fill_s": round(time.perf_counter() - started, 1),
        "tables": {name: {"bytes": b, "rows": n} for name, (b, n) in sorted(sizes.items())},
        "bytes_per_heartbeat": round(per_row("heartbeats"), 1),
        "bytes_per_version": round(per_row("models"), 1),
        "bytes_per_history_label": round(sizes["history_chunks"][0] / (devices * labels), 1),
        "bytes_per_device_rows": round(sum(sizes[t][0] for t in device_tables if t in sizes) / devices, 1),
    }


def plan(
    storage: dict[str, Any], rates: dict[str, dict[str, Any]], fleet: dict[str, float], n: int
) -> dict[str, Any]:
    """What serves ``n`` devices: processes per role, cores, memory, database size, with the arithmetic."""
    rate = {k: float(v["value"]) for k, v in rates.items()}
    heartbeats_per_s = n / fleet["heartbeat_every_s"]
    recomputes_per_s = n * fleet["recomputes_per_device_per_hour"] / 3600.0
    retunes_per_s = recomputes_per_s * fleet["retune_share"]
    samples_per_s = n * fleet["samples_per_s_per_device"]
    messages_per_s = 2 * samples_per_s / fleet["samples_per_message"]  # samples in, predictions out
    api = math.ceil(heartbeats_per_s / rate["heartbeats_per_s_per_api_worker"])
    training = math.ceil(
        (recomputes_per_s - retunes_per_s) / rate["plain_recomputes_per_s_per_training_worker"]
        + retunes_per_s / rate["retune_recomputes_per_s_per_training_worker"]
    )
    gateways = max(
        math.ceil(samples_per_s / rate["samples_per_s_per_gateway_process"]), math.ceil(n / 10_000)
    )
    brokers = math.ceil(messages_per_s / rate["broker_msgs_per_s_per_node"])
    retained = fleet["heartbeat_retention_hours"] * 3600.0 / fleet["heartbeat_every_s"]
    per_device = (
        storage["bytes_per_device_rows"]
        + retained * storage["bytes_per_heartbeat"]
        + fleet["versions_kept"] * storage["bytes_per_version"]
        + fleet["history_labels"] * storage["bytes_per_history_label"]
    )
    memory_gb = (
        api * rate["api_worker_rss_mb"]
        + training * rate["api_worker_rss_mb"]
        + n / 1000.0 * rate["gateway_rss_mb_per_1000_devices"]
    ) / 1024.0
    return {
        "devices": n,
        "heartbeats_per_s": round(heartbeats_per_s),
        "recomputes_per_s": round(recomputes_per_s, 1),
        "retunes_per_s": round(retunes_per_s, 1),
        "samples_per_s": round(samples_per_s),
        "broker_messages_per_s": round(messages_per_s),
        "api_workers": api,
        "training_workers": training,
        "gateway_processes": gateways,
        "broker_nodes": brokers,
        "cores": api + training + gateways + brokers,
        "memory_gb": round(memory_gb, 1),
        "db_bytes_per_device": round(per_device),
        "db_gb": round(n * per_device / 1e9, 1),
        "db_gb_heartbeats": round(n * retained * storage["bytes_per_heartbeat"] / 1e9, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=1000, help="devices of the storage measurement")
    parser.add_argument("--heartbeats", type=int, default=50, help="heartbeats stored per device")
    parser.add_argument("--versions", type=int, default=5, help="model versions stored per device")
    parser.add_argument("--history", type=int, default=2000, help="history labels stored per device")
    parser.add_argument("--d", type=int, default=5, help="features of the models and the history")
    parser.add_argument("--sizes", default="100000,1000000", help="fleet sizes to plan for")
    parser.add_argument("--rates", type=Path, help="JSON file of per-component rates (default: RATES)")
    for name, value in FLEET.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=float, default=value, help=f"(default {value:g})"
        )
    parser.add_argument("--json", type=Path, help="write the storage figures and the plan here")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 50 devices, 5 heartbeats, 2 versions"
    )
    args = parser.parse_args()
    if args.quick:
        args.devices, args.heartbeats, args.versions = 50, 5, 2
    rates = json.loads(args.rates.read_text()) if args.rates else RATES
    fleet = {name: float(getattr(args, name)) for name in FLEET}
    with postgres_server() as admin, fresh_database(admin) as url:
        storage = measure_storage(url, args.devices, args.heartbeats, args.versions, args.history, args.d)
    plans = [plan(storage, rates, fleet, int(n)) for n in args.sizes.split(",")]
    print(json.dumps({"storage": storage, "plans": plans}, indent=1))
    print(
        "\n| devices | API workers | training workers | gateway processes | broker nodes | cores "
        "| memory GB | DB GB (of it heartbeats) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for p in plans:
        print(
            f"| {p['devices']:,} | {p['api_workers']} | {p['training_workers']} "
            f"| {p['gateway_processes']} | {p['broker_nodes']} | {p['cores']} | {p['memory_gb']} "
            f"| {p['db_gb']} ({p['db_gb_heartbeats']}) |"
        )
    if args.json:
        write_json(args.json, {"storage": storage, "rates": rates, "fleet": fleet, "plans": plans})


if __name__ == "__main__":
    main()

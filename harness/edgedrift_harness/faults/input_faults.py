"""Faults of the input: a message of wrong items, a batch above the item cap, outliers, a first sample of
the wrong width, reused sample ids."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from edgedrift_harness.faults.lab import FaultLab, Ledger, ledger, samples_topic, single_payloads, stream


def _bad_then_good(lab: FaultLab, name: str, bad: bytes, bad_count: int, **settings: Any) -> Ledger:
    """500 good samples, one bad message, 1,000 good samples: one summary event for the bad message,
    the good ones after it answered promptly."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 1500)
    agent = lab.agent(device, secret, n_features=2, **settings).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(500)))
        watch.wait_ids(range(500))
        sent = time.monotonic()
        pub.send(samples_topic(device), [bad], [[f"bad-{i}" for i in range(bad_count)]])
        pub.send(samples_topic(device), *single_payloads(s, range(500, 1500)))
        watch.wait_ids(range(1500), 120)
        answered_s = time.monotonic() - sent
        agent.stop()
        rejected_events = [e for e in watch.events("rejected") if e.get("topic") == "samples"]
        result = ledger(name, pub, watch, t0)
    result.checks = {
        "rejected_events": len(rejected_events),
        "reported_count": rejected_events[0]["count"] if rejected_events else None,
        "next_1000_answered_s": round(answered_s, 2),
    }
    return result


def bad_items_100k(lab: FaultLab) -> Ledger:
    """One message with 100,000 wrong items (under a raised cap, so each is checked): one event."""
    items = [{"id": i, "x": [1.0, 2.0, 3.0]} for i in range(100_000)]
    bad = json.dumps({"samples": items}).encode()
    return _bad_then_good(lab, "bad_items_100k", bad, len(items), max_items_per_message=200_000)


def oversized_batch_400k(lab: FaultLab) -> Ledger:
    """One 11 MB batch of 400,000 valid samples: refused whole by the item cap, with its count."""
    X = (np.random.default_rng(0).random((400_000, 2)) * 10).round(1).tolist()
    body = json.dumps(
        {"samples": [{"id": 10_000 + i, "x": x} for i, x in enumerate(X)]}, separators=(",", ":")
    )
    return _bad_then_good(lab, "oversized_batch_400k", body.encode(), 400_000)


def outlier(lab: FaultLab, value: float = 1e6) -> Ledger:
    """A labeled sample with ``value`` in every feature (default druid agent): predicted, reported, not
    learned; the stream goes on being predicted (accuracy is compared offline by the tests)."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 3000)
    agent = lab.agent(device, secret).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(1000)))
        watch.wait_ids(range(1000))
        watch.wait_event("model_installed", 120)  # running, so the guard screens (a busy cloud trains late)
        glitch = json.dumps({"id": "glitch", "x": [value, value], "y": 1.0}).encode()
        pub.send(samples_topic(device), [glitch], [["glitch"]])
        pub.send(samples_topic(device), *single_payloads(s, range(1000, 3000)))
        watch.wait_ids({*range(3000), "glitch"}, 120)
        event = watch.wait_event("outlier")
        agent.stop()
        glitch_pred = next(p for p in watch.predictions() if p["id"] == "glitch")
        result = ledger(f"outlier_{value:g}", pub, watch, t0)
    result.checks = {"outlier_event": event.get("count"), "flagged": glitch_pred.get("outlier")}
    return result


def wrong_width_first(lab: FaultLab) -> Ledger:
    """The first sample after start has one feature, the rest two; a restart in the middle."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 2000)
    agent = lab.agent(device, secret).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), [b'{"id": "first", "x": [0.0]}'], [["first"]])
        pub.send(samples_topic(device), *single_payloads(s, range(1000)))
        watch.wait_ids(range(1000))
        watch.wait_event("model_installed", 120)  # restarted running: the first model may come late
        agent.stop()
        agent.start()
        pub.send(samples_topic(device), *single_payloads(s, range(1000, 2000)))
        watch.wait_ids(range(2000))
        agent.stop()
        served = [p for p in watch.predictions() if isinstance(p["id"], int) and p["id"] >= 1000]
        result = ledger("wrong_width_first", pub, watch, t0)
    result.checks = {
        "width": next((e["n_features"] for e in watch.events("width_locked")), None),
        "served_after_restart": sum(1 for p in served if p["y_hat"] is not None),
    }
    return result


def id_reused(lab: FaultLab) -> Ledger:
    """A sensor reboots and counts from 0 again with new readings: processed as new samples, reported in
    ``id_reused`` summary events (at most one a second, each with its count), not one event per sample."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 3000)
    agent = lab.agent(device, secret).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(2000)))
        watch.wait_ids(range(2000))
        again = [json.dumps({"id": i, "x": s.X[2000 + i].tolist()}).encode() for i in range(1000)]
        sent = time.monotonic()
        pub.send(samples_topic(device), again, [[i] for i in range(1000)])

        def reported() -> int:
            return sum(e["count"] for e in watch.events("id_reused"))

        watch.wait(lambda: reported() >= 1000, 30, "1,000 reused ids reported")
        took = time.monotonic() - sent
        agent.stop()
        result = ledger("id_reused", pub, watch, t0)
    result.checks = {
        "id_reused_events": len(watch.events("id_reused")),
        "id_reused_reported": reported(),
        "seconds": took,
    }
    return result

"""A gateway's fairness between its devices (issue 30 row 1): 100 devices on one gateway process, 99 quiet
ones at 5 labeled samples/s and one that floods, on the shipped Mosquitto configuration (its queue,
in-flight and persistence settings; anonymous here, so without the ACL and the user-name client ids)
with the real cloud trainer (at ``--cloud-nice`` 10: in a deployment it has a host of its own; on the bench's
cores, its service process answering the first models of the 99 quiet devices, whose warm-up ends in the
restart phase, took CPU from the gateway's drain; its training processes run 10 below it as always).

Phases, timed by when a quiet sample was published: ``before`` (quiet traffic only; the flooding device
warms up and gets its model), ``burst`` (the flooder publishes ``--burst`` labeled samples as fast as the
broker takes them), ``labels`` (it publishes ``--labels`` late labels for ids it never sent), ``restart``
(the gateway stops; while it is away, at least ``--restart-s``, the flooder uploads a backlog of
``--backlog`` samples and the quiet devices go on; then it starts again), ``after`` (until the quiet
stream ends). Reported per phase: the quiet samples' latency (publish to prediction less the gateway's
absence, from the stop to its return: its first answer, or its ``ready`` line if that came first;
p50/p99/max: a sample published while it was away counts from the return, and one published before the
stop but left unanswered by it, ``held_at_stop``, until the stop and again from the return) and how many
are still unanswered; per device the ledger from its final status (published = predicted +
rejected + dropped, labels: + label misses) and what is lost; the gateway's peak RSS. Every sample
carries ``seq``, so the samples the broker drops while the gateway is away (its queue for the gateway is
full of the backlog) count in ``dropped`` (``broker_dropped``, issue 30 row 2) instead of being lost
unseen; every device sends one last sample once the gateway drained its queue, so a gap at the tail of
its stream shows too, and the ledger is read once every gap waited the gateway's ``seq_grace_s``.
``restart_drain``: how many quiet samples the restarted gateway found queued and how fast it answered
them, beside how fast a bare paho subscriber receives as many queued samples on the same broker (the floor
a Python MQTT client has on this machine; the restart phase's p99 of 1 s needs about ``samples`` answers
a second).

    python bench/gateway_fairness.py --json results/gateway_fairness.json
    python bench/gateway_fairness.py --quick          # 20 devices, smaller floods (the smoke run)
    python bench/gateway_fairness.py --broker-sessions device ...   # a broker session per device
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import statistics
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from ingest.sink import Sink

from edgedrift_edge.transport.mqtt import broker_address, make_client
from edgedrift_harness.agent import AgentProcess
from edgedrift_harness.cloud import CloudProcess
from edgedrift_harness.mosquitto import ShippedMosquitto
from edgedrift_harness.mqtt import Subscriber, publish
from edgedrift_harness.options import key_values
from edgedrift_harness.publisher_process import publish_from_process
from edgedrift_harness.results import write_json

OPERATOR = "bench-operator-token-" + "x" * 24


def sample(i: int) -> bytes:
    """Sample ``i`` of a device; ``seq`` = ``i``: the device's samples before it."""
    x = [((i * 7919) % 200 - 100) / 50.0, (i % 13) / 6.0 - 1.0]
    return json.dumps({"id": i, "x": x, "y": 1 if x[0] > 0 else -1, "seq": i}).encode()


class Watch(Subscriber):
    """Prediction arrival times of the ``timed`` devices by id, and every device's latest status with
    counters. The flooder's predictions are not subscribed: this process also publishes and stamps the
    quiet samples, and need not decode a flood's predictions (thousands a second while the gateway drains
    a backlog) beside them."""

    def __init__(self, url: str, timed: list[str]) -> None:
        self.at: dict[str, dict[int, float]] = {}
        self.status: dict[str, dict[str, Any]] = {}
        topics = [(f"edgedrift/{device}/predictions", 1) for device in timed]
        super().__init__(url, [*topics, ("edgedrift/+/status", 1)])

    def handle(self, topic: str, payload: bytes) -> None:
        now = time.monotonic()
        _, device, kind = topic.split("/")
        if not payload:
            return
        body = json.loads(payload)
        with self.lock:
            if kind == "status":
                if "counters" in body:
                    self.status[device] = body
                return
            seen = self.at.setdefault(device, {})
            for p in body.get("predictions", [body]):
                seen.setdefault(p["id"], now)

    def answered(self, device: str) -> dict[int, float]:
        with self.lock:
            return dict(self.at.get(device, {}))

    def counters(self, device: str) -> dict[str, int]:
        with self.lock:
            return dict(self.status.get(device, {}).get("counters", {}))


def accounted(c: dict[str, int]) -> int:
    """Items a device's counters account for: predicted, rejected, dropped, labels that missed."""
    return sum(c.get(k, 0) for k in ("predictions", "rejected", "dropped", "label_misses"))


def rss_mb(pid: int) -> tuple[float, float]:
    """The process's resident set and its peak, in MB (0 while it is not running: the restart)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0, 0.0
    fields = dict(line.split(":", 1) for line in text.splitlines())
    return int(fields.get("VmRSS", "0").split()[0]) / 1024, int(fields.get("VmHWM", "0").split()[0]) / 1024


def waited(at: float, got: float, stopped: float, back: float) -> float:
    """A sample's latency from its publish to its prediction, less the gateway's absence (from the stop to
    its return) for a sample answered after the return: no gateway answers while it is away, so a sample
    published while it was away waits from the return, and one sent before the stop that the stopping
    gateway left to the broker waits until the stop and again from the return. A sample answered before
    the return (the stop finishes the message at hand) counts whole."""
    if got < back:
        return got - at
    return got - at - max(0.0, back - max(at, stopped))


def returned(watch: Watch, devices: list[str], started: float, ready: float) -> float:
    """When the restarted gateway was back: its ``ready`` line, or its first answer after it was started
    if that came first (it drains its queue as soon as it is subscribed)."""
    return min([ready, *(t for d in devices for t in watch.answered(d).values() if t >= started)])


def restart_drain(
    watch: Watch, sent: dict[str, dict[int, float]], started: float, back: float
) -> dict[str, Any]:
    """The quiet samples the restarted gateway found queued (published before it was back, answered after
    it was started) and how fast it answered them: from its first answer to the last of them. A quiet
    p99 of 1 s in the restart phase needs about ``samples`` answers a second."""
    per_device: dict[str, int] = {}
    first, last = math.inf, 0.0
    for device, times in sent.items():
        got = {r: t for r, t in watch.answered(device).items() if t >= started}
        away = [got[r] for r, at in times.items() if at < back and r in got]
        per_device[device] = len(away)
        first = min(first, *got.values()) if got else first
        last = max(last, *away) if away else last
    samples = sum(per_device.values())
    seconds = last - first if samples else 0.0
    return {
        "samples": samples,
        "gateway_s": round(seconds, 3),
        "gateway_per_s": round(samples / seconds) if seconds > 0 else None,
        "per_device": per_device,
    }


def peer_drain(url: str, workdir: Path, per_device: dict[str, int]) -> dict[str, Any]:
    """The floor of the restart drain on this machine, in the same run: a bare paho subscriber in its own
    process (``bench/ingest/sink.py``: it json-decodes every message, answers nothing) with one persistent
    session, away while as many samples per quiet device as the gateway drained are queued for it, then
    back; from its first message to its last. The gateway had a broker session per device (or one) and
    also predicted, published and drained the flooder's backlog meanwhile."""
    client_id = f"bench-peer-drain-{secrets.token_hex(3)}"
    topic = "peer/+/samples"
    Sink(workdir, url, topic, 1, "samples", client_id).stop()  # the session and its subscription stay
    for device, count in per_device.items():
        publish(url, f"peer/{device}/samples", [sample(i) for i in range(count)])
    samples = sum(per_device.values())
    sink = Sink(workdir, url, topic, 1, "samples", client_id)
    try:
        deadline = time.monotonic() + 300.0
        while (tally := sink.read()).msgs < samples and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        sink.stop()
    if tally.msgs < samples:
        raise RuntimeError(f"the bare subscriber received {tally.msgs} of {samples} queued samples")
    seconds = tally.t_last - tally.t_first
    return {
        "peer_received": tally.msgs,
        "peer_s": round(seconds, 3),
        "peer_per_s": round(tally.msgs / seconds) if seconds > 0 else None,
    }


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    tag = secrets.token_hex(3)
    flood, quiet = f"flood-{tag}", [f"q{i:03d}-{tag}" for i in range(args.devices - 1)]
    devices = {d: secrets.token_urlsafe(24) for d in [flood, *quiet]}
    (workdir / "devices.json").write_text(json.dumps(devices))
    options = {k: v or None for k, v in key_values("--broker-option", args.broker_option).items()}
    broker = ShippedMosquitto.anonymous(workdir / "broker", options).start()
    cloud = CloudProcess.on_sqlite(workdir, devices, operator_token=OPERATOR, nice=args.cloud_nice).start()
    url = f"mqtt://127.0.0.1:{broker.port}"
    settings: dict[str, Any] = {
        "gateway_id": f"gw-{tag}",
        "devices_file": workdir / "devices.json",
        "broker_url": url,
        "cloud_url": cloud.url,
        "warmup_samples": 200,
        "window_labels": 50,
        "n_features": 2,
        "checkpoint_dir": workdir / "state",
    }
    if args.share is not None:
        settings["device_share"] = args.share
    settings["broker_sessions"] = args.broker_sessions
    settings |= key_values("--gateway-option", args.gateway_option)
    gateway = AgentProcess(workdir / "gateway.log", settings)
    watch = Watch(url, quiet)
    sent: dict[str, dict[int, float]] = {d: {} for d in quiet}
    marks: dict[str, float] = {}
    stop = threading.Event()
    peak = [0.0]

    def stream() -> None:
        client = make_client(url, f"quiet-{tag}", clean_session=True)
        host, port, _tls = broker_address(url)
        client.connect(host, port)
        client.loop_start()
        start, r = time.monotonic(), 0
        pending: deque[mqtt.MQTTMessageInfo] = deque()
        while not stop.is_set():
            for device in quiet:
                sent[device][r] = time.monotonic()
                pending.append(client.publish(f"edgedrift/{device}/samples", sample(r), qos=1))
            while pending and pending[0].is_published():
                pending.popleft()
            r += 1
            time.sleep(max(0.0, start + r / args.rate - time.monotonic()))
        # paho drops what it has not sent at a disconnect: the last samples are published only once the
        # broker acknowledged them (a broker busy saving its database takes a while), not lost unseen
        deadline = time.monotonic() + 120.0
        for info in pending:
            info.wait_for_publish(timeout=max(0.0, deadline - time.monotonic()))
        client.disconnect()
        client.loop_stop()

    def sample_rss() -> None:
        while not stop.is_set():
            if gateway.proc is not None and gateway.proc.poll() is None:
                peak[0] = max(peak[0], rss_mb(gateway.pid)[0])
            time.sleep(0.5)

    gateway.start(timeout=120)
    code: int | None = None
    threads = [threading.Thread(target=stream), threading.Thread(target=sample_rss)]
    warm = 300
    try:
        marks["before"] = time.monotonic()
        for t in threads:
            t.start()
        publish(url, f"edgedrift/{flood}/samples", [sample(i) for i in range(warm)])
        time.sleep(max(0.0, marks["before"] + args.lead_s - time.monotonic()))
        marks["burst"] = time.monotonic()
        burst = [sample(i) for i in range(warm, warm + args.burst)]
        publish_from_process(url, f"edgedrift/{flood}/samples", burst, timeout=600)
        time.sleep(3.0)
        marks["labels"] = time.monotonic()
        labels = [json.dumps({"id": 10**9 + i, "y": 1}).encode() for i in range(args.labels)]
        publish_from_process(url, f"edgedrift/{flood}/labels", labels, timeout=600)
        time.sleep(3.0)
        marks["restart"] = time.monotonic()
        gateway.stop(timeout=60)
        marks["stopped"] = time.monotonic()
        first = warm + args.burst
        for start in range(first, first + args.backlog, 50_000):  # paho queues 65,535 messages at most
            part = [sample(i) for i in range(start, min(start + 50_000, first + args.backlog))]
            publish_from_process(url, f"edgedrift/{flood}/samples", part, timeout=600)
        time.sleep(max(0.0, marks["restart"] + args.restart_s - time.monotonic()))
        marks["started"] = time.monotonic()
        gateway.start(timeout=120)
        ready = time.monotonic()
        time.sleep(3.0)
        marks["after"] = time.monotonic()
        time.sleep(args.after_s)
        stop.set()
        for t in threads:
            t.join(60)
        marks["end"] = time.monotonic()
        deadline = time.monotonic() + args.drain_s
        every = [flood, *quiet]
        # Once the broker's queue for the gateway drained (every count still for 5 s), each device sends one
        # more sample: its seq tells the gateway what the broker dropped at the tail of the device's stream
        # (sent while the queue is still full, the broker would drop it too and the tail's gap go unseen)
        seen, still = -1, time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - still < 5.0:
            now_seen = sum(accounted(watch.counters(d)) + len(watch.answered(d)) for d in every)
            if now_seen != seen:
                seen, still = now_seen, time.monotonic()
            time.sleep(0.5)
        tail = {flood: first + args.backlog, **{d: len(sent[d]) for d in quiet}}
        for device, i in tail.items():
            publish(url, f"edgedrift/{device}/samples", [sample(i)])
        published = {flood: warm + args.burst + args.labels + args.backlog + 1}
        published |= {d: len(sent[d]) + 1 for d in quiet}
        # every ledger complete; a gap counts once the gateway's seq grace (30 s) passed without its samples
        while time.monotonic() < deadline and any(accounted(watch.counters(d)) < published[d] for d in every):
            time.sleep(0.5)
        rss, hwm = rss_mb(gateway.pid)
        code = gateway.stop(timeout=60)
        back = returned(watch, quiet, marks["started"], ready)
        drain = restart_drain(watch, sent, marks["started"], back)
        per_device = drain.pop("per_device")
        if drain["samples"]:
            drain |= peer_drain(url, workdir, per_device)
    finally:
        stop.set()
        code = gateway.stop(timeout=60) if code is None else code
        time.sleep(1.0)
        watch.close()
        cloud.stop()
        broker.stop()
    phases = ["before", "burst", "labels", "restart", "after"]
    bounds = [marks[p] for p in phases] + [marks["end"]]
    latency: dict[str, list[float]] = {p: [] for p in phases}
    unanswered = dict.fromkeys(phases, 0)
    for device in quiet:
        got = watch.answered(device)
        for r, at in sent[device].items():
            phase = next(p for p, lo, hi in zip(phases, bounds, bounds[1:], strict=False) if lo <= at < hi)
            if r in got:
                latency[phase].append(waited(at, got[r], marks["restart"], back))
            else:
                unanswered[phase] += 1
    held = sorted(  # how long before the stop the quiet samples it left for after the return were sent
        marks["restart"] - at
        for device in quiet
        for r, at in sent[device].items()
        if at < marks["restart"] and watch.answered(device).get(r, -math.inf) >= back
    )
    drained = []  # per quiet device: from the return until its last sample sent while away was answered
    for device in quiet:
        got = watch.answered(device)
        away = [got[r] for r, at in sent[device].items() if at < back and r in got]
        if away:
            drained.append(max(away) - back)
    drained.sort()
    per_phase = {}
    for phase, values in latency.items():
        values.sort()
        per_phase[phase] = {
            "seconds": round(bounds[phases.index(phase) + 1] - bounds[phases.index(phase)], 1),
            "quiet_samples": len(values) + unanswered[phase],
            "p50_s": round(statistics.median(values), 4) if values else None,
            "p99_s": round(values[int(0.99 * (len(values) - 1))], 4) if values else None,
            "max_s": round(values[-1], 4) if values else None,
            "unanswered": unanswered[phase],
        }
    ledger = {}
    for device in [flood, *quiet]:
        c = watch.counters(device)
        ledger[device] = {
            "published": published[device],
            **{
                k: c.get(k, 0)
                for k in (
                    "predictions",
                    "rejected",
                    "dropped",
                    "overloaded",
                    "broker_dropped",
                    "label_misses",
                )
            },
            "lost": published[device] - accounted(c),
        }
    quiet_lost = sum(ledger[d]["lost"] for d in quiet)
    return {
        "devices": args.devices,
        "quiet_rate_per_s": args.rate,
        "burst": args.burst,
        "labels": args.labels,
        "device_share": args.share,
        "broker_sessions": args.broker_sessions,
        "broker_options": args.broker_option,
        "gateway_options": args.gateway_option,
        "cloud_nice": args.cloud_nice,
        "exit_code": code,
        "phases": per_phase,
        "flood": ledger[flood],
        "quiet_lost": quiet_lost,
        "quiet_dropped": sum(ledger[d]["dropped"] for d in quiet),
        "quiet_broker_dropped": sum(ledger[d]["broker_dropped"] for d in quiet),
        "backlog": args.backlog,
        "restart_away_s": round(back - marks["restart"], 1),
        "restart_stop_s": round(marks["stopped"] - marks["restart"], 2),
        "restart_first_answer_s": round(back - marks["started"], 2),  # from the restart's spawn
        "restart_answered_before_ready_s": round(ready - back, 2),
        "held_at_stop": {
            "samples": len(held),
            "p50_s": round(held[len(held) // 2], 3) if held else None,
            "oldest_s": round(held[-1], 3) if held else None,
        },
        "restart_drained_s": {
            "p50": round(statistics.median(drained), 3) if drained else None,
            "p90": round(drained[int(0.9 * (len(drained) - 1))], 3) if drained else None,
            "max": round(drained[-1], 3) if drained else None,
            "devices_over_1s": sum(1 for v in drained if v > 1.0),
        },
        "restart_drain": drain,
        "rss_mb": round(rss, 1),
        "rss_peak_mb": round(max(hwm, peak[0]), 1),
        "ledger": ledger,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--rate", type=float, default=5.0, help="samples/s of each quiet device")
    parser.add_argument("--burst", type=int, default=60_000, help="samples of the burst phase")
    parser.add_argument("--labels", type=int, default=100_000, help="labels for unknown ids (label flood)")
    parser.add_argument(
        "--backlog", type=int, default=120_000, help="samples the flooder uploads while the gateway restarts"
    )
    parser.add_argument(
        "--restart-s", type=float, default=10.0, help="the gateway is away at least this long"
    )
    parser.add_argument("--lead-s", type=float, default=15.0, help="quiet traffic before the burst")
    parser.add_argument("--after-s", type=float, default=5.0, help="quiet traffic after the floods")
    parser.add_argument("--drain-s", type=float, default=300.0, help="longest wait for the last answers")
    parser.add_argument("--share", type=int, default=None, help="device_share (default: the agent's)")
    parser.add_argument(
        "--cloud-nice",
        type=int,
        default=10,
        help="the cloud trainer's niceness: it stands for another host and takes what the gateway, the "
        "broker and the publishers leave of this one's cores (0: an equal share, the runs before 3 Dec 2026)",
    )
    parser.add_argument(
        "--broker-sessions",
        choices=("gateway", "device"),
        default="gateway",
        help="the gateway's broker_sessions: one session, or one per device",
    )
    parser.add_argument(
        "--gateway-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an agent setting of the gateway, e.g. switch_interval_s=0.02",
    )
    parser.add_argument(
        "--broker-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Mosquitto option over the shipped one (KEY= removes it), e.g. autosave_interval=1000",
    )
    parser.add_argument("--quick", action="store_true", help="20 devices, 5,000 samples, labels and backlog")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the logs)")
    args = parser.parse_args()
    if args.quick:
        args.devices, args.burst, args.labels, args.lead_s = 20, 5_000, 5_000, 11.0
        args.backlog, args.restart_s = 5_000, 3.0
    if args.keep:
        workdir = Path(tempfile.mkdtemp(prefix="edgedrift-fairness-"))
        print(f"work directory (kept): {workdir}", flush=True)
        result = run(args, workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="edgedrift-fairness-") as tmp:
            result = run(args, Path(tmp))
    summary = {k: v for k, v in result.items() if k != "ledger"}
    print(json.dumps(summary, indent=2))
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()

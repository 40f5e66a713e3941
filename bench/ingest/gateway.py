"""The gateway rows of the ingest benchmark: one gateway process serving N devices over one MQTT connection,
provisioned through the cloud's gateway API (``/v1/gateways``), against the bare paho peer in the same run.
With ``--gateway-processes P`` the N devices are shared by P gateway processes (N/P each, one connection
each), as a host with P cores runs them; the rates are the sum, the RSS the sum of the processes'.

Per row: single-sample messages spread round-robin over the N devices (messages/s), batches of 100
spread the same way (samples/s), the peer's figures for the same messages right before, and the gateway's
VmRSS at ``ready``, after ``rss_points`` samples (1M and 3M in a full run)."""

from __future__ import annotations

import json
import math
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from edgedrift_harness.agent import AgentProcess
from edgedrift_harness.mqtt import Subscriber
from edgedrift_harness.proc import cpu_seconds, pss_mb, rss_mb
from ingest.data import Data
from ingest.lab import OPERATOR, Config, IngestLab
from ingest.phases import wait_count
from ingest.publisher import Publisher
from ingest.sink import Sink


@dataclass
class GatewayRow:
    """One row of ``--json``: the acceptance fields, plus the peer's batched figure and the losses."""

    devices: int
    #: The gateways' ``batch_mode``: exact (per-sample semantics) or vectorised (the opt-in).
    batch_mode: str
    single_msgs_per_s: float
    peer_msgs_per_s: float
    batched_samples_per_s: float
    peer_batched_samples_per_s: float
    rss_ready_mb: float
    rss_1m_mb: float
    rss_3m_mb: float
    rss_points: list[tuple[int, float]]
    warmup_s: float
    lost: int
    processes: int = 1
    #: The devices' own ledger from their last retained status after the gateways stopped: samples taken,
    #: predictions made, dropped (refused past a device's share: ``overloaded``; told from ``seq`` gaps:
    #: ``broker_dropped``) and rejected. ``lost`` above is what the counting subscriber did not see in time.
    ledger: dict[str, int] | None = None
    #: The processes' summed PSS (shared pages divided among them) at ``ready`` and at the last point.
    pss_ready_mb: float = math.nan
    pss_end_mb: float = math.nan
    #: CPU µs per sample (utime + stime over the phase / samples): the gateways' sum and the peer's.
    single_cpu_us: float = math.nan
    peer_single_cpu_us: float = math.nan
    batched_cpu_us: float = math.nan
    peer_batched_cpu_us: float = math.nan
    #: The gateways' summed CPU (% of one core) while only the peer gets messages: their housekeeping.
    idle_cpu_pct: float = math.nan

    @property
    def rss_per_1000_devices_mb(self) -> float:
        """The processes' summed RSS at the last point per 1,000 of their devices (issue 29's density)."""
        return self.rss_3m_mb * 1000 / self.devices

    def as_json(self) -> dict[str, Any]:
        row = asdict(self)
        row["single_ratio"] = self.single_msgs_per_s / self.peer_msgs_per_s
        row["batched_ratio"] = self.batched_samples_per_s / self.peer_batched_samples_per_s
        row["rss_per_1000_devices_mb"] = self.rss_per_1000_devices_mb
        return row


class _Statuses(Subscriber):
    """The devices' retained status messages (``{prefix}/+/status``), the last one per topic."""

    def __init__(self, url: str) -> None:
        self.last: dict[str, dict[str, Any]] = {}
        super().__init__(url, [("edgedrift/+/status", 1)])

    def handle(self, topic: str, payload: bytes) -> None:
        if payload:
            with self.lock:
                self.last[topic] = json.loads(payload)


def _ledger(url: str, devices: list[str], settle_s: float = 3.0) -> dict[str, int]:
    """Sum the devices' counters from their retained statuses (the gateways have stopped and published
    them): what the gateways took, answered, dropped and rejected, to tell a drop from a loss."""
    reader = _Statuses(url)
    try:
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            with reader.lock:
                seen = sum(f"edgedrift/{d}/status" in reader.last for d in devices)
            if seen >= len(devices):
                break
            time.sleep(0.2)
        time.sleep(settle_s)
        with reader.lock:
            statuses = [reader.last.get(f"edgedrift/{d}/status") or {} for d in devices]
    finally:
        reader.close()
    keys = ("samples", "predictions", "dropped", "overloaded", "broker_dropped", "rejected", "duplicates")
    total = {key: sum(int((st.get("counters") or {}).get(key, 0)) for st in statuses) for key in keys}
    total["devices_reporting"] = sum(1 for st in statuses if st.get("counters"))
    return total


def _timed(pub: Publisher, packets: list[bytes], sink: Sink, samples: int, window: int) -> tuple[float, int]:
    """(samples/s from the first publish to the last count, samples counted) for one closed-loop phase."""
    before = sink.read()
    t0, _t1, _t2 = pub.run(packets, lambda: sink.read().msgs - before.msgs, window)
    after = wait_count(sink, before.samples + samples, idle=30)
    delivered = after.samples - before.samples
    return delivered / (after.t_last - t0), delivered


def _cpu_timed(
    pids: list[int], pub: Publisher, packets: list[bytes], sink: Sink, samples: int, window: int
) -> tuple[float, int, float]:
    """:func:`_timed` and the CPU µs per sample the processes ``pids`` spent meanwhile."""
    c0 = sum(cpu_seconds(p) for p in pids)
    rate, delivered = _timed(pub, packets, sink, samples, window)
    return rate, delivered, 1e6 * (sum(cpu_seconds(p) for p in pids) - c0) / max(delivered, 1)


def _wait_models(lab: IngestLab, devices: set[str], timeout: float) -> int:
    """Until every device has its first model at the cloud (or ``timeout``); how many have one."""
    deadline = time.monotonic() + timeout
    ready = 0
    with lab.cloud.client(OPERATOR) as op:
        while time.monotonic() < deadline:
            ready, offset = 0, 0
            while True:
                page = (
                    op.get("/v1/devices", params={"limit": 1000, "offset": offset}).raise_for_status().json()
                )
                ready += sum(1 for c in page if c["device_id"] in devices and c.get("latest_version"))
                if len(page) < 1000:
                    break
                offset += 1000
            if ready == len(devices):
                return ready
            time.sleep(1.0)
    return ready


def gateway_row(
    cfg: Config,
    lab: IngestLab,
    peer: Sink,
    n_devices: int,
    rss_points: tuple[int, ...],
    batch_mode: str = "exact",
    processes: int = 1,
) -> GatewayRow:
    """``processes`` gateways sharing ``n_devices`` devices, measured as described in the module docstring."""
    tag = secrets.token_hex(3)
    devices = [f"gw-{tag}-{i % processes}-{i}" for i in range(n_devices)]  # round-robin over the gateways
    shares = {f"gw-{tag}-{p}": devices[p::processes] for p in range(processes)}
    secrets_of: dict[str, str] = {}
    with httpx.Client(
        base_url=lab.cloud.url, headers={"Authorization": f"Bearer {OPERATOR}"}, timeout=120
    ) as op:
        for gateway, served in shares.items():
            secrets_of[gateway] = op.put(f"/v1/gateways/{gateway}").raise_for_status().json()["secret"]
            for k in range(0, len(served), 5000):
                op.post(
                    f"/v1/gateways/{gateway}/devices", json={"devices": served[k : k + 5000]}
                ).raise_for_status()
    warmup = 200
    agents = [
        AgentProcess(
            lab.workdir / f"{gateway}.log",
            {**_gateway_values(cfg, lab, gateway, secrets_of[gateway], warmup), "batch_mode": batch_mode},
            env=lab.agent_env(),
            command=lab.agent_command(),
        ).spawn()
        for gateway in shares
    ]
    return _measure(cfg, lab, peer, agents, devices, warmup, rss_points, batch_mode)


def _gateway_values(cfg: Config, lab: IngestLab, gateway: str, secret: str, warmup: int) -> dict[str, Any]:
    """The settings of one gateway process."""
    values: dict[str, Any] = {
        "gateway_id": gateway,
        "gateway_secret": secret,
        "broker_url": lab.broker.url,
        "cloud_url": lab.cloud.url,
        "strategy": "druid",
        "warmup_samples": warmup,
        "n_features": cfg.d,
        "qos": 1,
        "checkpoint_dir": lab.workdir / "state",
        "heartbeat_every_s": 30,
        "checkpoint_every_s": 600,
        "gateway_sync_s": 60,
        "log_level": "WARNING",
        **({"switch_interval_s": cfg.switch_interval} if cfg.switch_interval else {}),
    }
    return values


def _measure(
    cfg: Config,
    lab: IngestLab,
    peer: Sink,
    agents: list[AgentProcess],
    devices: list[str],
    warmup: int,
    rss_points: tuple[int, ...],
    batch_mode: str,
) -> GatewayRow:
    """The phases of one row against the running gateways."""
    n_devices = len(devices)

    def rss() -> float:
        return sum(rss_mb(a.pid) for a in agents)

    def pss() -> float:
        return sum(pss_mb(a.pid) for a in agents)

    total = n_devices * (warmup + 100) + 4 * cfg.samples + rss_points[1]
    data = Data(total, cfg.d, cfg.seed + n_devices)
    pub = Publisher(lab.broker.port, 1)
    preds: Sink | None = None
    try:
        for agent in agents:
            agent.wait_ready(300)
        time.sleep(1.0)
        rss_ready, pss_ready = rss(), pss()
        preds = Sink(lab.workdir, lab.broker.url, "edgedrift/+/predictions", 1, "predictions")
        topics = [f"edgedrift/{d}/samples" for d in devices]
        t0 = time.monotonic()
        fed = 0
        for _ in range(2):  # the warm-up window, then as much again while the first models are trained
            packets = pub.encode_spread(topics, data.take(n_devices * warmup, warmup))
            _timed(pub, packets, preds, n_devices * warmup, cfg.batch_window)
            fed += n_devices * warmup
        ready = _wait_models(lab, set(devices), 600)
        warmup_s = time.monotonic() - t0
        if ready < n_devices:
            print(f"  warning: {n_devices - ready} devices have no model after the warm-up", flush=True)
        lost = 0
        gateways, peers = [a.pid for a in agents], [peer.proc.pid]
        window, batch_window = cfg.window, cfg.batch_window
        idle = (time.monotonic(), sum(cpu_seconds(p) for p in gateways))
        peer_single, got, peer_single_cpu = _cpu_timed(
            peers, pub, pub.encode(peer.topic, data.take(cfg.samples, 1)), peer, cfg.samples, cfg.window
        )
        idle_cpu = 100 * (sum(cpu_seconds(p) for p in gateways) - idle[1]) / (time.monotonic() - idle[0])
        single, got, single_cpu = _cpu_timed(
            gateways, pub, pub.encode_spread(topics, data.take(cfg.samples, 1)), preds, cfg.samples, window
        )
        lost += cfg.samples - got
        peer_batch, _, peer_batch_cpu = _cpu_timed(
            peers, pub, pub.encode(peer.topic, data.take(cfg.samples, 100)), peer, cfg.samples, batch_window
        )
        batch, got, batch_cpu = _cpu_timed(
            gateways,
            pub,
            pub.encode_spread(topics, data.take(cfg.samples, 100)),
            preds,
            cfg.samples,
            cfg.batch_window,
        )
        lost += cfg.samples - got
        fed += 2 * cfg.samples
        points = [(fed, rss())]
        for target in rss_points:
            while fed < target:
                step = min(100_000, target - fed)
                packets = pub.encode_spread(topics, data.take(step, 100))
                _, got = _timed(pub, packets, preds, step, cfg.batch_window)
                lost += step - got
                fed += step
            points.append((fed, rss()))
        pss_end = pss()
    finally:
        if preds is not None:
            preds.stop()
        pub.close()
        for agent in agents:
            agent.stop(60)
    ledger = _ledger(lab.broker.url, devices)
    return GatewayRow(
        devices=n_devices,
        batch_mode=batch_mode,
        single_msgs_per_s=single,
        peer_msgs_per_s=peer_single,
        batched_samples_per_s=batch,
        peer_batched_samples_per_s=peer_batch,
        rss_ready_mb=rss_ready,
        rss_1m_mb=points[1][1],
        rss_3m_mb=points[2][1],
        rss_points=points,
        warmup_s=warmup_s,
        lost=lost,
        processes=len(agents),
        ledger=ledger,
        pss_ready_mb=pss_ready,
        pss_end_mb=pss_end,
        single_cpu_us=single_cpu,
        peer_single_cpu_us=peer_single_cpu,
        batched_cpu_us=batch_cpu,
        peer_batched_cpu_us=peer_batch_cpu,
        idle_cpu_pct=idle_cpu,
    )


def describe_row(row: GatewayRow) -> str:
    processes = "" if row.processes == 1 else f" x{row.processes} processes"
    # Per 1,000 devices only where there are as many: the imports dominate a smaller row.
    density = f", {row.rss_per_1000_devices_mb:.0f} MB per 1,000 devices" if row.devices >= 1000 else ""
    return (
        f"  gateway{processes}, {row.devices:>5} devices, {row.batch_mode}: "
        f"single {row.single_msgs_per_s:>9,.0f} msgs/s "
        f"(peer {row.peer_msgs_per_s:,.0f}, {row.single_msgs_per_s / row.peer_msgs_per_s:.2f}x), "
        f"batches of 100 {row.batched_samples_per_s:>9,.0f} samples/s "
        f"(peer {row.peer_batched_samples_per_s:,.0f}); RSS ready {row.rss_ready_mb:.0f} MB, "
        f"{row.rss_1m_mb:.0f} / {row.rss_3m_mb:.0f} MB after {row.rss_points[-2][0]:,} / "
        f"{row.rss_points[-1][0]:,} samples (PSS {row.pss_ready_mb:.0f} / {row.pss_end_mb:.0f} MB){density}; "
        f"lost {row.lost}\n"
        f"    ledger of the devices (their last status): {row.ledger}\n"
        f"    CPU µs per sample: single {row.single_cpu_us:.1f} (peer {row.peer_single_cpu_us:.1f}, "
        f"{row.single_cpu_us / row.peer_single_cpu_us:.2f}x), batches of 100 {row.batched_cpu_us:.2f} "
        f"(peer {row.peer_batched_cpu_us:.2f}, {row.batched_cpu_us / row.peer_batched_cpu_us:.2f}x); "
        f"idle (only the peer fed) {row.idle_cpu_pct:.1f} % of a core"
    )

"""Faults of the device itself: the agent killed, an inbox too small, a checkpoint that cannot be written
or was crafted to run code."""

from __future__ import annotations

import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Any

from edgedrift_harness.faults.lab import FaultLab, Ledger, ledger, samples_topic, single_payloads, stream


def agent_sigkill(lab: FaultLab) -> Ledger:
    """SIGKILL while thousands of QoS-1 samples are queued; the restarted agent answers the rest."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 6000)
    agent = lab.agent(device, secret).start()
    with lab.clients(device) as (pub, watch):
        payloads, counts = single_payloads(s, range(6000))
        sender = threading.Thread(target=pub.send, args=(samples_topic(device), payloads, counts))
        sender.start()
        watch.wait(lambda: len(watch.answered()) >= 1500, 60, "1500 predictions")
        agent.kill()
        sender.join(120)
        answered_at_kill = len(watch.answered())
        agent.start()
        watch.wait_ids(range(6000), 120)
        resumed = next(iter(watch.events("resumed")), {})  # none when killed before a checkpoint
        agent.stop()
        result = ledger("agent_sigkill", pub, watch, t0)
    result.checks = {"answered_at_kill": answered_at_kill, "resumed_samples": resumed.get("samples")}
    return result


def queue_overflow(lab: FaultLab) -> Ledger:
    """An inbox of 8 messages against a burst of 4,000 QoS-1 samples: back-pressure, no drop."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 4000)
    agent = lab.agent(device, secret, queue_size=8).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(4000)))
        watch.wait_ids(range(4000), 120)
        time.sleep(1.5)  # one heartbeat: the status carries the counters
        code = agent.stop()
        status = (watch.statuses() or [{}])[-1]
        result = ledger("queue_overflow", pub, watch, t0)
    counters = status.get("counters", {})
    result.checks = {
        "exit_code": code,
        "dropped": counters.get("dropped"),
        "backpressure": counters.get("backpressure_waits"),
    }
    return result


def qos0_overflow(lab: FaultLab) -> Ledger:
    """QoS 0 samples (never delivered again) beyond a small inbox: every drop is counted."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 4000)
    agent = lab.agent(device, secret, queue_size=4, qos=0).start()
    with lab.clients(device) as (pub, watch):
        payloads, counts = single_payloads(s, range(4000))
        pub.send(samples_topic(device), payloads, counts, qos=0)
        time.sleep(3.0)
        agent.stop()
        time.sleep(0.5)
        result = ledger("qos0_overflow", pub, watch, t0)
    result.checks = {"dropped": result.dropped}
    return result


def checkpoint_unwritable(lab: FaultLab) -> Ledger:
    """The checkpoint directory is not writable (a file where the directory should be): reported and
    retried while predictions go on; fixing it lets the next attempt succeed."""
    t0 = time.monotonic()
    device, secret = lab.device()
    blocker = lab.workdir / f"blocked-{device}"
    blocker.write_text("not a directory")
    s = stream(1, 2000)
    agent = lab.agent(device, secret, checkpoint_dir=blocker / "state").start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(1000)))
        watch.wait_ids(range(1000))
        failed = watch.wait_event("checkpoint_failed")
        blocker.unlink()
        blocker.mkdir()
        recovered = watch.wait_event("checkpoint_recovered", timeout=30)
        pub.send(samples_topic(device), *single_payloads(s, range(1000, 2000)))
        watch.wait_ids(range(2000))
        states = {st.get("state") for st in watch.statuses()}
        code = agent.stop()
        result = ledger("checkpoint_unwritable", pub, watch, t0)
    result.checks = {
        "failed_reason": failed.get("reason", "")[:80],
        "recovered_after": recovered.get("failures"),
        "status_states": sorted(states),
        "exit_code": code,
    }
    return result


def disk_full(lab: FaultLab) -> Ledger:
    """Writes beyond 1 KiB fail (RLIMIT_FSIZE, as on a full disk): reported and retried, predictions go on."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 1500)
    wrapper = [
        sys.executable,
        "-c",
        "import resource, runpy, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024)); "
        "sys.argv = ['edgedrift-edge', 'run']; runpy.run_module('edgedrift_edge.cli', run_name='__main__')",
    ]
    agent = lab.agent(device, secret).start(command=wrapper)
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(1500)))
        watch.wait_ids(range(1500))
        failed = watch.wait_event("checkpoint_failed")
        code = agent.stop()
        result = ledger("disk_full", pub, watch, t0)
    result.checks = {"failed_reason": failed.get("reason", "")[:80], "exit_code": code}
    return result


class _Sentinel:
    """Unpickling this creates a file: proof that a checkpoint ran code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path(self.path).touch, ())


def crafted_checkpoint(lab: FaultLab) -> Ledger:
    """A checkpoint file crafted to run code when unpickled: refused, quarantined, reported."""
    t0 = time.monotonic()
    device, secret = lab.device()
    state_dir = lab.workdir / f"state-{device}"
    state_dir.mkdir(parents=True, exist_ok=True)
    sentinel = lab.workdir / f"pwned-{device}"
    (state_dir / f"{device}.ckpt").write_bytes(pickle.dumps(_Sentinel(str(sentinel))))
    s = stream(1, 1000)
    with lab.clients(device) as (pub, watch):
        agent = lab.agent(device, secret).start()
        event = watch.wait_event("checkpoint_corrupt")
        pub.send(samples_topic(device), *single_payloads(s, range(1000)))
        watch.wait_ids(range(1000))
        agent.stop()
        result = ledger("crafted_checkpoint", pub, watch, t0)
    quarantined = sorted(p.name for p in state_dir.glob(f"{device}.ckpt.corrupt-*"))
    result.checks = {
        "code_ran": sentinel.exists(),
        "quarantined": quarantined[:1],
        "event": event.get("reason", "")[:60],
    }
    return result

"""The pure parts of issue 30 rows 1 and 8, without a broker: the per-device round-robin queues (turns
shared by the worker's time) and their refusal rule, recent samples bounded in bytes, and the one width
limit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from edgedrift.limits import MAX_FEATURES
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.buffers.fair_queue import Arrivals, FairQueues
from edgedrift_edge.buffers.id_index import id_key
from edgedrift_edge.buffers.recent_samples import ENTRY_BYTES, RecentSamples
from edgedrift_edge.session.device_session import DeviceSession
from edgedrift_edge.session.ledger import SessionConfig
from edgedrift_edge.session.messages import parse_samples
from edgedrift_edge.settings import AgentSettings


def test_queues_are_drained_round_robin_so_a_quiet_key_waits_for_one_message_per_key() -> None:
    queues: FairQueues[str, int] = FairQueues(share=1000, pressure=1000)
    for i in range(500):
        queues.put("flood", i)
    queues.put("quiet", -1)
    first = [queues.take() for _ in range(2)]
    assert first == [("flood", 0), ("quiet", -1)]
    assert len(queues) == 499 and queues.held("quiet") == 0
    rest = [queues.take() for _ in range(499)]
    assert [taken[1] for taken in rest if taken is not None] == list(range(1, 500))  # FIFO per key
    assert queues.take() is None and len(queues) == 0


def test_take_more_gives_a_keys_next_messages_while_alike_and_keeps_the_turns() -> None:
    queues: FairQueues[str, str] = FairQueues(share=1000, pressure=1000)
    for item in ["s1", "s2", "l3", "s4"]:
        queues.put("a", item)
    queues.put("b", "s1")
    first = queues.take()
    assert first == ("a", "s1")
    assert queues.take_more("a", 5, lambda m: m.startswith("s")) == ["s2"]  # stops at the label
    assert len(queues) == 3 and queues.held("a") == 2
    assert queues.take() == ("b", "s1")
    assert queues.take() == ("a", "l3")
    assert queues.take_more("a", 5, lambda m: True) == ["s4"]  # emptied: "a" has no turn left
    assert len(queues) == 0 and queues.take() is None
    queues.put("a", "s5")
    assert queues.take() == ("a", "s5")


def test_turns_are_shared_by_the_workers_time_not_by_messages() -> None:
    """A device whose messages take 100 ms each (wide rows, a d x d monitor) gets about the worker time of
    its neighbours whose messages take 0.1 ms, not one message a turn: the quiet keys' messages are
    taken 50 rounds in a row (2 ms quantum) before its next one. Alone, it is taken at once (no idling),
    and its debt stays with it when its queue empties."""
    queues: FairQueues[str, str] = FairQueues(share=1000, pressure=1000, quantum=0.002)
    cost = {"heavy": 0.1, "q1": 0.0001, "q2": 0.0001}
    for _ in range(200):
        for key in cost:
            queues.put(key, key)
    order = []
    for _ in range(150):
        taken = queues.take()
        assert taken is not None
        order.append(taken[0])
        queues.charge(taken[0], cost[taken[0]])
    assert order[0] == "heavy" and order.count("heavy") == 2, order.count(
        "heavy"
    )  # its first, then ~50 rounds
    heavy_at = [i for i, key in enumerate(order) if key == "heavy"]
    assert heavy_at[1] - heavy_at[0] > 90
    alone: FairQueues[str, str] = FairQueues(share=1000, pressure=1000, quantum=0.002)
    for _ in range(3):
        alone.put("heavy", "m")
    for _ in range(3):  # only in debt keys wait: the rounds that repay it are skipped at once
        taken = alone.take()
        assert taken == ("heavy", "m")
        alone.charge("heavy", 0.1)
    assert alone.take() is None
    alone.put("heavy", "m")
    alone.put("light", "m")
    assert alone.take() == ("light", "m"), "the debt stayed while its queue was empty"


def test_a_devices_checkpoint_is_charged_to_its_turns(tmp_path: Path) -> None:
    """A checkpoint is the device's own cost (a device holding wide rows writes ~100 MB, 0.6 s of the
    worker): the housekeeping charges it to the device's turns as its messages are."""
    settings = AgentSettings.model_validate(
        {"gateway_id": "gw-c", "devices": "dev-c,dev-d", "checkpoint_dir": str(tmp_path), "n_features": 2}
    )
    agent = EdgeAgent(settings)
    for device in agent.devices.values():
        device.next_heartbeat = math.inf
        device.next_checkpoint = math.inf
    agent.devices["dev-c"].next_checkpoint = 0.0
    agent._periodic()
    assert agent.checkpoints.flush(10.0)
    assert (tmp_path / "dev-c.ckpt").exists() and not (tmp_path / "dev-d.ckpt").exists()
    assert agent.queues.balance("dev-c") < 0 == agent.queues.balance("dev-d")


def test_a_key_is_refused_only_past_its_share_under_pressure_while_another_is_quiet() -> None:
    queues: FairQueues[str, int] = FairQueues(share=3, pressure=10, quiet_limit=10)
    for t in range(12):  # "quiet" sends 5 messages a second for 12 s
        for k in range(5):
            queues.arrivals.add("quiet", t + k / 5)
    now = 12.0
    for i in range(3):
        assert not queues.over_share("a", unacknowledged=100, now=now)
        queues.arrivals.add("a", now)
        queues.put("a", i)
    assert not queues.over_share("a", unacknowledged=6, now=now), "the window has room: never refused"
    assert queues.over_share("a", unacknowledged=7, now=now), "3 queued + 7 unacknowledged reach the pressure"
    assert not queues.over_share("b", unacknowledged=100, now=now), "a key under its share is never refused"
    with pytest.raises(ValueError):
        FairQueues(share=0, pressure=1)


def test_nobody_is_refused_when_no_other_device_is_quiet() -> None:
    """Several devices replaying at once, or one alone: back-pressure, not refusals."""
    queues: FairQueues[str, int] = FairQueues(share=3, pressure=10, quiet_limit=10)
    for t in range(30):
        for k in range(50):  # both over the quiet limit
            queues.arrivals.add("a", t + k / 50)
            queues.arrivals.add("b", t + k / 50)
    for i in range(5):
        queues.put("a", i)
        queues.put("b", i)
    assert not queues.over_share("a", unacknowledged=1000, now=30.0)
    queues.arrivals.add("new", 30.0)  # heard for less than the span: not quiet yet
    assert not queues.over_share("a", unacknowledged=1000, now=30.5)


def test_a_quiet_device_is_never_refused_even_past_its_share() -> None:
    """1,000 devices at an even rate the worker cannot keep up with: each is quiet and past its share, and
    none is refused (the bench lost 1,000 samples of an honest fleet to refusals before)."""
    queues: FairQueues[str, int] = FairQueues(share=3, pressure=10, quiet_limit=20)
    keys = [f"d{i}" for i in range(50)]
    for t in range(12):
        for key in keys:
            queues.arrivals.add(key, t + 0.5)
    for key in keys:
        for i in range(4):
            queues.put(key, i)
    assert all(not queues.over_share(key, unacknowledged=1000, now=12.0) for key in keys)
    for k in range(200):  # one of them floods: it alone is refused past its share
        queues.arrivals.add("d0", 12.0 + k / 200)
    assert queues.over_share("d0", unacknowledged=1000, now=12.9)
    assert not queues.over_share("d1", unacknowledged=1000, now=12.9)


class _CountedArrivals(Arrivals[str]):
    """Arrivals that count the quiet checks asked of them."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = 0

    def quiet(self, key: str, now: float, limit: float) -> bool:
        self.checks += 1
        return super().quiet(key, now, limit)


def test_the_refusal_rule_is_the_scan_of_every_key_asked_once_per_message() -> None:
    """Random arrivals of 40 keys over 60 s: every answer is the rule's definition (past its share under
    pressure, not quiet itself, another key quiet) computed from every key, while a refusal mostly costs
    two quiet checks (the key's own and the quiet key found last), not one per key (a scan of 1,000 keys
    every 0.1 s was a twentieth of the worker)."""
    rng = np.random.default_rng(3)
    limit = 10.0
    queues: FairQueues[str, int] = FairQueues(share=2, pressure=5, quiet_limit=limit)
    keys = [f"k{i}" for i in range(40)]
    rates = {key: float(rng.choice([2.0, 5.0, 60.0])) for key in keys}
    for key in keys:
        queues.put(key, 0)
        queues.put(key, 1)
    arrivals = _CountedArrivals()
    queues.arrivals = arrivals
    quiet = Arrivals.quiet.__get__(arrivals)  # the definition, not counted
    now, asked, refused, answered_by_one = 0.0, 0, 0, 0
    while now < 60.0:
        for key in keys:
            if rng.random() < rates[key] * 0.15:
                queues.arrivals.add(key, now)
        if now > 11 and rng.random() < 0.3:  # from some second on, the slow keys stop: none is quiet
            rates.update({key: 0.0 for key in keys if rates[key] < 60})
        key = keys[int(rng.integers(len(keys)))]
        before = arrivals.checks
        got = queues.over_share(key, unacknowledged=10, now=now)
        expected = not quiet(key, now, limit) and any(quiet(k, now, limit) for k in keys if k != key)
        assert got == expected, (key, now)
        asked += 1
        refused += got
        answered_by_one += got and arrivals.checks - before <= 2
        now += 0.15  # more than QUIET_REFRESH_S: a scan that found no quiet key is not trusted here
    assert refused > 20 and asked - refused > 20, "both answers were exercised"
    assert answered_by_one > 0.9 * refused, f"{answered_by_one} of {refused} refusals from the key found last"


def test_a_device_is_quiet_after_a_span_under_the_limit_and_stops_being_after_a_burst() -> None:
    arrivals: Arrivals[str] = Arrivals(span=10)
    for t in range(10):
        arrivals.add("d", float(t))
    assert not arrivals.quiet("d", 9.5, 2), "heard for less than the span"
    arrivals.add("d", 10.0)
    assert arrivals.quiet("d", 10.5, 2)
    for _ in range(5):
        arrivals.add("d", 11.0)
    assert arrivals.quiet("d", 11.5, 2), "a few bunched up: still quiet on average"
    for _ in range(20):
        arrivals.add("d", 11.0)
    assert not arrivals.quiet("d", 11.5, 2), "a burst above the peak"
    arrivals.add("d", 22.0)
    assert arrivals.quiet("d", 22.5, 2), "the burst left the span"
    assert not arrivals.quiet("d", 40.0, 2), "not heard within the span"


def test_a_device_is_busy_past_a_span_of_messages_at_the_limit() -> None:
    """Busy is more than ``limit`` a second's worth within the last span, however long the device has been
    heard: a quiet device's short backlog after a restart is not, a flooder's is at once."""
    arrivals: Arrivals[str] = Arrivals(span=10)
    for _ in range(20):  # a quiet device's queue from a restart, delivered at once
        arrivals.add("q", 0.0)
    assert not arrivals.busy("q", 0.5, 2), "20 messages: a span's worth at the limit"
    assert not arrivals.quiet("q", 0.5, 2), "heard for less than the span: not quiet either"
    for _ in range(21):  # a flooder's backlog, delivered as fast as it is taken
        arrivals.add("d", 0.0)
    assert arrivals.busy("d", 0.5, 2), "more than a span's worth at once"
    for t in range(1, 11):
        for _ in range(30):
            arrivals.add("d", float(t))
    assert arrivals.busy("d", 10.5, 2), "30 a second for a span"
    assert not arrivals.quiet("d", 10.5, 2)
    arrivals.add("d", 25.0)
    assert not arrivals.busy("d", 25.5, 2), "the flood left the span"
    assert not arrivals.busy("d", 40.0, 2), "not heard within the span"
    assert not arrivals.busy("unknown", 40.0, 2)
    for t in range(41, 52):
        arrivals.add("d", float(t))
    assert not arrivals.busy("d", 51.5, 2), "one a second is under the limit"


def test_recent_samples_are_bounded_in_bytes_at_the_devices_width() -> None:
    budget = 8 * 1024 * 1024
    wide = RecentSamples(50_000, 1000, budget)
    assert wide.capacity == budget // (8 * 1000 + ENTRY_BYTES) < 50_000
    for i in range(3000):
        wide.put(i, i + 1)
        wide.remember(wide.index.find(*id_key(i)), np.full(1000, float(i)), 0.5)
    assert len(wide) == wide.capacity
    assert wide.nbytes <= budget * 1.1
    assert RecentSamples(50_000, 2, budget).capacity == 50_000, "narrow samples keep every row"
    assert RecentSamples(50_000, None, budget).capacity == 50_000, "no width yet: the count decides"


def test_wide_rows_before_the_width_is_locked_keep_the_budget_and_count_the_rows_they_let_go() -> None:
    """A device without ``n_features`` fits its window to the budget at its first row's width: wide rows
    of a device stuck in warm-up never hold more than the budget (the whole capacity at their width
    before: 1.6 GB for 50,000 rows of 4,096 features); locking that width changes nothing."""
    budget = 1024 * 1024
    window = RecentSamples(10_000, None, budget)
    evicted = 0
    for i in range(1000):
        evicted += window.put(i, i + 1)
        evicted += window.remember(window.index.find(*id_key(i)), np.full(500, float(i)), 0.0)
        assert window.nbytes <= budget + 64 * 1024, i
    evicted += window.lock_width(500)
    fitted = budget // (8 * 500 + ENTRY_BYTES)
    assert window.capacity == fitted and len(window) == fitted and evicted == 1000 - fitted
    assert window.awaits(999) and not window.awaits(0), "the newest samples stay"
    taken = window.take(999)
    assert taken is not None and taken[0][0] == 999.0


def test_a_wide_first_row_does_not_shrink_the_window_for_good() -> None:
    """A glitch: the first row is wide, the device's width (locked from the majority) narrow; the window
    holds what the capacity asked for fits at the narrow width, with the rows it still had."""
    budget = 1024 * 1024
    window = RecentSamples(5_000, None, budget)
    window.put(0, 1)
    window.remember(window.index.find(*id_key(0)), np.full(4096, 1.0), 0.0)
    assert window.capacity == budget // (8 * 4096 + ENTRY_BYTES)
    for i in range(1, 20):
        window.put(i, i + 1)
        window.remember(window.index.find(*id_key(i)), np.full(2, float(i)), 0.0)  # aside: another width
    assert window.lock_width(2) == 0 and window.capacity == 5_000 and window.awaits(19) and window.awaits(1)
    for i in range(20, 5_020):
        window.put(i, i + 1)
    assert len(window) == 5_000


def test_rows_of_other_widths_kept_aside_stay_within_the_budget() -> None:
    """Before the width is locked, rows of another width than the first are kept aside; a device that
    alternates widths cannot hold more than the budget there either (the oldest leave, counted)."""
    budget = 256 * 1024
    window = RecentSamples(10_000, None, budget)
    evicted = 0
    for i in range(400):
        evicted += window.put(i, i + 1)
        evicted += window.remember(window.index.find(*id_key(i)), np.full(4000 if i % 2 else 1, 1.0), 0.0)
    aside = window.snapshot()
    assert window._ragged_bytes <= budget and evicted > 0 and window.waiting + evicted <= 400
    assert window.awaits(399), "the newest row stays"
    assert len(aside["waiting"]) == window.waiting


def test_one_width_limit_for_the_setting_the_data_and_the_cloud() -> None:
    with pytest.raises(ValidationError):
        AgentSettings.model_validate({"device_id": "d", "n_features": MAX_FEATURES + 1})
    wide = json.dumps({"id": 1, "x": [0.5] * (MAX_FEATURES + 1)}).encode()
    parsed = parse_samples(wide, None, "classification", 0)
    assert parsed.ids == [] and f"limit of {MAX_FEATURES}" in parsed.rejected[0].reason
    session = DeviceSession(SessionConfig(device_id="d", warmup_samples=3), lambda _r: None, lambda: 0.0)
    session.handle("samples", wide)
    assert session.counters.rejected == 1 and session.counters.samples == 0
    assert session.n_features is None, "a width above the limit is never locked from the data"

"""Every benchmark entry point (``bench/*.py``) runs its ``--quick`` smoke run as a subprocess and exits 0:
the benchmarks stay runnable while the code under them changes. Their figures are not checked here (they
go to docs/benchmarks.md from full runs). Marked ``bench`` (``pytest -m "not bench"`` leaves them out);
outputs go to a temporary directory, never to ``out/`` or ``docs/img``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kernel_agnostic

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
#: Entry point -> its smoke-run arguments ({tmp} is the test's temporary directory).
QUICK: dict[str, list[str]] = {
    "acceptance.py": ["--quick", "--out", "{tmp}"],
    "batch_semantics.py": ["--quick"],
    "bls_accuracy.py": ["--quick", "--out", "{tmp}", "--img", "{tmp}"],
    "bls_paper.py": ["--quick", "--json", "{tmp}/bls_paper.json"],
    "broker_durability.py": ["--quick", "--json", "{tmp}/durability.json"],
    "capacity.py": ["--quick", "--json", "{tmp}/capacity.json"],
    "counters_latency.py": ["--quick", "--json", "{tmp}/counters.json"],
    "edge_loop.py": ["--quick", "--json", "{tmp}/edge_loop.json"],
    "edge_metrics.py": ["--quick", "--json", "{tmp}/edge_metrics.json"],
    "faults.py": ["--quick", "--json", "{tmp}/faults.json"],
    "fleet_views.py": ["--quick", "--json", "{tmp}/fleet_views.json"],
    "fleet_sim.py": ["--quick", "--json", "{tmp}/fleet_sim.json"],
    # The training queue (a Redis of its own, one trainer-worker process): the inline pool has its tests.
    "fleet_storm.py": [
        "--quick",
        "--retune-history",
        "300",
        "--training-workers",
        "1",
        "--json",
        "{tmp}/storm.json",
    ],
    "first_checkpoints.py": ["--quick", "--json", "{tmp}/first_checkpoints.json"],
    "footprint.py": ["--quick", "--json", "{tmp}/footprint.json"],
    "gateway_fairness.py": ["--quick", "--json", "{tmp}/gateway_fairness.json"],
    "heartbeat_store.py": ["--quick", "--json", "{tmp}/heartbeat_store.json"],
    "hostile_device.py": ["--quick", "--json", "{tmp}/hostile.json"],
    "liblinear_speed.py": ["--quick"],
    "mqtt_clients.py": ["--quick", "--json", "{tmp}/clients.json"],
    "mqtt_ingest.py": ["--quick", "--gateway-modes", "exact,vectorised", "--json", "{tmp}/ingest.json"],
    "online_bls.py": ["--quick", "--json", "{tmp}/speed.json"],
    "real_streams.py": ["--quick", "--out", "{tmp}"],
    "rebalance_stream.py": ["--quick", "--out", "{tmp}", "--img", "{tmp}"],
    "request_cpu.py": ["--devices", "20", "--requests", "200", "--json", "{tmp}/request_cpu.json"],
    "retune_cost.py": ["--quick", "--json", "{tmp}/retune_cost.json"],
    "session_cost.py": ["--quick", "--json", "{tmp}/session_cost.json"],
    "shrub_ensembles.py": ["--quick", "--out", "{tmp}", "--img", "{tmp}"],
    "trainer_load.py": ["--quick"],
    "transport_sessions.py": ["--quick", "--json", "{tmp}/transport_sessions.json"],
    "warmup_stall.py": ["--quick", "--json", "{tmp}/stall.json"],
}
#: Entry points that read real data sets (from EDGEDRIFT_DATA_DIR; without it they would download them).
NEEDS_DATA = {
    "acceptance.py",
    "batch_semantics.py",
    "real_streams.py",
    "edge_loop.py",
    "footprint.py",
    "liblinear_speed.py",
    "session_cost.py",
    "shrub_ensembles.py",  # its quick run replays the real keystroke stream beside SEA
}
TIMEOUT_S = 180


def test_every_entry_point_has_a_smoke_run() -> None:
    assert sorted(p.name for p in BENCH.glob("*.py")) == sorted(QUICK)


@pytest.mark.bench
@pytest.mark.parametrize("script", sorted(QUICK))
def test_quick_run(script: str, tmp_path: Path) -> None:
    if script in NEEDS_DATA and not os.environ.get("EDGEDRIFT_DATA_DIR"):
        pytest.skip("EDGEDRIFT_DATA_DIR not set")
    args = [a.replace("{tmp}", str(tmp_path)) for a in QUICK[script]]
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, f"{script} {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

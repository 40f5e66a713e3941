"""A fleet-wide recompute storm against the cloud trainer on PostgreSQL (issue 12's acceptance).

Starts ``edgedrift-cloud serve`` with ``--workers 2`` on its own port and a fresh PostgreSQL registry
(on the server at ``--pg-admin-url`` or, when none answers, a throwaway one), registers N devices
(bulk API; one PUT per device on a server without it), sends every device's heartbeat every 5 s from a
process of its own (gateway batches of 1,000; one request per device on a server without the batch
route; heartbeat_request_p50_ms / p99_ms time them), then lets a
fleet-wide drift make every device request a recompute (a 200x5 binary window, reason ``drift``) at a
uniform time within 10 s. Each device retries as the edge agent does: on 429/503 after the server's
``Retry-After`` plus jitter, on a timeout or 5xx with full-jitter backoff, always with the same
``request_id``. Meanwhile /healthz is probed every 100 ms, the fleet summary and one fleet page every
5 s, and the server's memory (every process) every second.

Written to ``--json``: devices, requested, completed, rejected_429, errors_5xx, lost, p50_ms / p99_ms
(successful attempts), drain_s (last completion minus the burst), healthz_p99_ms, budget_per_min,
max_per_min_observed (the most versions stored in one wall-clock minute, counted from the registry),
fleet_summary_ms / fleet_page_ms (medians), server_rss_mb (peak), and the details behind them.
``--server-pythonpath`` runs an older checkout's server against the same client (today's behaviour).
``--training-workers N`` trains on the job queue instead (``EDGEDRIFT_CLOUD_TRAINING=queue``, a
``redis-server`` of its own, N ``edgedrift-cloud trainer-worker`` processes; a 202 is followed to the
model as the agent does) and adds retune_share (re-tuning recomputes that got their search) and each
worker's CPU seconds; drain_s is the same figure as without it.

    python bench/fleet_storm.py --devices 10000 --json out/storm-10000.json
    python bench/fleet_storm.py --devices 10000 --retune-history 1000 --training-workers 2 --json out/q2.json
    python bench/fleet_storm.py --quick
"""

from __future__ import annotations

from storm.cli import main

if __name__ == "__main__":
    main(__doc__ or "")

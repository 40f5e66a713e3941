"""One hostile device against an honest fleet (issue 28's acceptance): the cloud on PostgreSQL with
``--workers 2``, 1,000 honest devices as agents use it (a heartbeat every 5 s, a recompute on average
every 300 s, half of them re-tuning with their history batches; see ``hostile/honest.py``) for a calm
phase, then the same fleet for an attacked phase while ONE device credential and one unauthenticated
client run every attack of the issue's table at once (``hostile/attacks.py``). The fleet budget is 600
recomputes a minute with the per-device limit lifted (row 12's setting).

Written to ``--json`` (the attacked phase; the calm one under ``calm``): honest_requests,
honest_completed, honest_errors_5xx, honest_429, honest_p99_ms, healthz_p99_ms, worker_rss_max_mb (the
largest uvicorn worker), db_bytes_attacker (its history, versions and heartbeats), goodput_ratio
(completed share attacked / calm), and per attack {name, requests, accepted_2xx, refused_4xx,
errors_5xx, transport_errors, notes}. ``--server-tree`` runs the server from another checkout (a
worktree of main before issue 28 shows today's behaviour).

    python bench/hostile_device.py --json out/hostile.json
    git worktree add --detach /tmp/edgedrift-before <commit before issue 28>
    python bench/hostile_device.py --server-tree /tmp/edgedrift-before --json out/hostile-before.json
    python bench/hostile_device.py --quick
"""

from __future__ import annotations

from hostile.cli import main

if __name__ == "__main__":
    main(__doc__ or "")

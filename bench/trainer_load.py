"""Cloud trainer under load: K concurrent devices retraining, against an in-process train_window loop.

Starts the service with the documented ``edgedrift-cloud serve`` (uvicorn, ``--workers W``) on a free
port with a fresh PostgreSQL registry (``edgedrift_bench_<hex>``, dropped at the end, on the server at
``--pg-admin-url`` or, when none answers, on a throwaway server; ``--database-url`` to use another one,
e.g. SQLite), provisions K devices, and lets K simulated devices (one
``httpx.AsyncClient`` each, one asyncio loop) post 200-label windows back to back to
``POST /v1/devices/{id}/models``: seeded synthetic classification data with d = 5 and d = 54, as JSON
and as the binary body of ``edgedrift.wire.encode_window``, for ``--seconds`` (or ``--requests``) per
setting. Logistic learner with C = 1 by default (``--C auto``, ``--learner shrub``).

Reported per (d, body, K, workers): retrains per second, p50 / p99 request latency as the device sees
it, mean bytes in / out per recompute, the pure training time measured two ways in the same run --
(a) ``train_window`` called in-process on the very same decoded windows (p50) and (b) the service's
own ``train_ms`` (p50) -- and the overhead ratio p50 latency / p50 (a). Peer: a plain in-process loop
of ``train_window`` on one core (retrains/s), so the throughput ratio is service / in-process. CPU
ms per request of the service's processes, of this client process, of PostgreSQL and of the rest of
the machine (anything else running: check the load average column) come from /proc. At the end every
device's registry counter (``GET /v1/devices/{id}/counters``) must equal its number of 2xx responses,
and every non-2xx is listed.

A second table times the sections of one request in-process with the service's own functions (auth,
body parse + checks, training, registry insert + commit, response build, log lines, thread hops), so
the remainder of the K = 1 latency is HTTP + ASGI/FastAPI + the client. ``--profile DIR`` samples the
service with py-spy during each timed phase and prints where its Python CPU time goes.

    python bench/trainer_load.py [--workers 2] [--clients 8] [--seconds 10] [--quick]
    python bench/trainer_load.py --workers 1,2 --clients 1,8        # the grid, one server per W
    python bench/trainer_load.py --seconds 5 --profile out/pyspy     # needs py-spy (pip install py-spy)
"""

from __future__ import annotations

from loadtest.cli import main

if __name__ == "__main__":
    main(__doc__ or "")

"""MQTT ingest: samples per second through a real Mosquitto -> the edge agent -> predictions published.

Everything runs as separate processes on this machine, as deployed: our own Mosquitto on a free port
(``listener PORT 127.0.0.1``, no persistence), the cloud trainer (``edgedrift-cloud serve``, SQLite, one
worker; the agent needs it for its first model after warm-up and for DRUiD's recomputes), the agent
(``python -m edgedrift_edge.cli run`` with ``EDGEDRIFT_EDGE_*``: strategy druid, warm-up 2000 samples),
and counting subscribers (``bench/ingest/sink.py``: a bare paho client in its own process that
json-decodes every message and counts its samples into a small shared file).

Data: a seeded Sine1+ stream (d = 5 by default, abrupt drift every 100k samples, so DRUiD recomputes
during the runs), encoded once before each phase exactly like ``edgedrift-edge replay`` does
(``{"id": i, "x": [...], "y": ±1}``, every 10th sample labeled inline; a batch is ``{"samples": [...]}``
of 100). Nothing is encoded while the clock runs.

Measurements:

* **publisher alone**: the same messages to a topic nobody subscribes to, until the broker acknowledged
  the last one (QoS 1) or answered a PINGREQ sent after it (QoS 0) -- the rate the publisher can offer.
  The publisher is a minimal MQTT 3.1.1 client on a raw socket writing pre-encoded PUBLISH packets many
  per ``sendall`` (a paho publisher would be the bottleneck: docs/benchmarks.md, §6);
* **peer**: a bare paho subscriber process that only json-decodes each message (a batch: the whole
  batch) -- from the first publish to its last decode;
* **agent**: from the first publish to the last prediction received by the counting subscriber (which
  decodes the predictions the way the peer decodes the samples). The ratio agent / peer is the agent's
  overhead over "just receiving and decoding". Each agent is warmed up first (2000 samples + its first
  model from the cloud) so the phases measure the running agent.

The publisher is closed-loop: at most ``--window`` single-sample messages (5,000) or ``--batch-window``
batches (200) are outstanding (published but not yet counted by the phase's subscriber), so the agent's
bounded queue (20,000 messages) never overflows and what is measured is the sustained rate, not how many
messages a queue can swallow. Lost messages (an overflow, a QoS-0 drop) would show as fewer samples than
published and are reported. Everything shares the machine's cores: the CPU table has a "rest of the
machine" column (other work running meanwhile) -- check it before trusting a figure.

QoS: the targets are judged at QoS 1 -- the agent's default (``qos=1``), the replay command's default and
what a deployment uses (at-least-once with redelivery de-duplication). QoS 0 is measured alongside.

Memory: a fresh agent (QoS 1, batches of 100) takes ``--memory-samples`` (1,000,000) samples while its
VmRSS (``/proc/PID/status``) is read every 50k samples; start = right after warm-up. Startup: the agent
is spawned ``--startup-runs`` times (fresh device each time); spawn -> its ``ready`` line, -> its retained
``online`` status, -> its first prediction of a probe sample published every 5 ms from the spawn on.

Per agent thread (worker, paho network thread, ...): CPU, run-queue wait and context switches from
``/proc/PID/task/TID/{schedstat,status}`` in every run. ``--profile DIR`` also samples the agent with
py-spy (``record --threads --idle``, raw stacks into DIR; py-spy from PATH) during each
agent phase and prints the µs per message each thread spends per section (JSON decode, parse, EdgeLoop,
JSON encode, paho publish, paho packet reads/writes, waiting for work), and the share of wall time a
thread is blocked on the GIL (wall - CPU - run queue - waiting for work).

    python bench/mqtt_ingest.py                          # full run
    python bench/mqtt_ingest.py --quick                  # smoke run
    python bench/mqtt_ingest.py --samples 100000 --memory-samples 0 --startup-runs 0 --profile out/pyspy
    python bench/mqtt_ingest.py --qos none --memory-samples 3000000     # memory and startup only
"""

from __future__ import annotations

import sys

from ingest.cli import main

if __name__ == "__main__":
    sys.exit(main(__doc__ or ""))

"""Publish from a process of its own.

A test that times other devices' messages while it floods the broker must not flood from its own process:
publishing tens of thousands of messages through paho keeps the GIL busy, and the subscribers' threads of
the measuring process then stamp arrivals late (a gateway's quiet devices measured 0.5–2.5 s p99 that way,
0.13–0.15 s with the flood published from here). :func:`publish_from_process` hands the payloads to
``python -m edgedrift_harness.publisher_process`` on its standard input and waits until the broker
acknowledged every one (:func:`edgedrift_harness.mqtt.publish` in that process).
"""

from __future__ import annotations

import argparse
import pickle
import subprocess
import sys
from collections.abc import Iterable

from edgedrift_harness.mqtt import publish

__all__ = ["publish_from_process"]


def publish_from_process(
    url: str, topic: str, payloads: Iterable[bytes], qos: int = 1, timeout: float = 60.0
) -> None:
    """:func:`~edgedrift_harness.mqtt.publish` ``payloads`` from a child process; raises with the child's
    error output if it failed (a broker that did not acknowledge within ``timeout`` among them)."""
    data = pickle.dumps([bytes(p) for p in payloads])
    command = [sys.executable, "-m", __name__, url, topic, "--qos", str(qos), "--timeout", str(timeout)]
    done = subprocess.run(command, input=data, capture_output=True, timeout=timeout + 60, check=False)
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"publishing to {topic} from a child process failed: {error[0]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Publish the pickled payloads read from stdin.")
    parser.add_argument("url")
    parser.add_argument("topic")
    parser.add_argument("--qos", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    payloads: list[bytes] = pickle.loads(sys.stdin.buffer.read())  # written by publish_from_process only
    publish(args.url, args.topic, payloads, qos=args.qos, timeout=args.timeout)


if __name__ == "__main__":
    main()

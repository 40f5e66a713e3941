"""edgedrift_edge.transport.sessions.session_limit: a gateway's device sessions fit its descriptor limit,
which it raises first as far as the hard limit allows (many systems start a process at a soft 1,024)."""

from __future__ import annotations

import subprocess
import sys

import pytest

resource = pytest.importorskip("resource")

PROBE = """
import resource, sys
from edgedrift_edge.transport.connection import MqttTransport
from edgedrift_edge.transport.sessions import MAX_SESSIONS, RESERVED_FDS, DeviceSessions, session_limit
soft, hard = map(int, sys.argv[1:3])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
sessions = DeviceSessions(lambda d, b: MqttTransport("mqtt://127.0.0.1:1", "gw", [], "s"), lambda t: None)
soft_now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
print(session_limit(), soft_now, sessions.limit, MAX_SESSIONS, RESERVED_FDS)
"""


def probe(soft: int, hard: int) -> list[int]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(soft), str(hard)], capture_output=True, text=True, check=True
    )
    return [int(v) for v in done.stdout.split()]


def _hard() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 1 << 20 if hard == resource.RLIM_INFINITY else hard


def test_the_soft_limit_is_raised_to_hold_every_session() -> None:
    if _hard() < 1_200:
        pytest.skip("the hard descriptor limit is below what the test needs")
    limit, soft, sessions_limit, most, reserved = probe(256, _hard())
    assert limit == sessions_limit == most == 1_000
    assert soft >= most + reserved, "raised from 256"


def test_a_low_hard_limit_caps_the_sessions_below_it() -> None:
    limit, soft, sessions_limit, _most, reserved = probe(256, 400)
    assert soft == 400 and limit == sessions_limit == 400 - reserved

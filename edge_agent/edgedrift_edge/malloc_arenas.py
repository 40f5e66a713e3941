"""How many malloc arenas the agent process may use (glibc's ``M_ARENA_MAX``).

By default glibc gives each thread that allocates its own arena, up to eight per core; memory freed in
one arena is not reused by another thread's allocations. The agent's threads (the worker, the MQTT I/O
thread, the cloud client's loop) each grow one, and a 1,000-device gateway held about 7 MB more after
1M samples than with two arenas, for no measured change in throughput (docs/benchmarks-history.md,
"One window of recent samples, capped malloc arenas").
``mallopt`` must run before those threads start; it is a no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util

#: ``M_ARENA_MAX`` of glibc's ``<malloc.h>``.
M_ARENA_MAX = -8


def cap_arenas(limit: int) -> bool:
    """Allow at most ``limit`` malloc arenas from now on; False where this C library has no ``mallopt``
    (not glibc) or refused the value."""
    if limit < 1:
        raise ValueError("at least one arena")
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, limit))

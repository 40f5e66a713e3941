"""The agent's cap on glibc malloc arenas: threads that allocate share the capped arenas instead of each
growing its own (counted from glibc's own ``malloc_info`` report, in a fresh process)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from edgedrift_edge.malloc_arenas import cap_arenas

PROBE = r"""
import ctypes, ctypes.util, os, sys, tempfile, threading
from edgedrift_edge.malloc_arenas import cap_arenas

limit = int(sys.argv[1])
if limit:
    assert cap_arenas(limit)
ready = threading.Barrier(7)
blocks = []

def work() -> None:
    blocks.append([ctypes.create_string_buffer(4096) for _ in range(200)])  # malloc in this thread
    ready.wait()

threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads:
    t.start()
ready.wait()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.fdopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
with tempfile.TemporaryFile() as f:
    stream = libc.fdopen(os.dup(f.fileno()), b"w")
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    f.seek(0)
    print(f.read().decode().count("<heap nr="))
for t in threads:
    t.join()
"""


def arenas(limit: int) -> int:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(limit)], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="M_ARENA_MAX is glibc's")
def test_threads_share_the_capped_arenas() -> None:
    assert arenas(0) >= 3, "without the cap, allocating threads grow arenas of their own"
    assert arenas(1) == 1
    assert arenas(2) == 2


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one arena"):
        cap_arenas(0)

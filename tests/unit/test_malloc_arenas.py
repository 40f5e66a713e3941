"""glibc's malloc arenas of the agent come from the environment (``MALLOC_ARENA_MAX``, which glibc reads at
start), set by the edge image and by the harness as the image does: threads that allocate then share the
capped arenas instead of each growing its own (counted from glibc's own ``malloc_info`` report)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
from support.compose import EDGE_DOCKERFILE, dockerfile_env

from edgedrift_harness.agent import IMAGE_ENVIRONMENT, agent_environment

PROBE = r"""
import ctypes, ctypes.util, os, tempfile, threading

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


def arenas(limit: str | None) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    if limit is not None:
        env["MALLOC_ARENA_MAX"] = limit
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return int(done.stdout.strip())


def test_the_image_and_the_harness_cap_the_arenas_at_two() -> None:
    assert dockerfile_env(EDGE_DOCKERFILE)["MALLOC_ARENA_MAX"] == IMAGE_ENVIRONMENT["MALLOC_ARENA_MAX"] == "2"
    saved = os.environ.pop("MALLOC_ARENA_MAX", None)
    try:
        assert agent_environment({"device_id": "d"})["MALLOC_ARENA_MAX"] == "2"
        os.environ["MALLOC_ARENA_MAX"] = "1"
        assert agent_environment({"device_id": "d"})["MALLOC_ARENA_MAX"] == "1", "the caller's value wins"
    finally:
        os.environ.pop("MALLOC_ARENA_MAX", None)
        if saved is not None:
            os.environ["MALLOC_ARENA_MAX"] = saved


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="MALLOC_ARENA_MAX is glibc's")
def test_threads_share_the_arenas_the_environment_caps() -> None:
    assert arenas(None) >= 3, "without the cap, allocating threads grow arenas of their own"
    assert arenas("1") == 1
    assert arenas(IMAGE_ENVIRONMENT["MALLOC_ARENA_MAX"]) == 2

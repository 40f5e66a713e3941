"""The kernels-on pass's trace end to end: a pytest session over sample test modules (a subprocess of this
test, with the plugin ``support.kernel_trace``) records the modules whose processes used a kernel (one
started by a module fixture, one a fork server's child asked for by a later module) and not the module that
only computes with numpy and imports the kernels; a session-wide fixture's use asks for the whole suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.kernel_trace import ALL, plan

from edgedrift.kernel_trace import MODULE_VAR, TOUCHES, TRACE_VAR

pytest.importorskip("edgedrift._kernels", reason="edgedrift._kernels is not built here")

TESTS = Path(__file__).resolve().parents[1]
LEARN = (
    "import numpy as np; from edgedrift.learners import ForgettingNewton; "
    "ForgettingNewton(2).learn_one(np.ones(2), 1.0)"
)

SUBPROCESS_MODULE = f'''
import multiprocessing, os, subprocess, sys
from concurrent.futures import ProcessPoolExecutor
import pytest

@pytest.fixture(scope="module")
def learner_process():
    argv = [sys.executable, "-c", "{LEARN}; import sys; sys.stdin.read()"]
    process = subprocess.Popen(argv, stdin=subprocess.PIPE)
    yield process
    process.communicate(b"", timeout=60)
    assert process.returncode == 0

def test_a_process_the_module_fixture_started_learns(learner_process):
    assert learner_process.poll() is None

def test_the_fork_server_starts_here_without_a_kernel():
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver")) as pool:
        assert pool.submit(os.getpid).result() != os.getpid()
'''
NUMPY_MODULE = """
import subprocess, sys
import numpy as np

def test_numpy_and_an_import_of_the_kernels_use_none():
    assert float(np.ones(3) @ np.ones(3)) == 3.0
    subprocess.run([sys.executable, "-c", "from edgedrift import kernels"], check=True, timeout=60)
"""
FORK_SERVER_MODULE = """
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from edgedrift import kernels

def test_a_fork_server_child_asked_for_here_records_this_module():
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver")) as pool:
        assert pool.submit(kernels.path).result() == "compiled"
"""
SESSION_FIXTURE_MODULE = f'''
import subprocess, sys
import pytest

@pytest.fixture(scope="session")
def shared_learner():
    subprocess.run([sys.executable, "-c", "{LEARN}"], check=True, timeout=60)

def test_uses_the_session_fixture(shared_learner):
    pass
'''


def _session(tmp_path: Path, modules: dict[str, str]) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Run pytest with the plugin over ``modules`` (name -> source) in their own rootdir, traced."""
    root, trace = tmp_path / "suite", tmp_path / "trace"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n")
    for name, source in modules.items():
        (root / name).write_text(source)
    env = {k: v for k, v in os.environ.items() if k not in ("EDGEDRIFT_NO_KERNELS", MODULE_VAR)}
    env |= {TRACE_VAR: str(trace), "PYTHONPATH": str(TESTS)}
    argv = [sys.executable, "-m", "pytest", "-p", "support.kernel_trace", "-p", "no:cacheprovider", "-q"]
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return trace, done


def test_the_trace_lists_the_modules_whose_processes_used_a_kernel(tmp_path: Path) -> None:
    trace, _ = _session(
        tmp_path,
        {
            "test_a_subprocess.py": SUBPROCESS_MODULE,
            "test_b_numpy.py": NUMPY_MODULE,
            "test_c_fork_server.py": FORK_SERVER_MODULE,
        },
    )
    rows = [line.split("\t") for line in (trace / TOUCHES).read_text().splitlines()]
    assert {(module, what) for module, what, _, _ in rows} == {
        ("test_a_subprocess.py", "newton_learn"),
        ("test_c_fork_server.py", "path()"),
    }, rows
    found = plan(trace)
    assert not found.whole and found.again == ["test_a_subprocess.py", "test_c_fork_server.py"]
    assert found.collected["test_b_numpy.py"] == (1, False)
    printed = _read_plan(trace)
    assert printed.stdout.split() == ["test_a_subprocess.py", "test_c_fork_server.py"]
    assert "2 of 3 test modules" in printed.stderr


def test_a_session_fixtures_use_asks_for_the_whole_suite(tmp_path: Path) -> None:
    trace, _ = _session(tmp_path, {"test_session.py": SESSION_FIXTURE_MODULE})
    found = plan(trace)
    assert found.whole and "<session fixture shared_learner>" in found.explain()
    printed = _read_plan(trace)
    assert printed.stdout.strip() == ALL


def test_without_the_variable_the_kernels_are_the_extension_and_the_trace_is_not_imported() -> None:
    probe = (
        "import sys; from edgedrift import kernels, _kernels; "
        "print(kernels.MODULE is _kernels, 'edgedrift.kernel_trace' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("EDGEDRIFT_NO_KERNELS", TRACE_VAR)}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["True", "False"]


def _read_plan(trace: Path) -> subprocess.CompletedProcess[str]:
    """``python -m support.kernel_trace TRACE``, as scripts/test.sh calls it: the modules on stdout."""
    return subprocess.run(
        [sys.executable, "-m", "support.kernel_trace", str(trace)],
        env={**os.environ, "PYTHONPATH": str(TESTS)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

"""The record of kernel uses behind CI's numpy pass (edgedrift.kernel_trace) and the plan it gives
(support.kernel_trace): one line per (process, test module), the extension's own objects handed out, no
trace without ``EDGEDRIFT_KERNEL_TRACE``, and which modules the numpy pass re-runs."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest
from support.kernel_trace import COLLECTED, plan

from edgedrift import kernel_trace
from edgedrift.kernel_trace import TOUCHES, TRACE_VAR, TracedKernels, touch_lines, traced

compiled = pytest.importorskip("edgedrift._kernels", reason="edgedrift._kernels is not built here")


def _touches(folder: Path) -> list[list[str]]:
    return [line.split("\t") for line in (folder / TOUCHES).read_text().splitlines()]


def test_no_trace_without_the_variable(tmp_path: Path) -> None:
    assert traced(compiled, {}) is None
    assert traced(compiled, {TRACE_VAR: ""}) is None
    assert isinstance(traced(compiled, {TRACE_VAR: str(tmp_path / "trace")}), TracedKernels)


def test_a_kernel_read_is_recorded_once_per_module_and_is_the_extensions_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = traced(compiled, {TRACE_VAR: str(tmp_path)})
    assert proxy is not None and isinstance(proxy, ModuleType)
    assert not (tmp_path / TOUCHES).exists(), "making the proxy is no use"
    monkeypatch.setattr(kernel_trace, "_current", "tests/unit/test_a.py")  # what publish() sets
    assert proxy.linear_score is compiled.linear_score
    assert proxy.in_range is compiled.in_range and proxy.LayoutError is compiled.LayoutError
    assert proxy.__name__ == compiled.__name__ and set(dir(proxy)) == set(dir(compiled))
    monkeypatch.setattr(kernel_trace, "_current", "tests/unit/test_b.py")
    proxy.trace.touch("path()")
    assert proxy.linear_score is compiled.linear_score
    pid = str(os.getpid())
    assert [row[:3] for row in _touches(tmp_path)] == [
        ["tests/unit/test_a.py", "linear_score", pid],
        ["tests/unit/test_b.py", "path()", pid],
    ]


def _write(folder: Path, collected: list[str], touches: list[str]) -> Path:
    folder.mkdir()
    (folder / COLLECTED).write_text("".join(f"{row}\n" for row in collected))
    (folder / TOUCHES).write_text("".join(f"{row}\n" for row in touches))
    return folder


def test_the_plan_reruns_the_modules_outside_the_quick_tier_that_used_a_kernel(tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "t",
        [
            "tests/unit/test_k.py\t40\t1",
            "tests/integration/test_agent.py\t12\t0",
            "tests/integration/test_db.py\t9\t0",
        ],
        [
            "tests/unit/test_k.py\tnewton_learn\t7\tpytest",
            "tests/integration/test_agent.py\tid_find\t8\tedgedrift-edge",
        ],
    )
    found = plan(folder)
    assert not found.whole and found.again == ["tests/integration/test_agent.py"]
    assert "1 of them outside it (12 tests)" in found.explain()


def test_a_use_outside_one_module_makes_it_the_whole_selection(tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "t",
        ["tests/integration/test_agent.py\t12\t0"],
        ["<session fixture broker>\tid_find\t9\tedgedrift-edge", "\tlinear_score\t10\tpytest"],
    )
    found = plan(folder)
    assert found.whole and "<session fixture broker>" in found.explain() and "<no test>" in found.explain()


def test_no_touches_file_means_no_module_used_a_kernel(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / COLLECTED).write_text("tests/integration/test_db.py\t9\t0\n")
    found = plan(folder)
    assert not found.whole and found.again == [] and found.used == {}


def test_a_process_that_cannot_append_records_in_a_file_of_its_own(tmp_path: Path) -> None:
    """Under a file-size limit below the shared file's size (the disk-full fault runs its agent at 1 KiB)
    the use goes to touches-PID.tsv, and the reader takes both; the process never fails for its trace."""
    import subprocess
    import sys

    (tmp_path / TOUCHES).write_text("x" * 4096 + "\n")
    code = (
        "import resource, sys; from pathlib import Path; "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024)); "
        "from edgedrift.kernel_trace import Trace; "
        "Trace(Path(sys.argv[1])).touch('newton_learn')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = touch_lines(tmp_path)
    assert len(lines) == 2 and lines[1].split("\t")[1] == "newton_learn", lines
    assert len(list(tmp_path.glob("touches-*.tsv"))) == 1

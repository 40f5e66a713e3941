"""Every code block of the README runs as written (or says why not): the Python snippet, and the cloud
trainer's commands against a real server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from edgedrift_harness.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(
    r"(?:<!-- readme-test: skip: (?P<why>[^>]+) -->\n)?^```(?P<lang>\w+)\n(?P<code>.*?)^```$", re.M | re.S
)


def blocks() -> list[tuple[str, str, str | None]]:
    """(language, code, reason it is not run here) of every fenced block."""
    return [(m["lang"], m["code"], m["why"]) for m in FENCE.finditer(README.read_text())]


def test_every_block_runs_here_or_says_why_not() -> None:
    found = blocks()
    assert len(found) == README.read_text().count("\n```") // 2, "a block the pattern does not see"
    run_here = [(lang, code) for lang, code, why in found if why is None]
    assert [lang for lang, _ in run_here] == ["bash", "python"], "a new block needs a test or a skip reason"
    assert all(why.strip() for _, _, why in found if why is not None)


def test_the_python_snippet_runs() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_snippet.py"), str(README)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    recomputes = int(re.search(r"recomputes (\d+)", done.stdout)[1])  # type: ignore[index]
    assert recomputes >= 1, "the snippet's drifting stream must make DRUiD recompute"


def test_the_cloud_trainer_commands_run_as_written(tmp_path: Path) -> None:
    """The block's three commands in one shell, in a scratch directory: the token is exported once,
    add-device needs only the database and prints the secret, serve prints its URL and dashboard link
    and then answers with that secret. Only the port differs: 8000 may be taken on a test machine."""
    (code,) = [code for lang, code, why in blocks() if lang == "bash" and why is None]
    assert "8000" in code and "edgedrift-cloud serve" in code
    port = free_port()
    venv_bin = str(Path(sys.executable).parent)
    script = code.replace("8000", str(port)).replace(".venv/bin/", venv_bin + "/")
    proc = subprocess.Popen(
        ["bash", "-euc", script],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"PATH": f"{venv_bin}:/usr/bin:/bin", "HOME": str(tmp_path)},
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        while not any("serving on" in line for line in lines) and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        output = "".join(lines)
        url = f"http://127.0.0.1:{port}"
        assert "registered device gw-1" in output, output
        assert f"serving on {url}" in output and f"{url}/dashboard#token=" in output, output
        secret = re.search(r"secret \(shown once\): (\S+)", output)[1]  # type: ignore[index]
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        answer = httpx.get(
            f"{url}/v1/devices/gw-1/counters", headers={"Authorization": f"Bearer {secret}"}, timeout=10
        )
        assert answer.status_code == 200 and answer.json()["device_id"] == "gw-1", answer.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the shell and the server it started
        proc.wait(timeout=30)

"""``edgedrift evaluate`` as a user runs it: a subprocess of this interpreter's entry point, its
``results.json`` read back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EDGEDRIFT = Path(sys.executable).parent / "edgedrift"


def evaluate_results(args: list[str], out: Path) -> list[dict[str, Any]]:
    """Run ``edgedrift evaluate ARGS --out OUT`` (exit 0 asserted) and return its results.json."""
    proc = subprocess.run(
        [str(EDGEDRIFT), "evaluate", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    results: list[dict[str, Any]] = json.loads((out / "results.json").read_text())
    return results

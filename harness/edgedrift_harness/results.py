"""Benchmark results on disk: one way to write a ``--json`` file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any, indent: int = 2) -> None:
    """Write ``data`` as JSON to ``path`` (parent folders created; values JSON cannot hold as text)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent, default=str) + "\n")

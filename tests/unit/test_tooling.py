"""The habits of the repository hold: the pre-commit hooks run what CI runs, and CI runs the README's
test command."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_pre_commit_runs_every_check_of_the_ci_command() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text()
    checks = re.findall(r"^\.venv/bin/(ruff check|ruff format --check|mypy|python -m pytest)", script, re.M)
    assert checks == ["ruff check", "ruff format --check", "mypy", "python -m pytest"]
    hooks = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"][0]["hooks"]
    entries = " | ".join(h["entry"] for h in hooks)
    for check in checks:
        assert f".venv/bin/{check}" in entries, check
    assert any(h["entry"] == "bash scripts/test.sh -q" and h.get("stages") == ["pre-push"] for h in hooks)


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands[1] == "bash scripts/test.sh"
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith(commands[1])

"""The Dockerfiles and .dockerignore read without a Docker engine: instructions of the final stage, what
COPY brings in, what pip installs, which console scripts an image ends up with, what enters the build
context (for the tests/unit/test_compose_*.py files)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCKERIGNORE = ROOT / ".dockerignore"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int


def instructions(path: Path) -> list[Instruction]:
    """Instructions with their continuation lines joined, comments dropped; ``stage`` counts FROMs."""
    out: list[Instruction] = []
    pending = ""
    stage = -1
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).strip().partition(" ")
        pending = ""
        if keyword.upper() == "FROM":
            stage += 1
        out.append(Instruction(keyword.upper(), args.strip(), stage))
    return out


def final_stage(path: Path) -> list[Instruction]:
    found = instructions(path)
    last = max(i.stage for i in found)
    return [i for i in found if i.stage == last]


def exec_form(instruction: Instruction) -> list[str]:
    value = json.loads(instruction.args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), instruction
    return value


def only(found: list[Instruction], keyword: str) -> Instruction | None:
    """The instruction that counts (the last one), if any."""
    matching = [i for i in found if i.keyword == keyword]
    return matching[-1] if matching else None


def required(found: list[Instruction], keyword: str) -> Instruction:
    instruction = only(found, keyword)
    assert instruction is not None, f"no {keyword} instruction"
    return instruction


@dataclass(frozen=True)
class Copy:
    sources: tuple[str, ...]
    destination: str
    from_stage: str | None


def copies(path: Path) -> list[Copy]:
    out = []
    for i in instructions(path):
        if i.keyword not in ("COPY", "ADD"):
            continue
        tokens = json.loads(i.args) if i.args.startswith("[") else shlex.split(i.args)
        flags = {t.split("=", 1)[0]: t.partition("=")[2] for t in tokens if t.startswith("--")}
        paths = [t for t in tokens if not t.startswith("--")]
        out.append(Copy(tuple(paths[:-1]), paths[-1], flags.get("--from")))
    return out


def pip_installed_projects(path: Path) -> dict[str, set[str]]:
    """Local projects installed by ``pip install ./dir[extras]`` in RUN lines: dir -> extras."""
    found: dict[str, set[str]] = {}
    for i in instructions(path):
        if i.keyword != "RUN":
            continue
        lexer = shlex.shlex(i.args, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        commands: list[list[str]] = [[]]
        for token in lexer:
            if token in ("&&", "||", ";", "|"):
                commands.append([])
            else:
                commands[-1].append(token)
        for tokens in commands:
            if "pip" not in " ".join(tokens[:3]) or "install" not in tokens:
                continue
            for token in tokens[tokens.index("install") + 1 :]:
                if token.startswith("./"):
                    match = re.fullmatch(r"\./([^\[]+?)/?(?:\[(.*)\])?", token)
                    assert match, token
                    extras = {e.strip() for e in (match.group(2) or "").split(",") if e.strip()}
                    found[match.group(1)] = extras
    return found


def pyproject(project_dir: str) -> dict[str, Any]:
    return tomllib.loads((ROOT / project_dir / "pyproject.toml").read_text())


def console_scripts(dockerfile: Path) -> dict[str, str]:
    """Console scripts the image installs (``[project.scripts]`` of its local projects): name -> target."""
    scripts: dict[str, str] = {}
    for project_dir in pip_installed_projects(dockerfile):
        scripts.update(pyproject(project_dir)["project"].get("scripts", {}))
    return scripts


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """(negated, regex) per line, in order; Docker's syntax: ``*``, ``?``, ``**``, a leading ``!``."""
    patterns = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = line.lstrip("!").strip().strip("/")
        regex = ""
        i = 0
        while i < len(line):
            if line.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif line.startswith("**", i):
                regex += ".*"
                i += 2
            elif line[i] == "*":
                regex += "[^/]*"
                i += 1
            elif line[i] == "?":
                regex += "[^/]"
                i += 1
            elif line[i] == "[":
                end = line.index("]", i)
                regex += line[i : end + 1]
                i = end + 1
            else:
                regex += re.escape(line[i])
                i += 1
        patterns.append((negated, re.compile(regex)))
    return patterns


def in_build_context(relative: str) -> bool:
    """Whether .dockerignore lets ``relative`` (a path in the repository) into the build context."""
    parts = Path(relative).parts
    excluded = False
    for negated, pattern in dockerignore_patterns():
        # A pattern matches the path or any of its parent directories (as Docker's matcher does).
        if any(pattern.fullmatch("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            excluded = not negated
    return not excluded


def source_files(directory: Path) -> list[str]:
    """Files under ``directory`` that git tracks or would track (so no caches, builds or egg-info)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", str(directory)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if (ROOT / line).is_file()]

"""Run every ```python block of a Markdown file (the README by default), each in a fresh namespace, and
exit non-zero at the first that fails. Standard library only: scripts/wheels.sh runs it in a clean virtual
environment, tests/integration/test_readme.py in the development one."""

from __future__ import annotations

import re
import sys
from pathlib import Path

BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks(markdown: str) -> list[str]:
    return [m.group(1) for m in BLOCK.finditer(markdown)]


def main(argv: list[str]) -> int:
    path = Path(argv[1] if len(argv) > 1 else Path(__file__).parent.parent / "README.md")
    blocks = python_blocks(path.read_text())
    if not blocks:
        print(f"{path}: no python block", file=sys.stderr)
        return 1
    for i, code in enumerate(blocks, 1):
        exec(compile(code, f"{path.name} python block {i}", "exec"), {"__name__": "__readme__"})
    print(f"{path.name}: {len(blocks)} python block(s) ran", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

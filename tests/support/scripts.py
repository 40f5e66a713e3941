"""Scripts of the repository that are no package (deploy/*.py) imported as modules for the tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str) -> ModuleType:
    """``path`` as the module ``name``, once (registered in sys.modules: dataclasses need it), with its
    folder on sys.path as running it puts it there (deploy/monitoring_smoke.py imports deploy/smoke.py)."""
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]

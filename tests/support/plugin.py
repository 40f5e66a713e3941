"""The example third-party package (tests/plugin_package) made visible as if it were installed.

``importlib.metadata`` finds a distribution by a ``<name>-<version>.dist-info`` folder on ``sys.path``;
:func:`example_plugin` writes one (its entry points read from the package's own pyproject.toml) and puts
it and the package's source on ``sys.path``. On exit both go away and the strategy catalogue forgets
the plugin, so later tests see the catalogue as installed.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edgedrift.adapters.entry_points import GROUP, strategy_catalogue

PLUGIN_ROOT = Path(__file__).resolve().parents[1] / "plugin_package"
PLUGIN_MODULE = "edgedrift_example_plugin"


def write_dist_info(site: Path) -> Path:
    """``site/edgedrift_example_plugin-0.1.0.dist-info`` with METADATA and entry_points.txt."""
    project = tomllib.loads((PLUGIN_ROOT / "pyproject.toml").read_text())["project"]
    points = project["entry-points"][GROUP]
    dist = site / f"{PLUGIN_MODULE}-{project['version']}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = [f"[{GROUP}]", *(f"{name} = {target}" for name, target in points.items())]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return dist


@contextmanager
def example_plugin(site: Path) -> Iterator[Path]:
    """The example plugin installed into ``site`` for the duration of the block."""
    write_dist_info(site)
    added = [str(site), str(PLUGIN_ROOT)]
    sys.path[:0] = added
    try:
        yield site
    finally:
        for entry in added:
            sys.path.remove(entry)
        sys.modules.pop(PLUGIN_MODULE, None)
        strategy_catalogue().refresh()

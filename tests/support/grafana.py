"""deploy/grafana/dashboard.py (a script, not a package) imported for the tests, and its queries."""

from __future__ import annotations

from types import ModuleType

from support.dockerfiles import ROOT
from support.scripts import load_script

GENERATOR = ROOT / "deploy" / "grafana" / "dashboard.py"


def dashboard_generator() -> ModuleType:
    return load_script(GENERATOR, "edgedrift_grafana_dashboard")


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the generated dashboard."""
    panels = dashboard_generator().dashboard()["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]

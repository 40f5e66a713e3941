"""deploy/grafana/dashboard.py (a script, not a package) imported for the tests, and its queries."""

from __future__ import annotations

from types import ModuleType

from support.dockerfiles import ROOT
from support.scripts import load_script

GENERATOR = ROOT / "deploy" / "grafana" / "dashboard.py"


def dashboard_generator() -> ModuleType:
    return load_script(GENERATOR, "edgedrift_grafana_dashboard")


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the generated dashboard: its panels', annotations' and variables'."""
    board = dashboard_generator().dashboard()
    panels = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    annotations = [a["expr"] for a in board["annotations"]["list"]]
    variables = [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return panels + annotations + variables

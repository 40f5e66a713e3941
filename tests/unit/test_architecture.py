"""The layering of docs/architecture.md, checked on the import statements of every package: the core
imports neither side, the edge stays light, the evaluator needs no web service, only the demo (a
composition root) and the benchmarks sit above everything."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "edgedrift": ROOT / "shared" / "edgedrift",
    "edgedrift_edge": ROOT / "edge_agent" / "edgedrift_edge",
    "edgedrift_cloud": ROOT / "cloud_trainer" / "edgedrift_cloud",
    "edgedrift_eval": ROOT / "evaluator" / "edgedrift_eval",
    "edgedrift_harness": ROOT / "harness" / "edgedrift_harness",
    "edgedrift_demo": ROOT / "demo" / "edgedrift_demo",
}
OURS = set(PACKAGES)
TRAINING_LIBS = {"sklearn", "liblinear", "imblearn"}
WEB_LIBS = {"fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg", "pydantic_settings"}
#: MQTT clients other than paho-mqtt: the edge speaks MQTT through paho only (the harness's embedded
#: broker is amqtt, a broker, not a client of the agent).
OTHER_MQTT = {"amqtt", "gmqtt", "aiomqtt", "asyncio_mqtt", "hbmqtt"}
#: package -> (our packages it may import, third-party top-level names it must not import)
ALLOWED: dict[str, tuple[set[str], set[str]]] = {
    "edgedrift": ({"edgedrift"}, WEB_LIBS | {"paho", "httpx"}),
    # pydantic-settings reads the agent's settings, as the cloud's (it is light: pydantic and python-dotenv).
    "edgedrift_edge": (
        {"edgedrift", "edgedrift_edge"},
        TRAINING_LIBS | (WEB_LIBS - {"pydantic_settings"}) | OTHER_MQTT | {"river"},
    ),
    "edgedrift_cloud": ({"edgedrift", "edgedrift_cloud"}, {"paho"}),
    "edgedrift_eval": ({"edgedrift", "edgedrift_eval"}, WEB_LIBS | {"paho"}),
    "edgedrift_harness": ({"edgedrift", "edgedrift_edge", "edgedrift_harness"}, set()),
    "edgedrift_demo": (OURS, set()),
}


def imports(path: Path) -> set[str]:
    """Top-level module names a file imports (module level and inside functions alike)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_each_package_imports_only_what_its_layer_allows(package: str) -> None:
    ours, forbidden = ALLOWED[package]
    for path in sorted(PACKAGES[package].rglob("*.py")):
        found = imports(path)
        wrong = (found & OURS) - ours
        heavy = found & forbidden
        if package == "edgedrift" and "training" not in path.parts and "adapters" not in path.parts:
            # batch training and the adapters (to scikit-learn, ONNX) are the core's optional parts
            heavy |= found & TRAINING_LIBS
        where = path.relative_to(ROOT)
        assert not wrong, f"{where} imports {sorted(wrong)}: against the layering of docs/architecture.md"
        assert not heavy, f"{where} imports {sorted(heavy)}"


def test_the_core_tests_import_nothing_from_the_cloud() -> None:
    tests = [*ROOT.joinpath("tests", "unit").glob("*.py"), *ROOT.joinpath("tests", "property").glob("*.py")]
    cloud_tests = {"test_cloud_settings", "test_registry_schema", "test_wire", "test_secrets"}
    for path in tests:
        if path.stem in cloud_tests or path.stem.startswith(("test_compose", "test_deploy", "test_cloud_")):
            continue
        assert "edgedrift_cloud" not in imports(path), f"{path.name} imports the cloud service"


def test_no_source_file_is_over_500_lines_unless_its_docstring_says_why() -> None:
    """A long module mixes concepts; one that must stay long says so in its docstring ("over 500 lines")."""
    folders = [*PACKAGES.values(), ROOT / "bench", ROOT / "tests"]
    long = []
    for path in sorted(p for folder in folders for p in folder.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 500 and "over 500 lines" not in (ast.get_docstring(ast.parse(text)) or ""):
            long.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not long, f"split these by concept or say why in the module docstring: {long}"


def test_the_edge_speaks_mqtt_through_paho_in_one_place() -> None:
    """The transport and the URL module are the edge's only importers of paho; no own MQTT codec is left."""
    edge = PACKAGES["edgedrift_edge"]
    users = sorted(p.relative_to(edge).as_posix() for p in edge.rglob("*.py") if "paho" in imports(p))
    assert users == ["replay.py", "transport/connection.py", "transport/mqtt.py"]
    assert not [p for p in edge.rglob("*.py") if p.stem in ("mqtt_packets", "mqtt_connection")]


def test_the_edge_groups_its_modules_by_concept() -> None:
    """The session and what it owns, the buffers, the transport and the cloud client are subpackages; no
    top-level module carries one of their names as a prefix (``session_*.py``) instead of living inside."""
    edge = PACKAGES["edgedrift_edge"]
    groups = {p.name for p in edge.iterdir() if (p / "__init__.py").is_file()}
    assert {"session", "buffers", "transport", "cloud"} <= groups
    prefixed = [p.name for p in edge.glob("*.py") if p.stem.split("_")[0] in groups]
    assert prefixed == []


def test_every_edge_module_imports_first_in_a_fresh_interpreter() -> None:
    """No import cycle hides behind import order: each module of ``edgedrift_edge`` is imported with
    none of the package loaded before it (``import edgedrift_edge.buffers.id_index`` first once failed:
    the buffers use the session's message types while the session package imported its session)."""
    import subprocess
    import sys

    modules = sorted(
        ".".join(
            ("edgedrift_edge", *path.relative_to(PACKAGES["edgedrift_edge"]).with_suffix("").parts)
        ).removesuffix(".__init__")
        for path in PACKAGES["edgedrift_edge"].rglob("*.py")
    )
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    for loaded in [m for m in sys.modules if m.split('.')[0] == 'edgedrift_edge']:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        print(f'{name}: {exc!r}')\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert len(modules) > 30 and out.stdout == "", out.stdout


EDGE = "edgedrift_edge"


def classes_extending_other_modules(source: str) -> list[str]:
    """Classes of an ``edgedrift_edge`` module whose base is a class of another ``edgedrift_edge`` module,
    except an error hierarchy (a base named ``...Error``): such a base is a mixin reaching into its
    subclass's attributes, where a collaborator passed what it uses belongs."""
    tree = ast.parse(source)
    ours: set[str] = set()  # names this module bound to something of another edgedrift_edge module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(EDGE)):
            ours.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            edge = [a for a in node.names if a.name.split(".")[0] == EDGE]
            ours.update(a.asname or a.name.split(".")[0] for a in edge)
    found = []
    for node in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        for base in node.bases:
            root = base
            while isinstance(root, ast.Attribute | ast.Subscript):
                root = root.value
            name = ast.unparse(base)
            if isinstance(root, ast.Name) and root.id in ours and not name.split("[")[0].endswith("Error"):
                found.append(f"{node.name}({name})")
    return found


def test_no_edge_class_extends_a_class_of_another_edge_module() -> None:
    """The agent owns its hand-overs and the session its concepts as collaborators (they were mixins that
    re-declared the attributes they reached into): docs/architecture.md, the edge agent's packages."""
    mixin = "from edgedrift_edge.handover.steps import Steps\nclass EdgeAgent(Steps): ...\n"
    errors = "from edgedrift_edge import checkpoints as c\nclass Worse(c.CheckpointError): ...\n"
    assert classes_extending_other_modules(mixin) == ["EdgeAgent(Steps)"]
    assert classes_extending_other_modules(errors) == []
    edge = PACKAGES["edgedrift_edge"]
    found = {
        path.relative_to(edge).as_posix(): classes_extending_other_modules(path.read_text())
        for path in sorted(edge.rglob("*.py"))
    }
    assert {path: classes for path, classes in found.items() if classes} == {}

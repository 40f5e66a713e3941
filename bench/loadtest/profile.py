"""Where the service's CPU goes: py-spy's raw stacks of every service process, folded into the service's
own sections (training, parsing, registry, auth, response, logging) and the framework's."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

#: The service's own sections, in priority order: a py-spy stack goes to the first one with a frame
#: containing one of its substrings (frames are "function (path:line)").
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("training (train_window)", ("train_window (",)),
    ("JSON parse (pydantic model_validate_json)", ("model_validate_json",)),
    ("numpy conversion (window_arrays)", ("window_arrays (",)),
    ("binary decode (decode_window)", ("decode_window (",)),
    ("window checks (check_window)", ("check_window (",)),
    ("parse: header model", ("parse_window (",)),
    ("DB: store + commit (_store)", ("_store (",)),
    ("DB: other", ("sqlalchemy/", "psycopg/")),
    ("auth (get_principal, device_access)", ("get_principal (", "device_access (", "auth.py")),
    ("response build (_reply: model_version, pydantic, JSON)", ("_reply (", "_response (")),
    ("logging (JsonFormatter, stderr)", ("logging/__init__.py", "JsonFormatter")),
    ("metrics (prometheus_client)", ("prometheus_client/",)),
)
#: Framework sections for the remaining stacks: the frame nearest the leaf that matches decides.
FRAMEWORK: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "thread pool hop (anyio to_thread, queue, locks)",
        ("anyio/", "queue.py", "threading.py", "concurrent/"),
    ),
    ("FastAPI: dependencies, routing, param validation", ("fastapi/", "pydantic/")),
    ("Starlette + the service's middleware", ("starlette/", "edgedrift_cloud/")),
    ("HTTP server (uvicorn, httptools, socket writes)", ("uvicorn/", "httptools", "asyncio/", "uvloop")),
)


def classify(stack: str) -> str:
    """The section of one ``frame;frame;...`` stack (root first)."""
    for name, keys in SECTIONS:
        if any(k in stack for k in keys):
            return name
    for frame in reversed(stack.split(";")):
        for name, keys in FRAMEWORK:
            if any(k in frame for k in keys):
                return name
    return "other"


#: Leaf frames of a thread that waits (py-spy does not always flag them idle): an idle worker thread,
#: the event loop in epoll, the uvicorn supervisor.
IDLE_LEAVES = ("Condition.wait (", "Runner.run (", "Queue.get (", "select (", "Event.wait (", "_recv (")


def profile_sections(raw: Path) -> dict[str, float]:
    """Share of the service's non-idle samples per section (see SECTIONS)."""
    counts: Counter[str] = Counter()
    if not raw.exists():
        return {}
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit() or stack.rsplit(";", 1)[-1].startswith(IDLE_LEAVES):
            continue
        counts[classify(stack)] += int(n)
    total = sum(counts.values())
    return (
        {name: counts[name] / total for name, _ in (*SECTIONS, *FRAMEWORK, ("other", ())) if counts[name]}
        if total
        else {}
    )

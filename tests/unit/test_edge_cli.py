"""``edgedrift-edge run --help`` documents every flag: help text, default and choices; the edge commands
run BLAS on one thread unless the user says otherwise."""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

from edgedrift_edge.cli import (
    BLAS_THREAD_VARS,
    add_run_arguments,
    default_one_blas_thread,
    replay_broker_url,
    tune_interpreter,
)
from edgedrift_edge.settings import AgentSettings


def test_every_run_flag_has_help_default_and_choices() -> None:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    actions = {a.dest: a for a in parser._actions if a.dest != "help"}
    assert set(actions) == set(AgentSettings.model_fields)
    for name, action in actions.items():
        info = AgentSettings.model_fields[name]
        assert action.help and len(action.help) > 20, name
        assert ("default: " in action.help) or ("required" in action.help), name
        assert f"EDGEDRIFT_EDGE_{name.upper()}" in action.help, name
        literals = [a for a in get_args(info.annotation) if isinstance(a, str)]
        if literals and "Literal" in str(info.annotation):
            assert action.choices is not None and set(literals) <= set(action.choices), name


def test_help_runs_and_lists_every_flag() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "edgedrift_edge.cli", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    for name in AgentSettings.model_fields:
        assert "--" + name.replace("_", "-") in proc.stdout, name
    text = " ".join(proc.stdout.split())
    assert "{async,sync}" in text and "default: druid" in text


def test_the_replay_password_comes_from_the_environment_or_a_file(tmp_path: object) -> None:
    from pathlib import Path

    secret = Path(str(tmp_path)) / "pw"
    secret.write_text("s3cret/pw\n")
    url = "mqtt://replay@broker:1883"
    assert replay_broker_url(url, None, {}) == url
    assert (
        replay_broker_url(url, None, {"EDGEDRIFT_REPLAY_BROKER_PASSWORD": "abc"})
        == "mqtt://replay:abc@broker:1883"
    )
    assert replay_broker_url(url, str(secret), {}) == "mqtt://replay:s3cret%2Fpw@broker:1883"


def _threads(**env: str) -> dict[str, Any]:
    """``edgedrift-edge threads`` (the console script) in a child whose environment has no thread
    variables except ``env``: what the agent's process runs numpy's BLAS with."""
    base = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARS}
    script = Path(sys.executable).parent / "edgedrift-edge"
    done = subprocess.run(
        [str(script), "threads"], env={**base, **env}, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_the_edge_commands_default_blas_and_openmp_to_one_thread() -> None:
    report = _threads()
    assert report["env"] == dict.fromkeys(BLAS_THREAD_VARS, "1")
    if report["threadpools"] is not None:  # threadpoolctl installed: the runtime numpy loaded obeys
        assert report["threadpools"] and all(p["num_threads"] == 1 for p in report["threadpools"])


def test_thread_variables_the_user_set_are_respected() -> None:
    report = _threads(OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="3")
    assert report["env"] == {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "1"}
    blas = [p for p in report["threadpools"] or [] if p["library"] == "openblas"]
    assert all(p["num_threads"] == 2 for p in blas)


def test_default_one_blas_thread_sets_only_what_is_unset() -> None:
    environ = {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": ""}
    assert default_one_blas_thread(environ) == ["OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"]
    assert environ == {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def test_the_agent_tunes_the_switch_interval_and_the_collectors_youngest_generation_only() -> None:
    before, interval = gc.get_threshold(), sys.getswitchinterval()
    try:
        tune_interpreter(AgentSettings(device_id="d", switch_interval_s=0.002))
        assert gc.get_threshold() == (20_000, *before[1:])  # the default gc_threshold
        assert sys.getswitchinterval() == 0.002
        tune_interpreter(AgentSettings(device_id="d", gc_threshold=700))
        assert gc.get_threshold() == (700, *before[1:])
    finally:
        gc.set_threshold(*before)
        sys.setswitchinterval(interval)


def test_the_replay_refuses_device_ids_and_a_prefix_no_topic_can_take_before_it_connects() -> None:
    """The replay publishes below ``{prefix}/{device}``: an id or a prefix with a wildcard ended it with
    paho's "Publish topic cannot contain wildcards" after it connected (the valid devices' samples of
    that message published); each is now named before it connects (exit 2)."""
    cases = {
        ("--devices", "ok,a+b"): "'a+b': a device id is",
        ("--devices", "ok", "--topic-prefix", "x/#"): "must not hold an MQTT wildcard",
        ("--devices", " , "): "--devices names no device",
    }
    for args, why in cases.items():
        done = subprocess.run(
            [sys.executable, "-m", "edgedrift_edge.cli", "replay", "--dataset", "sine1", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "EDGEDRIFT_REPLAY_BROKER_PASSWORD": ""},
        )
        assert done.returncode == 2 and why in done.stderr, (args, done.stderr)

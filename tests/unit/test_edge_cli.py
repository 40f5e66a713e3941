"""``edgedrift-edge run --help`` documents every flag: help text, default and choices."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import get_args

from edgedrift_edge.cli import add_run_arguments, replay_broker_url
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

"""``--help`` reads as a terminal shows it: no reStructuredText markup in any command's help, the agent's
flags in sections with the rare knobs under "advanced", and ``--publish-queue``'s default, its
documented cap and the cap the settings enforce agree."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from edgedrift.cli import build_parser, plain
from edgedrift_edge.cli import RUN_GROUPS
from edgedrift_edge.cli import build_parser as edge_parser
from edgedrift_edge.settings import MAX_PUBLISH_QUEUE, AgentSettings, SettingsError
from edgedrift_edge.transport.connection import MAX_UNCONFIRMED, MqttTransport

MARKUP = re.compile(r"``|:[a-z]+(:[a-z]+)?:`")


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def test_plain_drops_roles_and_literals() -> None:
    text = "see :func:`lazy`, :mod:`~edgedrift.adapters.river_monitor`, :class:`the loop <edgedrift.loop>`"
    assert plain(text + " and ``--help``") == "see lazy, river_monitor, the loop and --help"


@pytest.mark.parametrize("root", [build_parser, edge_parser], ids=["edgedrift", "edgedrift-edge"])
def test_no_help_text_shows_restructuredtext_markup(root: object) -> None:
    seen = 0
    for parser in parsers(root()):  # type: ignore[operator]
        text = parser.format_help()
        seen += 1
        assert not MARKUP.search(text), f"{parser.prog}: {MARKUP.search(text)!r} in\n{text}"
    assert seen >= 5, "the walk reached the subcommands"


def agent_sections() -> dict[str, list[str]]:
    agent = next(p for p in parsers(build_parser("agent")) if p.prog == "edgedrift agent")
    return {
        str(g.title): [a.option_strings[0] for a in g._group_actions if a.option_strings]
        for g in agent._action_groups
    }


def test_agent_flags_are_in_sections_with_the_rare_knobs_under_advanced() -> None:
    sections = agent_sections()
    flags = [flag for flags in sections.values() for flag in flags if flag != "-h"]
    assert sorted(flags) == sorted("--" + n.replace("_", "-") for n in AgentSettings.model_fields)
    assert len(flags) == len(set(flags)), "each flag in one section"
    advanced = next(flags for title, flags in sections.items() if title.startswith("advanced"))
    for rare in ("--switch-interval-s", "--publish-queue", "--queue-size", "--http-deadline-s"):
        assert rare in advanced, rare
    assert "--device-id" in sections["device"] and "--strategy" in sections["learning"]
    assert list(sections)[-1].startswith("advanced"), "the advanced section comes last"
    assert len(advanced) < len(flags) / 2


def test_a_setting_without_a_section_is_refused() -> None:
    from edgedrift_edge import cli

    saved = dict(RUN_GROUPS)
    try:
        cli.RUN_GROUPS.pop("learning")
        with pytest.raises(RuntimeError, match="strategy"):
            cli.add_run_arguments(argparse.ArgumentParser())
    finally:
        cli.RUN_GROUPS.clear()
        cli.RUN_GROUPS.update(saved)


def test_publish_queue_default_and_cap_agree_and_more_is_refused() -> None:
    assert MAX_PUBLISH_QUEUE == MAX_UNCONFIRMED == 65_000
    assert AgentSettings.model_fields["publish_queue"].default == MAX_PUBLISH_QUEUE
    agent = next(p for p in parsers(edge_parser()) if p.prog == "edgedrift-edge agent")
    help_text = " ".join(agent.format_help().split())
    assert "at most 65000" in help_text and "paho" not in help_text
    settings = AgentSettings.load({"device_id": "d-1", "publish_queue": "65000"}, environ={})
    assert settings.publish_queue == 65_000
    with pytest.raises(SettingsError, match=r"--publish-queue .*less than or equal to 65000"):
        AgentSettings.load({"device_id": "d-1", "publish_queue": "100000"}, environ={})
    with pytest.raises(ValueError, match="publish_queue 100000: from 1 to 65000"):
        MqttTransport("mqtt://127.0.0.1:1", "c", [], "s", publish_queue=100_000)

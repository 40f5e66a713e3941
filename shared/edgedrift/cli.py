"""The ``edgedrift`` command. Subcommands come from the installed parts (entry-point group
``edgedrift.commands``), so a slim edge install has only the edge's commands and no evaluator.

One policy for every EdgeDrift command line (``edgedrift``, ``edgedrift-edge``, ``edgedrift-cloud``):
``--version`` and ``--help`` everywhere, every option with a help text and its default, parsers built
without importing the heavy parts (a subcommand's function is imported when it runs: :func:`lazy`), and
an error as one line ``PROG: error: MESSAGE`` with exit code 2 (:func:`run_command`).
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import NoReturn

from edgedrift import __version__

#: Exit code of a usage or environment error (argparse's own).
USAGE_ERROR = 2
Command = Callable[[argparse.Namespace], int]


class CommandError(Exception):
    """A command cannot run as asked: printed as one line, exit code 2."""


def lazy(target: str) -> Command:
    """``module:function``, imported only when the command runs, so building the parser stays light."""
    module, _, name = target.partition(":")

    def call(args: argparse.Namespace) -> int:
        function: Command = getattr(importlib.import_module(module), name)
        return int(function(args) or 0)

    return call


class _Version(argparse.Action):
    """``--version``: ``PROG VERSION (kernels: compiled|numpy)``, the path of the learning core's per-sample
    steps (:func:`edgedrift.kernels.path`), looked up only when asked (the kernels import numpy)."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, prog: str = "", help: str | None = None
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)
        self.prog = prog

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> NoReturn:
        from edgedrift import kernels

        print(f"{self.prog} {__version__} (kernels: {kernels.path()})")
        parser.exit()


def add_version(parser: argparse.ArgumentParser, prog: str) -> None:
    parser.add_argument(
        "--version",
        action=_Version,
        prog=prog,
        help="show the version and whether the compiled kernels or the numpy code run, and exit",
    )


#: A Sphinx role (``:func:`name```, ``:mod:`~a.b```, ``:class:`title <target>```) or an inline literal.
_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`(?:~[\w.]*\.)?([^`<]*?)\s*(?:<[^>]*>)?`")
_LITERAL = re.compile(r"``(.+?)``")


def plain(text: str) -> str:
    """``text`` without reStructuredText markup: a role becomes its target's short name or its title, an
    inline literal its content (docstrings serve as ``--help`` text, a terminal shows no markup)."""
    return _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Help with the description as written (minus reStructuredText markup: :func:`plain`) and each
    option's default (unless its text names one)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return super()._fill_text(plain(text), width, indent)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = plain(action.help or "")
        default = action.default
        if (
            "default" in text
            or default in (None, False, argparse.SUPPRESS)
            or not action.option_strings
            or isinstance(action, _Version | argparse._HelpAction)
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage error is one line naming the help (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def run_command(prog: str, args: argparse.Namespace) -> int:
    """Run ``args.func``; a :class:`CommandError`, a bad value or an unusable file, address or network
    becomes one line on stderr and exit code 2; Ctrl-C exits 130."""
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except (CommandError, ValueError, OSError) as exc:
        message = " ".join(str(exc).split())
        print(f"{prog}: error: {message}", file=sys.stderr)
        return USAGE_ERROR


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every installed subcommand, or only ``command`` when one by that name is installed (``edgedrift
    agent --help`` then imports the agent's parser and not the evaluator's, the cloud's and the demo's)."""
    parser = Parser(prog="edgedrift", description=__doc__, formatter_class=Formatter)
    add_version(parser, "edgedrift")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    found = sorted(entry_points(group="edgedrift.commands"), key=lambda e: e.name)
    named = [ep for ep in found if ep.name == command]
    for ep in named or found:
        register = ep.load()
        register(sub)
    return parser


def _command_word(argv: Sequence[str]) -> str | None:
    """The subcommand's name: the first word that is not an option (none of ``edgedrift``'s own options
    takes a value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_word(argv))
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return USAGE_ERROR
    return run_command(f"edgedrift {args.command}", args)


if __name__ == "__main__":
    raise SystemExit(main())

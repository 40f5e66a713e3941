"""The ``edgedrift evaluate`` parser, light to import: the evaluator itself (river, scikit-learn,
imbalanced-learn) is imported when the command runs (``edgedrift_eval.cli.evaluate``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from edgedrift.cli import Formatter, lazy

DEFAULT_STRATEGIES = "druid,druid-paper,predsign,periodic,sgd,ddm,eddm,adwin"


class _ListStrategies(argparse.Action):
    """``--list-strategies``: print every strategy and peer name, then exit (like ``--version``)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from edgedrift_eval.peers import RIVER_PEERS
        from edgedrift_eval.strategies import STRATEGIES

        print("strategies:", ", ".join(STRATEGIES))
        print("river peers:", ", ".join(RIVER_PEERS))
        print("groups: river, edgedrift, all")
        parser.exit()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``edgedrift evaluate`` (entry-point group ``edgedrift.commands``)."""
    p = sub.add_parser(
        "evaluate",
        help="replay a stream through the strategies; write results and plots",
        description="Replay a stream through every strategy and write tables and plots.",
        formatter_class=Formatter,
    )
    p.add_argument(
        "--dataset",
        default="elec2",
        help="elec2, elec2-noprice (ELEC2 without its price columns), elec2-6, covtype, covtype-7, outdoor, "
        "keystroke, usenet1, usenet2, sine1, "
        "'sine1+:d=10,sigma=100', 'ridge:sigma=10', sea, hyperplane, rbf, csv:PATH (with --target) or "
        "arff:PATH",
    )
    p.add_argument("--target", help="label column for --dataset csv:PATH (arff:PATH: the last attribute)")
    p.add_argument("--seed", type=int, default=0, help="seed of synthetic streams")
    p.add_argument(
        "--shuffle",
        type=int,
        default=None,
        metavar="SEED",
        help="shuffle the stream's rows first (a drift-free control)",
    )
    p.add_argument("--protocol", default="druid", help="druid (every 10th label, window 2000) or full")
    p.add_argument("--every", type=int, help="label every k-th sample (default: the protocol's)")
    p.add_argument("--window", type=int, help="window / warm-up length in samples (default: the protocol's)")
    p.add_argument("--delay", type=int, help="label delay in samples (default: the protocol's)")
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help="feed the scored samples in batches of N through process_many (default 1; per-sample "
        "semantics, so the predictions equal those of batch 1)",
    )
    p.add_argument(
        "--strategies",
        default=DEFAULT_STRATEGIES,
        help="comma-separated strategy names or the groups river, edgedrift, all (--list-strategies)",
    )
    p.add_argument("--list-strategies", action=_ListStrategies, help="print every strategy name and exit")
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="override a strategy's sweep grid, e.g. --grid druid=0.99,0.999 (repeatable)",
    )
    p.add_argument("--offsets", help="label offsets to run, e.g. 0-9 or 0,3 (default: all of the protocol)")
    p.add_argument("--jobs", type=int, default=None, help="parallel processes (default: 2)")
    p.add_argument("--out", type=Path, required=True, help="output directory (required)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=lazy("edgedrift_eval.cli:evaluate"))

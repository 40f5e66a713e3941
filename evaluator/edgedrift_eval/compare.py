"""``edgedrift compare``: rank strategies across streams as the field reports it, a Friedman test, the
Nemenyi post-hoc and a critical-difference diagram (scipy and scikit-posthocs; no statistics of our own).

Each result directory (one ``edgedrift evaluate`` run) is one stream. Per stream, each strategy is
represented by one configuration within the recompute budget: its default (``--pick default``, the
honest choice) or its best one (``--pick best``, a test-set choice, stated as such). Strategies missing on
some stream are left out, since the Friedman test needs every strategy on every stream.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgedrift.cli import Formatter, lazy

__all__ = ["Comparison", "compare_dirs", "load_scores", "register"]


def _score(entry: Mapping[str, Any]) -> float | None:
    """Higher is better: accuracy for classification, −RMSE for regression."""
    if entry.get("accuracy") is not None:
        return float(entry["accuracy"])
    if entry.get("rmse") is not None:
        return -float(entry["rmse"])
    return None


def _is_default(entry: Mapping[str, Any]) -> bool:
    from edgedrift_eval.strategies import STRATEGIES

    strategy = STRATEGIES.get(str(entry["strategy"]))
    params = entry.get("params") or {}
    if strategy is None or strategy.param is None:
        return not params
    return bool(params) and math.isclose(float(next(iter(params.values()))), float(strategy.default or 0))


def load_scores(directory: Path, budget: float, pick: str = "default") -> dict[str, float]:
    """Strategy -> score of its chosen configuration within ``budget`` mean recomputes in one result
    directory (the trivial baselines excluded)."""
    from edgedrift_eval.runner import BASELINES

    entries = json.loads((directory / "results.json").read_text())
    out: dict[str, float] = {}
    for entry in entries:
        name = str(entry["strategy"])
        score = _score(entry)
        if name in BASELINES or score is None or float(entry.get("recomputes", 0)) > budget + 1e-9:
            continue
        if pick == "default" and not _is_default(entry):
            continue
        if name not in out or score > out[name]:
            out[name] = score
    return out


@dataclass(frozen=True)
class Comparison:
    """Average ranks (1 = best), the Friedman test and the Nemenyi p-values over the common strategies."""

    streams: list[str]
    strategies: list[str]
    scores: list[list[float]]
    ranks: dict[str, float]
    friedman_statistic: float
    friedman_p: float
    nemenyi_p: dict[str, dict[str, float]]

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def compare_dirs(directories: Sequence[Path], budget: float, pick: str = "default") -> Comparison:
    """Rank the strategies every directory has, test them (Friedman, then Nemenyi)."""
    import pandas as pd
    import scikit_posthocs as sp
    from scipy.stats import friedmanchisquare

    per_stream = {f"{i}:{d.name}": load_scores(d, budget, pick) for i, d in enumerate(directories)}
    common = sorted(set.intersection(*(set(s) for s in per_stream.values())))
    if len(per_stream) < 2 or len(common) < 3:
        raise ValueError(
            f"a Friedman test needs >= 2 streams and >= 3 strategies common to all; got {len(per_stream)} "
            f"streams and {common}"
        )
    table = pd.DataFrame([[s[n] for n in common] for s in per_stream.values()], columns=common)
    stat, p = friedmanchisquare(*(table[c].to_numpy() for c in common))
    ranks = table.rank(axis=1, ascending=False).mean()
    nemenyi = sp.posthoc_nemenyi_friedman(table)
    return Comparison(
        streams=list(per_stream),
        strategies=common,
        scores=table.to_numpy().tolist(),
        ranks={str(k): float(v) for k, v in ranks.items()},
        friedman_statistic=float(stat),
        friedman_p=float(p),
        nemenyi_p={str(r): {str(c): float(v) for c, v in row.items()} for r, row in nemenyi.iterrows()},
    )


def cd_diagram(result: Comparison, path: Path, title: str) -> None:
    """The critical-difference diagram (scikit-posthocs), strategies linked when Nemenyi cannot tell them
    apart at 5 %."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import scikit_posthocs as sp

    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.35 * len(result.strategies)))
    sp.critical_difference_diagram(pd.Series(result.ranks), pd.DataFrame(result.nemenyi_p), ax=ax)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``edgedrift compare`` (entry-point group ``edgedrift.commands``)."""
    p = sub.add_parser(
        "compare",
        help="Friedman + Nemenyi over several evaluate result directories; critical-difference diagram",
        description="Rank strategies across streams: Friedman test, Nemenyi post-hoc, critical-difference "
        "diagram.",
        formatter_class=Formatter,
    )
    p.add_argument("dirs", nargs="+", type=Path, help="result directories of edgedrift evaluate")
    p.add_argument("--budget", type=float, default=10.0, help="mean recomputes allowed (default 10)")
    p.add_argument("--pick", choices=("default", "best"), default="default", help="configuration per stream")
    p.add_argument("--out", type=Path, required=True, help="output directory (required)")
    p.set_defaults(func=lazy("edgedrift_eval.compare:run"))


def run(args: argparse.Namespace) -> int:
    result = compare_dirs(args.dirs, args.budget, args.pick)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare.json").write_text(json.dumps(result.as_dict(), indent=1))
    title = (
        f"{len(result.streams)} streams, ≤ {args.budget:g} recomputes, {args.pick} configuration; "
        f"Friedman p = {result.friedman_p:.2g}"
    )
    cd_diagram(result, args.out / "cd_diagram.png", title)
    lines = ["| strategy | average rank |", "|---|---:|"]
    lines += [f"| {n} | {r:.2f} |" for n, r in sorted(result.ranks.items(), key=lambda kv: kv[1])]
    lines.append(f"\nFriedman χ² = {result.friedman_statistic:.2f}, p = {result.friedman_p:.3g}")
    (args.out / "compare.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0

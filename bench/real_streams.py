"""The real streams as one benchmark: every tuned strategy beside the same learner with its defaults,
river's peers, and the Friedman test with the Nemenyi critical-difference diagram across the streams.

Streams: ``elec2``, ``elec2-noprice`` (ELEC2 without its two price columns), ``outdoor`` (40 classes),
``keystroke`` (4), ``usenet1``, ``usenet2``; DRUiD protocol (every 10th sample labeled, first window
2,000 samples, fitted to the short streams as ``edgedrift evaluate`` does). Each strategy runs at its
default parameter over the label offsets. ELEC2's class is exactly "NSW price above its mean over the
previous 48 samples", so ELEC2 also gets a learner-free reference row, ``price-rule``: UP when the price is
above its exponentially weighted mean at rate 0.3 over the labeled samples (the fast EW scaler that the
first-window tuning can pick rebuilds that average).

The acceptance check (issue 27, item 5): on every stream, each ``*-tuned`` strategy's mean is no more
than 0.5 points below the same learner with its defaults, and ``druid-tune`` no more than 0.5 below
``druid``. The run fails (exit 1) if one is.

    EDGEDRIFT_DATA_DIR=../shared/data python bench/real_streams.py [--offsets 10] [--long-offsets 10]
        [--streams elec2,...] [--out bench-results/real-streams] [--jobs 2] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgedrift.data import Stream, load_dataset
from edgedrift_eval.compare import cd_diagram, compare_dirs
from edgedrift_eval.peers import RIVER_PEERS
from edgedrift_eval.protocol import Protocol, get_protocol
from edgedrift_eval.strategies import STRATEGIES
from edgedrift_eval.sweep import aggregate, plan, run_sweep, write_outputs

STREAMS = ("elec2", "elec2-noprice", "outdoor", "keystroke", "usenet1", "usenet2")
#: (tuned, the same learner with its defaults): the pairs of the acceptance check.
PAIRS = (("newton-tuned", "newton"), ("rmsprop-tuned", "rmsprop"), ("druid-tune", "druid"))
#: Points a tuned strategy may lose to its defaults.
TOLERANCE = 0.5
#: Streams longer than this many samples run ``--long-offsets`` offsets.
LONG = 10_000


def price_rule(stream: Stream, protocol: Protocol, offset: int, rate: float = 0.3) -> float:
    """Accuracy (%) of "UP when nswprice is above its EW mean (rate ``rate``, updated on labeled samples,
    the first 1/rate of them averaged plainly)" over the scored samples: no learner, ELEC2's label rule."""
    price = stream.X[:, stream.feature_names.index("nswprice")]
    labeled = protocol.labeled_mask(len(stream), offset)
    mean, n, right = 0.0, 0, 0
    for i, p in enumerate(price):
        if i >= protocol.window:
            right += int((1.0 if p > mean else -1.0) == stream.y[i])
        if labeled[i]:
            n += 1
            mean += max(rate, 1.0 / n) * (p - mean)
    return 100.0 * right / (len(stream) - protocol.window)


def strategies_for(stream: Stream) -> list[str]:
    """The pairs and river's peers; the re-tuning ``druid-tune`` only where it runs (binary streams)."""
    names = [n for pair in PAIRS for n in pair]
    names = [n for n in names if stream.n_classes <= 2 or STRATEGIES[n].multiclass]
    return names + list(RIVER_PEERS)


Result = tuple[list[dict[str, Any]], dict[str, Any]]


def load_result(directory: Path) -> Result:
    """A stream's ``results.json`` entries and ``meta.json``."""
    return json.loads((directory / "results.json").read_text()), json.loads(
        (directory / "meta.json").read_text()
    )


def run_stream(name: str, n_offsets: int, out: Path, jobs: int) -> Result:
    """One stream's sweep at the default parameters, written as ``edgedrift evaluate`` writes its results
    directory (so ``edgedrift compare`` reads it too), and read back."""
    stream = load_dataset(name)
    protocol = get_protocol("druid").fitted(len(stream))
    names = strategies_for(stream)
    grids = {
        n: [float(STRATEGIES[n].default or 0.0)] for n in names if n in STRATEGIES and STRATEGIES[n].param
    }
    offsets = list(protocol.offsets[:n_offsets])
    specs = plan(names, stream, protocol, grids, offsets)
    t0 = time.perf_counter()
    rows = run_sweep(stream, protocol, specs, jobs)
    entries = aggregate(rows, stream.task)
    meta: dict[str, object] = {
        "dataset": stream.name,
        "n": len(stream),
        "n_features": stream.n_features,
        "n_classes": stream.n_classes,
        "protocol": protocol.__dict__,
        "offsets": offsets,
        "wall_s": time.perf_counter() - t0,
    }
    if name == "elec2":
        rule = [price_rule(stream, protocol, o) for o in offsets]
        meta["price_rule"] = {
            "mean": float(np.mean(rule)),
            "sd": float(np.std(rule, ddof=1)) if len(rule) > 1 else 0.0,
        }
    write_outputs(out / name, entries, rows, meta)
    return load_result(out / name)


def table(results: dict[str, Result]) -> tuple[str, list[str]]:
    """Markdown: accuracy mean ± sd over the offsets per strategy (rows) and stream (columns), and the
    acceptance failures."""
    streams = list(results)
    names: list[str] = []
    for entries, _ in results.values():
        names += [e["strategy"] for e in entries if e["strategy"] not in names]
    acc: dict[tuple[str, str], tuple[float, float]] = {}
    for s, (entries, _) in results.items():
        for e in entries:
            acc[(e["strategy"], s)] = (100 * float(e["accuracy"]), 100 * float(e["accuracy_sd"]))
    offsets = {s: meta["offsets"] for s, (_, meta) in results.items()}
    head = "| strategy | " + " | ".join(
        f"{s} ({len(o) if isinstance(o, list) else '?'} offsets)" for s, o in offsets.items()
    )
    lines = [head + " |", "|---|" + "---:|" * len(streams)]
    for n in names:
        cells = [f"{acc[(n, s)][0]:.2f} ± {acc[(n, s)][1]:.2f}" if (n, s) in acc else "–" for s in streams]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    if "elec2" in results:
        rule = results["elec2"][1]["price_rule"]
        assert isinstance(rule, dict)
        cells = [f"{rule['mean']:.2f} ± {rule['sd']:.2f}" if s == "elec2" else "–" for s in streams]
        lines.append("| price-rule (no learner) | " + " | ".join(cells) + " |")
    failures = []
    lines += ["", "| stream | tuned − defaults (points) |", "|---|---|"]
    for s in streams:
        parts = []
        for tuned, default in PAIRS:
            if (tuned, s) in acc and (default, s) in acc:
                gap = acc[(tuned, s)][0] - acc[(default, s)][0]
                parts.append(f"{tuned} {gap:+.2f}")
                if gap < -TOLERANCE:
                    failures.append(f"{s}: {tuned} is {gap:+.2f} against {default}")
        lines.append(f"| {s} | " + ", ".join(parts) + " |")
    return "\n".join(lines) + "\n", failures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", default=",".join(STREAMS), help="comma-separated (default: all six)")
    parser.add_argument("--offsets", type=int, default=10, help="label offsets per short stream (default 10)")
    parser.add_argument("--long-offsets", type=int, default=10, help=f"offsets on streams > {LONG} samples")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--out", type=Path, default=Path("bench-results/real-streams"))
    parser.add_argument("--quick", action="store_true", help="smoke run: usenet1 and keystroke, 2 offsets")
    parser.add_argument("--set-offsets", default="", help="per stream, e.g. outdoor=3,keystroke=5")
    parser.add_argument("--reuse", action="store_true", help="read a stream's results already in --out")
    args = parser.parse_args()
    streams = (
        ["usenet1", "keystroke"] if args.quick else [s.strip() for s in args.streams.split(",") if s.strip()]
    )
    n_short, n_long = (2, 2) if args.quick else (args.offsets, args.long_offsets)
    chosen = dict(item.split("=") for item in args.set_offsets.split(",") if item)
    t0 = time.perf_counter()
    results = {}
    for name in streams:
        if args.reuse and (args.out / name / "results.json").exists():
            results[name] = load_result(args.out / name)
            continue
        n = len(load_dataset(name))
        k = int(chosen[name]) if name in chosen else n_long if n > LONG else n_short
        results[name] = run_stream(name, k, args.out, args.jobs)
    text, failures = table(results)
    if len(streams) >= 2:
        comparison = compare_dirs([args.out / s for s in streams], budget=math.inf, pick="default")
        ranks = sorted(comparison.ranks.items(), key=lambda kv: kv[1])
        text += "\n| strategy | average rank |\n|---|---:|\n" + "".join(
            f"| {n} | {r:.2f} |\n" for n, r in ranks
        )
        text += f"\nFriedman χ² = {comparison.friedman_statistic:.2f}, p = {comparison.friedman_p:.3g}\n"
        title = (
            f"{len(streams)} real streams, default configurations; Friedman p = {comparison.friedman_p:.2g}"
        )
        cd_diagram(comparison, args.out / "cd_diagram.png", title)
        (args.out / "compare.json").write_text(json.dumps(comparison.as_dict(), indent=1))
    text += f"\nwall {time.perf_counter() - t0:.0f} s\n"
    (args.out / "real_streams.md").write_text(text)
    print(text)
    for failure in failures:
        print(f"FAIL {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""RebalanceStream's experiment (Bernardo, Della Valle, Bifet, ICDMW 2020, Section IV) on EdgeDrift.

For every class-ratio schedule (μ ∈ {20000 … 30000}, σ² ∈ {50 … 400}) and data seed 3-7, a 100k-row
``rbf-imbalanced`` stream is replayed test-then-train with all labels through :class:`EdgeLoop` under
BASE, RebalanceStream (RS) and RebalanceStream+ (RS+): :class:`RebalanceMonitor` on the edge and the
cloud's :func:`train_window` in process (a depth-8 CART shrub, ``rebalance="select"`` with the reset
batch for RS and RS+, a plain retrain for BASE). The first model is trained on the first 1000 labels and
not counted as a recompute.

Kappa is reported per 2000-row block (the prequential kappa of the loop's predictions in that block),
not the paper's running matrix since the last swap: that matrix starts from a candidate's in-sample
counts after a swap, so it does not measure the same thing for the three methods.

Outputs: ``out/rebalance/cell_mu{μ}_var{σ²}.json`` (per seed and method: block kappas, recomputes,
swaps, chosen candidates, time), ``docs/img/rebalance_fig1.png`` (μ=20000, σ²=50 like Fig. 1),
``docs/img/rebalance_grid.png`` (Table I) and ``docs/img/rebalance_heatmaps.png`` (Fig. 2: the mean
kappa difference RS−BASE and RS+−BASE per cell).

``--compare`` is the comparison of docs/benchmarks.md "RebalanceStream against its paper": the Fig. 1
cell's schedule with the paper's minority shares (0.1-0.4) and with a 5 % minority (0.05-0.3), per seed
BASE, RS, RS with the paper's literal candidate scoring (``rs-paper``: SMOTE candidates scored on their
own augmented rows), RS+ and river's Hoeffding adaptive tree in the same run, scored by kappa, balanced
accuracy and macro-F1 over the whole run and per minority share (``out/rebalance/compare.json``).

    OMP_NUM_THREADS=1 .venv/bin/python bench/rebalance_stream.py --compare --seeds 3 4 5 --n 60000
    OMP_NUM_THREADS=1 .venv/bin/python bench/rebalance_stream.py --fig1       # one cell, ~3.5 min
    OMP_NUM_THREADS=1 .venv/bin/python bench/rebalance_stream.py              # 20 cells, ~45 min
    .venv/bin/python bench/rebalance_stream.py --plot-only                    # redraw from the JSON
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from edgedrift.data import Stream, load_dataset
from edgedrift.loop import EdgeLoop
from edgedrift.metrics import ConfusionMatrix
from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift.monitors.rebalance import Mode, RebalanceMonitor
from edgedrift.strategies import TrainSpec
from edgedrift.training.recompute import spec_trainer
from edgedrift.training.window import Scoring
from edgedrift.window import CountWindow

MEANS = (20_000, 22_500, 25_000, 27_500, 30_000)
VARS = (50, 100, 200, 400)
SEEDS = (3, 4, 5, 6, 7)
METHODS: tuple[Mode, ...] = ("base", "rs", "rs+")
LABELS = {"base": "BASE", "rs": "RebalanceStream", "rs+": "RebalanceStream+"}
COLORS = {"base": "tab:red", "rs": "black", "rs+": "tab:blue"}
BLOCK = 2_000
WARMUP = 1_000
ROOT = Path(__file__).resolve().parents[1]


def block_kappas(y: FloatArray, pred: FloatArray, start: int, n: int) -> list[float]:
    """Kappa of the predictions of rows [start, n) per block of rows [b·BLOCK, (b+1)·BLOCK)."""
    out = []
    for lo in range(0, n, BLOCK):
        a, b = max(lo, start), min(lo + BLOCK, n)
        cm = ConfusionMatrix()
        cm.update_many(y[a:b], pred[a - start : b - start])
        out.append(cm.kappa)
    return out


def run_method(
    stream: Stream, mode: Mode, delta: float, max_depth: int, seed: int, scoring: Scoring = "real"
) -> dict[str, Any]:
    """One test-then-train run of ``mode`` over the stream; block kappas and recompute bookkeeping."""
    params = {"max_depth": max_depth, "seed": seed}
    spec = TrainSpec(
        "shrub", params, rebalance="none" if mode == "base" else "select", return_base=mode == "rs+"
    )
    train = spec_trainer(spec, "classification", "rebalance-" + mode.replace("+", "-plus"), scoring=scoring)
    selections: list[dict[str, Any]] = []
    train_s = [0.0]

    def recompute(X: FloatArray, y: FloatArray, reset_rows: int | None = None) -> BatchModel:
        t = time.perf_counter()
        model = train(X, y, reset_rows=reset_rows)
        assert model is not None, "the in-process trainer answers synchronously"
        train_s[0] += time.perf_counter() - t
        training = model.meta.get("training") or {}
        selections.append(
            {
                "n": len(y),
                "reset_rows": reset_rows,
                "chosen": training.get("chosen"),
                "scores": training.get("scores"),
                "reason": monitor.reason,
            }
        )
        return model

    X, y = stream.X, stream.y
    n = len(y)
    monitor = RebalanceMonitor(delta=delta, mode=mode)
    loop = EdgeLoop(CountWindow(WARMUP, stream.n_features), monitor, recompute)
    initial = spec_trainer(TrainSpec("shrub", params), "classification", "initial")(X[:WARMUP], y[:WARMUP])
    assert initial is not None
    loop.start(initial, X[:WARMUP], y[:WARMUP])
    pred = np.empty(n - WARMUP)
    on_base = 0
    t0 = time.perf_counter()
    for i in range(WARMUP, n):
        on_base += monitor.prediction_model() is not None
        swaps, kept = monitor.n_swaps, monitor.n_kept
        pred[i - WARMUP] = loop.process_one(X[i], float(y[i]))
        if monitor.n_swaps != swaps or monitor.n_kept != kept:
            selections[-1].update(sample=i, accepted=monitor.n_swaps != swaps, kappa_L=monitor.last_kappa_l)
    elapsed = time.perf_counter() - t0
    cm = ConfusionMatrix()
    cm.update_many(y[WARMUP:], pred)
    return {
        "pred": pred,
        "kappa_blocks": block_kappas(y, pred, WARMUP, n),
        "kappa": cm.kappa,
        "recomputes": loop.counters.recomputes,
        "swaps": monitor.n_swaps,
        "kept": monitor.n_kept,
        "forced": monitor.n_forced,
        "chosen": dict(Counter(str(s["chosen"]) for s in selections if s.get("accepted"))),
        "selections": selections,
        "base_share": on_base / (n - WARMUP),
        "seconds": elapsed,
        "train_seconds": train_s[0],
        "bytes_up": loop.counters.bytes_up,
        "bytes_down": loop.counters.bytes_down,
    }


#: ``--compare``: the paper's minority shares and a 5 % variant on the same segments.
LEVEL_SETS: dict[str, tuple[float, ...]] = {"paper": (0.1, 0.2, 0.3, 0.4), "five": (0.05, 0.1, 0.2, 0.3)}
#: ``--compare``'s EdgeDrift methods: (monitor mode, candidate scoring).
COMPARED: dict[str, tuple[Mode, Scoring]] = {
    "base": ("base", "real"),
    "rs": ("rs", "real"),
    "rs-paper": ("rs", "augmented"),
    "rs+": ("rs+", "real"),
}


def scores(y: FloatArray, pred: FloatArray) -> dict[str, float]:
    """Kappa, balanced accuracy and macro-F1 of ``pred`` against ``y`` (labels ±1)."""
    cm = ConfusionMatrix()
    cm.update_many(y, pred)
    return {
        "kappa": cm.kappa,
        "bacc": cm.balanced_accuracy,
        "macro_f1": cm.macro_f1,
        "pos_rate": float(np.mean(pred > 0)),
    }


def run_river(stream: Stream, seed: int) -> dict[str, Any]:
    """river's Hoeffding adaptive tree, test-then-train from row WARMUP after learning the first rows."""
    from river import tree

    model = tree.HoeffdingAdaptiveTreeClassifier(seed=seed)
    X, y = stream.X, stream.y
    pred = np.empty(len(y) - WARMUP)
    t0 = time.perf_counter()
    for i in range(len(y)):
        x = dict(enumerate(X[i].tolist()))
        if i >= WARMUP:
            p = model.predict_one(x)
            pred[i - WARMUP] = -1.0 if p is None else float(p)
        model.learn_one(x, float(y[i]))
    return {"pred": pred, "seconds": time.perf_counter() - t0}


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """Per level set and seed: every method of :data:`COMPARED` and river's HAT on one stream; scores over
    the whole run and per minority share, written to ``compare.json`` and printed as Markdown."""
    results: dict[str, Any] = {"n": args.n, "mean": 20_000, "var": 50, "delta": args.delta, "runs": []}
    methods = [*COMPARED, "hat"]
    for set_name in args.level_sets:
        levels = LEVEL_SETS[set_name]
        for seed in args.seeds:
            spec = "rbf-imbalanced:n={},mean=20000,var=50,levels={}".format(
                args.n, ";".join(map(str, levels))
            )
            stream = load_dataset(spec, seed=seed)
            share = stream.meta["minority_share"][WARMUP:]
            y = stream.y[WARMUP:]
            for method in methods:
                if method == "hat":
                    run = run_river(stream, seed)
                    extra: dict[str, Any] = {}
                else:
                    mode, scoring = COMPARED[method]
                    run = run_method(stream, mode, args.delta, args.max_depth, seed, scoring)
                    extra = {"recomputes": run["recomputes"], "chosen": run["chosen"], "kept": run["kept"]}
                pred = run["pred"]
                row: dict[str, Any] = {"levels": set_name, "seed": seed, "method": method, **extra}
                row["all"] = scores(y, pred)
                row["per_share"] = {
                    str(lv): scores(y[share == lv], pred[share == lv]) for lv in levels if (share == lv).any()
                }
                row["seconds"] = run["seconds"]
                results["runs"].append(row)
                per = " ".join(f"{k}:{v['kappa']:.3f}" for k, v in row["per_share"].items())
                print(
                    f"{set_name} seed={seed} {method:8s} kappa={row['all']['kappa']:.3f} [{per}] "
                    f"{run['seconds']:.0f}s {extra}",
                    flush=True,
                )
    (args.out / "compare.json").write_text(json.dumps(results, indent=1))
    print_compare(results)
    return results


def print_compare(results: dict[str, Any]) -> None:
    """Markdown: mean over seeds of kappa / balanced accuracy / macro-F1, per level set, per minority share
    (the lowest two) and over the whole run."""
    runs = results["runs"]
    methods = list(dict.fromkeys(r["method"] for r in runs))
    for set_name in dict.fromkeys(r["levels"] for r in runs):
        sub = [r for r in runs if r["levels"] == set_name]
        shares = sorted({k for r in sub for k in r["per_share"]}, key=float)
        seeds = sorted({r["seed"] for r in sub})
        print(
            f"\n{set_name} shares {shares}, seeds {seeds}: "
            "kappa / balanced accuracy / macro-F1 (mean over seeds)"
        )
        cols = ["whole run", *[f"minority {float(k):.0%}" for k in shares]]
        print("| method | " + " | ".join(cols) + " |\n|---|" + "---:|" * len(cols))
        for m in methods:
            rs = [r for r in sub if r["method"] == m]
            cells = []
            for key in ["all", *shares]:
                vals = [r["all"] if key == "all" else r["per_share"][key] for r in rs]
                cells.append(
                    " / ".join(f"{np.mean([v[f] for v in vals]):.3f}" for f in ("kappa", "bacc", "macro_f1"))
                )
            print(f"| {m} | " + " | ".join(cells) + " |")


def run_cell(mean: int, var: int, seeds: tuple[int, ...], args: argparse.Namespace) -> dict[str, Any]:
    """All seeds and methods of one (μ, σ²) cell; written to out/rebalance as it completes."""
    cell: dict[str, Any] = {
        "mean": mean,
        "var": var,
        "n": args.n,
        "delta": args.delta,
        "block": BLOCK,
        "max_depth": args.max_depth,
        "warmup": WARMUP,
        "runs": {},
    }
    for seed in seeds:
        stream = load_dataset(f"rbf-imbalanced:n={args.n},mean={mean},var={var}", seed=seed)
        cell["level"] = stream.meta["minority_share"][::BLOCK].tolist()
        for mode in args.methods:
            t = time.perf_counter()
            run = run_method(stream, mode, args.delta, args.max_depth, seed)
            run.pop("pred")
            cell["runs"][f"{seed}/{mode}"] = run
            print(
                f"mu={mean} var={var} seed={seed} {mode:4s} kappa={run['kappa']:.3f} "
                f"recomputes={run['recomputes']} swaps={run['swaps']} kept={run['kept']} "
                f"chosen={run['chosen']} {time.perf_counter() - t:.0f}s",
                flush=True,
            )
    path = args.out / f"cell_mu{mean}_var{var}.json"
    path.write_text(json.dumps(cell))
    return cell


# --- plots ---------------------------------------------------------------------------------------------


def _curves(cell: dict[str, Any], mode: str) -> np.ndarray:
    runs = [r for key, r in cell["runs"].items() if key.endswith(f"/{mode}")]
    return np.array([r["kappa_blocks"] for r in runs])


def _draw_cell(ax: Any, cell: dict[str, Any], legend: bool, level_axis: bool) -> None:
    """Block kappas at their block centres (mean line, min-max band) and the minority share as steps."""
    starts = np.arange(len(cell["level"])) * BLOCK
    for mode in METHODS:
        k = _curves(cell, mode)
        if not k.size:
            continue
        ax.plot(starts + BLOCK / 2, k.mean(axis=0), color=COLORS[mode], lw=1.2, label=LABELS[mode])
        ax.fill_between(
            starts + BLOCK / 2, k.min(axis=0), k.max(axis=0), color=COLORS[mode], alpha=0.12, lw=0
        )
    ax2 = ax.twinx()
    level = list(cell["level"])
    edges = np.r_[starts, cell["n"]]
    ax2.step(edges, level + level[-1:], where="post", color="tab:green", lw=1.0, label="minority share")
    ax2.set_ylim(0, 0.5)
    if level_axis:
        ax2.set_ylabel("minority share (imbalance level)", color="tab:green")
    else:
        ax2.set_yticklabels([])
    if legend:
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="lower left", fontsize=8)


def plot(out: Path, img: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = {(c["mean"], c["var"]): c for c in (json.loads(p.read_text()) for p in out.glob("cell_*.json"))}
    if (20_000, 50) in cells:
        fig, ax = plt.subplots(figsize=(9, 4.2))
        _draw_cell(ax, cells[(20_000, 50)], legend=True, level_axis=True)
        ax.set_xlabel("row")
        ax.set_ylabel("kappa per 2000-row block")
        ax.set_title("mu=20000, sigma^2=50: mean over seeds 3-7, band = min-max")
        fig.tight_layout()
        fig.savefig(img / "rebalance_fig1.png", dpi=130)
        plt.close(fig)
    means = sorted({m for m, _ in cells})
    variances = sorted({v for _, v in cells})
    if len(cells) > 1:
        size = (3.2 * len(means), 2.3 * len(variances))
        fig, axes = plt.subplots(
            len(variances), len(means), figsize=size, sharex=True, sharey=True, squeeze=False
        )
        for i, v in enumerate(variances):
            for j, m in enumerate(means):
                ax = axes[i][j]
                if (m, v) in cells:
                    _draw_cell(ax, cells[(m, v)], legend=(i, j) == (0, 0), level_axis=False)
                ax.set_title(f"mu={m}, sigma^2={v}", fontsize=8)
                ax.tick_params(labelsize=7)
        fig.tight_layout()
        fig.savefig(img / "rebalance_grid.png", dpi=110)
        plt.close(fig)
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
        for ax, mode in zip(axes, ("rs", "rs+"), strict=True):
            diff = np.full((len(variances), len(means)), np.nan)
            for (m, v), cell in cells.items():
                base, other = _curves(cell, "base"), _curves(cell, mode)
                if base.size and other.size:
                    diff[variances.index(v), means.index(m)] = float((other.mean(0) - base.mean(0)).mean())
            lim = max(float(np.nanmax(np.abs(diff))), 1e-3)
            im = ax.imshow(diff, cmap="RdYlGn", vmin=-lim, vmax=lim, aspect="auto")
            for (r, c), val in np.ndenumerate(diff):
                ax.text(c, r, f"{val:+.3f}", ha="center", va="center", fontsize=8)
            ax.set_xticks(range(len(means)), [str(m) for m in means])
            ax.set_yticks(range(len(variances)), [str(v) for v in variances])
            ax.set_xlabel("mu")
            ax.set_ylabel("sigma^2")
            ax.set_title(f"mean kappa difference {LABELS[mode]} - BASE")
            fig.colorbar(im, ax=ax)
        fig.tight_layout()
        fig.savefig(img / "rebalance_heatmaps.png", dpi=120)
        plt.close(fig)


def _print_tables(rows: list[dict[str, Any]], levels: dict[str, dict[str, float]]) -> None:
    print("| mu | sigma^2 | BASE | RS | RS+ | RS-BASE | RS+-BASE |\n|---|---|---|---|---|---|---|")
    for r in rows:
        kappas = " | ".join(f"{r[m]:.3f}" for m in METHODS)
        print(f"| {r['mean']} | {r['var']} | {kappas} | {r['rs-base']:+.3f} | {r['rs+-base']:+.3f} |")
    print("\n| minority share | BASE | RS | RS+ |\n|---|---|---|---|")
    for lv, per in levels.items():
        if per:
            print(f"| {lv} | " + " | ".join(f"{per[m]:.3f}" for m in METHODS) + " |")


def summarize(out: Path) -> dict[str, Any]:
    """Per cell and per imbalance level: mean block kappa of each method and the differences to BASE;
    recomputes, swaps and the candidates RS installed. Written to ``summary.json`` and printed."""
    cells = sorted(
        (json.loads(p.read_text()) for p in out.glob("cell_*.json")), key=lambda c: (c["var"], c["mean"])
    )
    rows: list[dict[str, Any]] = []
    by_level: dict[float, dict[str, list[float]]] = {
        lv: {m: [] for m in METHODS} for lv in (0.1, 0.2, 0.3, 0.4)
    }
    totals: dict[str, Counter[str]] = {m: Counter() for m in METHODS}
    for cell in cells:
        level = np.asarray(cell["level"])
        mean = {m: _curves(cell, m).mean(axis=0) for m in METHODS}
        row: dict[str, Any] = {"mean": cell["mean"], "var": cell["var"]}
        row.update({m: float(mean[m].mean()) for m in METHODS})
        row["rs-base"] = float((mean["rs"] - mean["base"]).mean())
        row["rs+-base"] = float((mean["rs+"] - mean["base"]).mean())
        rows.append(row)
        for lv, per in by_level.items():
            for m in METHODS:
                per[m].extend(mean[m][level == lv].tolist())
        for key, run in cell["runs"].items():
            counts = totals[key.split("/")[1]]
            counts["runs"] += 1
            for field in ("recomputes", "swaps", "kept", "forced"):
                counts[field] += run[field]
            counts["seconds"] += round(run["seconds"])
            counts.update({f"chosen:{k}": v for k, v in run["chosen"].items()})
    levels = {str(lv): {m: float(np.mean(v)) for m, v in per.items() if v} for lv, per in by_level.items()}
    summary = {"cells": rows, "levels": levels, "totals": {m: dict(c) for m, c in totals.items()}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    _print_tables(rows, levels)
    for name, counts in totals.items():
        print(name, dict(counts))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fig1", action="store_true", help="only the mu=20000, sigma^2=50 cell")
    parser.add_argument(
        "--compare", action="store_true", help="BASE, RS, RS (paper scoring), RS+ and river HAT per level set"
    )
    parser.add_argument("--level-sets", nargs="+", default=list(LEVEL_SETS), choices=list(LEVEL_SETS))
    parser.add_argument("--means", type=int, nargs="+", default=MEANS)
    parser.add_argument("--vars", type=int, nargs="+", default=VARS)
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--delta", type=float, default=0.002)
    parser.add_argument("--max-depth", type=int, default=8)
    parser.add_argument("--processes", type=int, default=1, help="at most 2 (shared machine)")
    parser.add_argument("--skip-done", action="store_true", help="keep cells that already have a JSON")
    parser.add_argument("--plot-only", action="store_true", help="redraw and summarise from the JSON")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "rebalance")
    parser.add_argument("--img", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: the Fig. 1 cell, one seed, 5,000 rows, into a temp dir",
    )
    args = parser.parse_args()
    if args.quick:
        args.fig1, args.seeds, args.n = True, args.seeds[:1], 5_000
        if args.out == parser.get_default("out") and args.img == parser.get_default("img"):
            args.out = args.img = Path(tempfile.mkdtemp(prefix="edgedrift-rebalance-quick-"))
    args.out.mkdir(parents=True, exist_ok=True)
    args.img.mkdir(parents=True, exist_ok=True)
    if args.compare:
        compare(args)
        return
    if not args.plot_only:
        cells = [(20_000, 50)] if args.fig1 else [(m, v) for v in args.vars for m in args.means]
        if args.skip_done:
            cells = [(m, v) for m, v in cells if not (args.out / f"cell_mu{m}_var{v}.json").exists()]
        seeds = tuple(args.seeds)
        if args.processes > 1:
            with ProcessPoolExecutor(min(args.processes, 2)) as pool:
                for future in [pool.submit(run_cell, m, v, seeds, args) for m, v in cells]:
                    future.result()
                    plot(args.out, args.img)
        else:
            for m, v in cells:
                run_cell(m, v, seeds, args)
                plot(args.out, args.img)
    plot(args.out, args.img)
    summarize(args.out)


if __name__ == "__main__":
    main()

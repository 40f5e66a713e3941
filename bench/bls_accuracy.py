"""Online-BLS accuracy on the paper's drifting streams (Tables 4-6), test-then-train with every label.

Data (Appendix B of the paper):

* ``hyperplane``: river ``Hyperplane`` (via ``edgedrift.data.hyperplane``), 20 features, 1% label noise
  (river ``noise_percentage=0.02``, its 0.01 offset), drift magnitude 0.5% read as ``mag_change=0.005``
  on river's default 2 drifting weights (direction reversal 9%), 100k samples; data seed = run seed.
* ``sea``: river ``SEA`` variants 0, 1, 2, 3 concatenated, drifts at 25k/50k/75k, 10% label noise
  (``edgedrift.data.sea``), 100k samples; data seed = run seed.
* ``elec2``: ``load_dataset("elec2-6")``, 45,312 rows in the file's order, 6 features: period, nswprice,
  nswdemand, vicprice, vicdemand, transfer (MOA's elecNormNew without date and day), already in [0, 1].

Inputs of the synthetic streams go through ``OnlineBLS.fit_scaler`` (min-max) on their first 1000
unlabeled rows; ELEC2 is used as it is. Methods: Online-BLS with μ = 0.99 ("Ours (Ada.)") and without
forgetting (paper defaults n1 = n2 = 10, n3 = 1000, n4 = 1, λ = 1e-8, our default enhancement scaling:
``enh_rms`` 0.01 with forgetting, 0.2 without), Online-BLS with μ = 0.99 and the old default, clearly
non-linear enhancement nodes (``enh_rms=0.2``; ``bls-ada-nl``), river HoeffdingTreeClassifier,
ARFClassifier(seed), StandardScaler | Perceptron, and no-change (predict the previous label). Seeds change
the BLS weights, the synthetic data and ARF. Metrics: OCA, BACC, macro F1, MCC (scikit-learn, at the
end) and AVRBACC (mean over time of the balanced accuracy so far). A missing prediction (a model that has
seen no label yet) counts as −1.

    python bench/bls_accuracy.py --seeds 0-2 --workers 1            # per-run JSON under out/bls/runs
    python bench/bls_accuracy.py --seeds 0-9 --methods ht,perceptron,no-change
    python bench/bls_accuracy.py --report-only                      # tables + plot from the JSON files
    python bench/bls_accuracy.py --sensitivity --n-sens 20000       # OCA of bls-ada against enh_rms

Finished runs are skipped on a re-run (delete out/bls/runs to start again).
"""

from __future__ import annotations

import os

from edgedrift_harness.results import write_json

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from functools import lru_cache
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np

from edgedrift.data import Stream, hyperplane, load_dataset, sea
from edgedrift.learners.online_bls import OnlineBLS

DATASETS = ("hyperplane", "sea", "elec2")
OUT, IMG = "out/bls", "docs/img"
METHODS = ("bls-ada", "bls-ada-nl", "bls", "ht", "arf", "perceptron", "no-change")
LABELS = {
    "bls-ada": "Online-BLS, μ = 0.99 (Ours (Ada.))",
    "bls-ada-nl": "Online-BLS, μ = 0.99, old default enh_rms 0.2",
    "bls": "Online-BLS, no forgetting",
    "ht": "river HoeffdingTree",
    "arf": "river ARF",
    "perceptron": "river StandardScaler \\| Perceptron",
    "no-change": "no-change (previous label)",
}
#: The paper's "Ours (Ada.)" rows (Tables 4-6), in %.
PAPER = {
    "hyperplane": {"OCA": 92.6, "BACC": 92.6, "AVRBACC": 91.7},
    "sea": {"OCA": 85.2, "BACC": 83.3, "AVRBACC": 82.6},
    "elec2": {"OCA": 86.8, "BACC": 86.2, "F1": 86.4, "MCC": 72.9, "AVRBACC": 86.9},
}
SCALER_ROWS = 1000
CURVE_POINTS = 400
FORGETTING = 0.99
NONLINEAR_RMS = 0.2
SENS_RMS = (0.003, 0.01, 0.03, 0.1, 0.2, 0.5, 1.0)


@lru_cache(maxsize=4)
def get_stream(dataset: str, seed: int, n: int) -> Stream:
    if dataset == "hyperplane":
        return hyperplane(n=n, n_features=20, noise=0.01, mag_change=0.005, seed=seed)
    if dataset == "sea":
        q = n // 4
        return sea(n=n, noise=0.1, drift_at=(q, 2 * q, 3 * q), seed=seed)
    if dataset == "elec2":
        s = load_dataset("elec2-6")
        if n >= len(s):
            return s
        return Stream(name=s.name, X=s.X[:n], y=s.y[:n], task="classification", feature_names=s.feature_names)
    raise ValueError(f"unknown dataset {dataset}")


def run_bls(
    stream: Stream, seed: int, forgetting: float | None, scale: bool, enh_rms: float | None = None
) -> np.ndarray:
    model = OnlineBLS(stream.X.shape[1], forgetting=forgetting, seed=seed, enh_rms=enh_rms)
    if scale:
        model.fit_scaler(stream.X[:SCALER_ROWS])
    pred = np.empty(len(stream.y))
    for i, (x, y) in enumerate(zip(stream.X, stream.y, strict=True)):
        pred[i] = model.predict_one(x)
        model.learn_one(x, float(y))
    return pred


def run_river(stream: Stream, make: Callable[[], Any]) -> np.ndarray:
    """river test-then-train with bool labels (y = +1 ↔ True): river's binary linear models expect 0/1
    targets (their hinge/log losses map y to 2y − 1, so a −1 label would act as −3)."""
    model = make()
    pred = np.empty(len(stream.y))
    names = range(stream.X.shape[1])
    for i, (x, y) in enumerate(zip(stream.X.tolist(), stream.y.tolist(), strict=True)):
        xd = dict(zip(names, x, strict=True))
        pred[i] = 1.0 if model.predict_one(xd) is True else -1.0
        model.learn_one(xd, y == 1.0)
    return pred


def river_model(method: str, seed: int) -> Callable[[], Any]:
    from river import forest, linear_model, preprocessing, tree

    if method == "ht":
        return lambda: tree.HoeffdingTreeClassifier()
    if method == "arf":
        return lambda: forest.ARFClassifier(seed=seed)
    if method == "perceptron":
        return lambda: preprocessing.StandardScaler() | linear_model.Perceptron()
    raise ValueError(method)


def metrics(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import balanced_accuracy_score, f1_score, matthews_corrcoef

    pred = np.where(np.isin(pred, (-1.0, 1.0)), pred, -1.0)
    correct = pred == y
    # AVRBACC: balanced accuracy of the predictions so far, averaged over all time steps (Appendix C.4).
    per_class = []
    for c in (-1.0, 1.0):
        is_c = y == c
        n_c = np.cumsum(is_c)
        hit_c = np.cumsum(is_c & correct)
        per_class.append((np.divide(hit_c, n_c, out=np.zeros(len(y)), where=n_c > 0), n_c > 0))
    num = sum(r * seen for r, seen in per_class)
    den = sum(seen.astype(float) for _, seen in per_class)
    bacc_t = num / den
    return {
        "OCA": 100.0 * float(correct.mean()),
        "BACC": 100.0 * float(balanced_accuracy_score(y, pred)),
        "F1": 100.0 * float(f1_score(y, pred, average="macro")),
        "MCC": 100.0 * float(matthews_corrcoef(y, pred)),
        "AVRBACC": 100.0 * float(bacc_t.mean()),
    }


def run_job(job: tuple[str, str, int, int, str]) -> dict[str, Any]:
    dataset, method, seed, n, out = job
    stream = get_stream(dataset, seed, n)
    t0 = time.perf_counter()
    if method.startswith("sens-"):  # bls-ada with enh_rms = the number after "sens-"
        pred = run_bls(stream, seed, FORGETTING, dataset != "elec2", float(method[5:]))
    elif method in ("bls", "bls-ada", "bls-ada-nl"):
        forgetting = None if method == "bls" else FORGETTING
        rms = NONLINEAR_RMS if method == "bls-ada-nl" else None
        pred = run_bls(stream, seed, forgetting, dataset != "elec2", rms)
    elif method == "no-change":
        pred = np.concatenate([[-1.0], stream.y[:-1]])
    else:
        pred = run_river(stream, river_model(method, seed))
    seconds = time.perf_counter() - t0
    correct = (pred == stream.y).astype(float)
    n_rows = len(correct)
    at = np.unique(np.linspace(1, n_rows, CURVE_POINTS).astype(int))
    result = {
        "dataset": dataset,
        "method": method,
        "seed": seed,
        "n": n_rows,
        "seconds": seconds,
        "ms_per_sample": 1e3 * seconds / n_rows,
        "metrics": metrics(stream.y, pred),
        "curve_at": at.tolist(),
        "curve_oca": (100.0 * np.cumsum(correct)[at - 1] / at).tolist(),
        "drift_points": list(stream.drift_points),
    }
    sub = "sens" if method.startswith("sens-") else "runs"
    path = Path(out) / sub / f"{dataset}_{method}_{seed}.json"
    write_json(path, result)
    return result


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return seeds


def load_runs(out: Path) -> Iterator[dict[str, Any]]:
    for path in sorted((out / "runs").glob("*.json")):
        yield json.loads(path.read_text())


def report(out: Path, img: Path) -> str:
    """Markdown tables (mean ± sd over seeds) and the convergence plot from all stored runs."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in load_runs(out):
        groups[(r["dataset"], r["method"])].append(r)
    keys = ("OCA", "BACC", "AVRBACC", "F1", "MCC")
    lines: list[str] = []
    summary: dict[str, Any] = {}
    for ds in DATASETS:
        if not any(d == ds for d, _ in groups):
            continue
        n = next(r["n"] for (d, _), rs in groups.items() if d == ds for r in rs)
        lines += [f"**{ds}** ({n:,} samples)", ""]
        lines += ["| method | seeds | " + " | ".join(keys) + " | ms/sample |", "|---|---:|" + "---:|" * 6]
        for meth in METHODS:
            rs = groups.get((ds, meth))
            if not rs:
                continue
            cells = []
            for k in keys:
                v = np.array([r["metrics"][k] for r in rs])
                cells.append(f"{v.mean():.1f} ± {v.std(ddof=1):.1f}" if len(v) > 1 else f"{v.mean():.1f}")
                summary.setdefault(ds, {}).setdefault(meth, {})[k] = [float(v.mean()), float(v.std())]
            ms = np.median([r["ms_per_sample"] for r in rs])
            seeds = ",".join(str(s) for s in sorted(r["seed"] for r in rs))
            lines.append(f"| {LABELS[meth]} | {seeds} | " + " | ".join(cells) + f" | {ms:.3f} |")
        paper = PAPER[ds]
        cells = [f"{paper[k]:.1f}" if k in paper else "–" for k in keys]
        lines += ["| *paper, Ours (Ada.)* | 10 | " + " | ".join(cells) + " | |", ""]
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n")
    convergence_plot(groups, img / "bls_convergence.png")
    return table


def sensitivity_report(out: Path) -> str:
    """OCA (and BACC) of Online-BLS (μ = 0.99) against enh_rms, from out/bls/sens."""
    runs = [json.loads(p.read_text()) for p in sorted((out / "sens").glob("*.json"))]
    if not runs:
        return ""
    rms = sorted({float(r["method"][5:]) for r in runs})
    lines = ["| data set (samples, seed) | " + " | ".join(f"enh_rms {v:g}" for v in rms) + " |"]
    lines.append("|---|" + "---:|" * len(rms))
    for ds in DATASETS:
        by = {float(r["method"][5:]): r for r in runs if r["dataset"] == ds}
        if not by:
            continue
        r0 = next(iter(by.values()))
        cells = [f"{by[v]['metrics']['OCA']:.1f}" if v in by else "" for v in rms]
        lines.append(f"| {ds} ({r0['n']:,}, seed {r0['seed']}) | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    (out / "sensitivity.md").write_text(table + "\n")
    return table


def convergence_plot(groups: dict[tuple[str, str], list[dict[str, Any]]], path: Path) -> None:
    """Cumulative OCA over time, mean ± sd over seeds, like the paper's Figure 4 (which shows OCE)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = [ds for ds in DATASETS if any(d == ds for d, _ in groups)]
    if not datasets:
        return
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.2 * len(datasets), 4.2), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, ds in zip(axes[0], datasets, strict=True):
        for i, meth in enumerate(METHODS):
            rs = groups.get((ds, meth))
            if not rs:
                continue
            at = np.array(rs[0]["curve_at"])
            ys = np.array([r["curve_oca"] for r in rs])
            mean, sd = ys.mean(axis=0), ys.std(axis=0)
            own = meth.startswith("bls")
            ax.plot(
                at,
                mean,
                color=cmap(i),
                lw=2.0 if own else 1.0,
                ls="-" if own else "--",
                label=LABELS[meth].replace("\\|", "|"),
            )
            if own:
                ax.fill_between(at, mean - sd, mean + sd, color=cmap(i), alpha=0.25, lw=0)
        for dp in rs[0]["drift_points"] if rs else ():
            ax.axvline(dp, color="black", ls=":", lw=0.8, alpha=0.6)
        ax.set_title(ds)
        ax.set_xlabel("sample")
        ax.set_ylabel("online cumulative accuracy (%)")
        ax.set_ylim(50, 100)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", help=f"default {','.join(DATASETS)}; quick sea")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--seeds", default="0-2", help="e.g. 0-2 or 0,3,5")
    parser.add_argument("--arf-seeds", default=None, help="seeds for ARF only (default: --seeds)")
    parser.add_argument("--skip-arf", action="store_true")
    parser.add_argument("--n", type=int, default=100_000, help="samples per synthetic stream (caps ELEC2)")
    parser.add_argument("--workers", type=int, default=1, help="processes (at most 2)")
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--img", default=IMG)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--sensitivity", action="store_true", help="bls-ada against enh_rms (seed: first)")
    parser.add_argument("--n-sens", type=int, default=20_000, help="samples per sensitivity run")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: SEA, seed 0, 2,000 samples, no ARF, into a temp dir"
    )
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.n, args.skip_arf = "0", 2_000, True
        if args.out == OUT and args.img == IMG:  # a smoke run never replaces the documented results
            args.out = args.img = tempfile.mkdtemp(prefix="edgedrift-bls-quick-")
    args.datasets = args.datasets or ("sea" if args.quick else ",".join(DATASETS))
    out, img = Path(args.out), Path(args.img)
    if args.sensitivity:
        seed = parse_seeds(args.seeds)[0]
        jobs = [
            (ds, f"sens-{v:g}", seed, args.n_sens, str(out))
            for ds in args.datasets.split(",")
            for v in SENS_RMS
            if not (out / "sens" / f"{ds}_sens-{v:g}_{seed}.json").exists()
        ]
        with Pool(max(1, min(2, args.workers))) as pool:
            for r in pool.imap_unordered(run_job, jobs):
                print(f"{r['dataset']:10s} {r['method']:10s} OCA {r['metrics']['OCA']:.2f}", flush=True)
        print(sensitivity_report(out))
        return
    if not args.report_only:
        seeds = parse_seeds(args.seeds)
        arf_seeds = parse_seeds(args.arf_seeds) if args.arf_seeds else seeds
        methods = [m for m in args.methods.split(",") if not (args.skip_arf and m == "arf")]
        jobs = []
        for ds in args.datasets.split(","):
            for meth in methods:
                for seed in arf_seeds if meth == "arf" else seeds:
                    if ds == "elec2" and meth == "no-change" and seed != seeds[0]:
                        continue  # deterministic
                    if not (out / "runs" / f"{ds}_{meth}_{seed}.json").exists():
                        jobs.append((ds, meth, seed, args.n, str(out)))
        cost = {"bls-ada": 5, "bls-ada-nl": 5, "bls": 4, "arf": 3, "ht": 1, "perceptron": 1, "no-change": 0}
        jobs.sort(key=lambda j: (j[2], -cost[j[1]], j[0]))
        print(f"{len(jobs)} runs to do", flush=True)
        t0 = time.perf_counter()
        with Pool(max(1, min(2, args.workers))) as pool:
            for r in pool.imap_unordered(run_job, jobs):
                m = r["metrics"]
                print(
                    f"[{time.perf_counter() - t0:7.0f} s] {r['dataset']:10s} {r['method']:10s} "
                    f"seed {r['seed']}: "
                    f"OCA {m['OCA']:.2f} BACC {m['BACC']:.2f} ({r['ms_per_sample']:.3f} ms/sample)",
                    flush=True,
                )
    print(report(out, img))
    print(sensitivity_report(out))


if __name__ == "__main__":
    main()

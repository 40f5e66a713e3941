"""Shrub Ensembles on the edge: accuracy, memory and cloud recomputes on ELEC2 and SEA, against river.

Every run is test-then-train over all labels, driven as EdgeDrift runs it: ``EdgeLoop`` with a
``CountWindow`` of W = B labels, a recompute policy (``PeriodicMonitor(k)``: every k labels, or ADWIN on the
ensemble's 0/1 errors: ``ErrorDrivenMonitor("adwin", δ, "batch")``), an in-process "cloud" that trains one
shrub with ``train_shrub`` on the window (each call is one counted recompute), and the
:class:`~edgedrift.learners.shrub_ensemble.ShrubEnsemble` as the loop's learner with
``predict_with="incremental"`` (the loop anchors every new shrub into it). The first ``N0`` labels warm up
every method (an initial shrub, not counted as a recompute; river learns them); accuracy is over the rest.

Parts (``--parts``, comma separated):

* ``defaults``: step rule × update cadence × burn-in on streams *not* used below (SEA seed 1, Hyperplane),
  to choose the learner's defaults without tuning on the evaluation streams;
* ``grid``: M × max_depth × B at k = 100 (accuracy–memory Pareto front);
* ``grid-rho``: part of that grid with the step rule of the paper's experiments (ρ = 0.5; its shrinkage
  factor 1 − 2αλ₂ = −0.2 reverses the order of the weights at every step);
* ``triggers``: k ∈ {10, 50, 100, 500, 2000} and ADWIN for three configurations, plus the "latest shrub"
  (the loop predicting with the newest cloud shrub alone) and a static shrub, (accuracy–recomputes);
* ``peers``: river HoeffdingTree, HoeffdingAdaptiveTree, ARF (3 and 10 models);
* ``k1``: a new shrub on every label (the reference's cadence), default configuration, whole stream;
* ``cache``: what the per-tree probability cache on the window saves: one cached gradient step against
  the descent of the window through all trees that every step would need without it;
* ``paper``: the paper's setting (M = 32, B = 32, depth ≤ 8, α = C/(2(m+1)), a step only when a shrub
  arrives) at a shrub on every label (Algorithm 1's cadence; streams of ≤ 5,000 rows unless
  ``--paper-k1``) and every 10 labels, the former defaults, and river's
  HoeffdingTree, HoeffdingAdaptiveTree and ARF (10 models) in the same run, on ELEC2 and the multi-class
  keystroke (4 classes) and outdoor (40 classes) streams (``--paper-data``): accuracy, memory of the
  model by river's walker for every method, and µs per sample.

Results are merged into ``out/shrubs/results.json`` (one record per data set × method), plots go to
``docs/img/shrubs_<data>_pareto.png`` and ``docs/img/shrubs_<data>_recomputes.png``.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 EDGEDRIFT_DATA_DIR=../shared/data \\
        .venv/bin/python bench/shrub_ensembles.py --parts defaults,grid,triggers,peers,k1
    .venv/bin/python bench/shrub_ensembles.py --parts paper --data ""   # the paper's setting vs river
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from shrubs.report import paper_table, pareto_plot, recompute_plot, summary, table

from edgedrift.data import Stream, load_dataset
from edgedrift.learners.shrub_ensemble import PAPER_MAX_DEPTH, PAPER_MAX_TREES, PAPER_WINDOW, ShrubEnsemble
from edgedrift.loop import EdgeLoop
from edgedrift.models.tree import ShrubModel
from edgedrift.monitors.base import Monitor, NeverMonitor, PeriodicMonitor
from edgedrift.monitors.error_driven import ErrorDrivenMonitor
from edgedrift.training.shrub import train_shrub
from edgedrift.window import CountWindow

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "shrubs"
IMG = ROOT / "docs" / "img"
N0 = 200
#: Evaluation streams: ELEC2 (45,312 rows, 5 features) and SEA with 10% label noise, 50,000 rows and
#: abrupt drifts every 12,500 rows (thresholds 8, 9, 7, 9.5), seed 0.
DATASETS = {"elec2": "elec2", "sea": "sea:n=50000,drift_at=12500;25000;37500,noise=0.1"}
#: Streams for choosing the defaults only (never reported as evaluation results).
DEFAULT_STUDY = {
    "sea-seed1": "sea:n=50000,drift_at=12500;25000;37500,noise=0.1,seed=1",
    "hyperplane": "hyperplane:n=30000,n_features=10,noise=0.05,mag_change=0.001",
}
MEMORY_SAMPLES = 20
#: Streams of the ``paper`` part: ELEC2 (its label is a price rule: "NSW price above its mean over the
#: previous 48 samples"), keystroke (4 typists) and outdoor (40 objects), all real and in the data directory.
PAPER_DATASETS = ("elec2", "keystroke", "outdoor")


@dataclass(frozen=True)
class SEConfig:
    """One Shrub Ensemble run: M, max_depth, B (= the loop's window W), trigger and optimiser settings.

    ``trigger`` is ``"k=<labels>"`` (periodic), ``"adwin=<delta>"`` or ``"never"``; ``predict`` is
    ``"incremental"`` (the ensemble) or ``"batch"`` (the newest shrub alone: the "latest shrub" baseline).
    """

    M: int = 8
    D: int = 4
    B: int = 256
    trigger: str = "k=100"
    step: float | str = "adaptive"
    rho: float | None = None
    update_every: int = 16
    burnin: int = 5
    predict: str = "incremental"

    @property
    def name(self) -> str:
        step = f"rho={self.rho}" if self.rho is not None else f"step={self.step}"
        kind = "SE" if self.predict == "incremental" else "latest-shrub"
        return (
            f"{kind} M={self.M} D={self.D} B={self.B} {self.trigger} {step} "
            f"u={self.update_every} burnin={self.burnin}"
        )


def make_monitor(trigger: str) -> Monitor:
    kind, _, value = trigger.partition("=")
    if kind == "k":
        return PeriodicMonitor(int(value))
    if kind == "adwin":
        return ErrorDrivenMonitor("adwin", float(value), "batch")
    if kind == "never":
        return NeverMonitor()
    raise ValueError(f"unknown trigger {trigger!r}")


def python_heap_bytes(obj: Any) -> int:
    """Bytes of ``obj``'s object graph, measured with river's own walker (the peers' memory figure)."""
    from river.base import Base

    return int(Base._raw_memory_usage.fget(obj))


def run_se(stream: Stream, cfg: SEConfig, limit: int | None = None) -> dict[str, Any]:
    """Test-then-train through ``EdgeLoop`` with in-process shrub training; accuracy after N0 labels."""
    X, y = stream.X, stream.y
    n = len(y) if limit is None else min(limit, len(y))
    se = ShrubEnsemble(
        max_trees=cfg.M,
        window=cfg.B,
        step=cfg.step,  # type: ignore[arg-type]
        burnin_steps=cfg.burnin,
        update_every=cfg.update_every,
        rho=cfg.rho,
    )
    train_s = [0.0]
    seed = [0]

    def recompute(Xw: np.ndarray, yw: np.ndarray) -> ShrubModel:
        t = time.perf_counter()
        seed[0] += 1
        doc = train_shrub(Xw, yw, "classification", max_depth=cfg.D, seed=seed[0])
        model = ShrubModel.from_document(doc)
        train_s[0] += time.perf_counter() - t
        return model

    loop = EdgeLoop(
        CountWindow(cfg.B, X.shape[1]),
        make_monitor(cfg.trigger),
        recompute,
        learner=se,
        predict_with="incremental" if cfg.predict == "incremental" else "batch",
    )
    loop.start(recompute(X[:N0][-cfg.B :], y[:N0][-cfg.B :]), X[:N0], y[:N0], warm_learner=True)
    train_s[0] = 0.0
    probes = set(np.linspace(N0, n - 1, MEMORY_SAMPLES).astype(int).tolist())
    mem, heap, trees = [], [], []
    correct, walk_s = 0, 0.0
    t0 = time.perf_counter()
    for i in range(N0, n):
        correct += loop.process_one(X[i], float(y[i])) == y[i]
        if i in probes:
            t = time.perf_counter()
            mem.append(se.memory_bytes if cfg.predict == "incremental" else loop.model.nbytes)  # type: ignore[union-attr]
            trees.append(se.n_trees if cfg.predict == "incremental" else 1)
            heap.append(python_heap_bytes(se if cfg.predict == "incremental" else loop.model))
            walk_s += time.perf_counter() - t
    elapsed = time.perf_counter() - t0 - walk_s
    m = n - N0
    return {
        "method": cfg.name,
        "family": "SE" if cfg.predict == "incremental" else "latest-shrub",
        "config": asdict(cfg),
        "accuracy": correct / m,
        "recomputes": loop.counters.recomputes,
        "memory_bytes_mean": float(np.mean(mem)),
        "memory_bytes_max": int(np.max(mem)),
        "python_heap_bytes_final": python_heap_bytes(se if cfg.predict == "incremental" else loop.model),
        "python_heap_bytes_mean": float(np.mean(heap)),
        "python_heap_bytes_max": int(np.max(heap)),
        "n_trees_mean": float(np.mean(trees)),
        "us_per_label_edge": (elapsed - train_s[0]) / m * 1e6,
        "us_per_label_training": train_s[0] / m * 1e6,
        "n_evaluated": m,
    }


def river_model(name: str) -> Any:
    from river import forest, tree

    models: dict[str, Callable[[], Any]] = {
        "river HoeffdingTree": lambda: tree.HoeffdingTreeClassifier(),
        "river HoeffdingAdaptiveTree": lambda: tree.HoeffdingAdaptiveTreeClassifier(seed=0),
        "river ARF n_models=3": lambda: forest.ARFClassifier(n_models=3, seed=0),
        "river ARF n_models=10": lambda: forest.ARFClassifier(n_models=10, seed=0),
    }
    return models[name]()


RIVER_PEERS = (
    "river HoeffdingTree",
    "river HoeffdingAdaptiveTree",
    "river ARF n_models=3",
    "river ARF n_models=10",
)


def run_river(stream: Stream, name: str) -> dict[str, Any]:
    """river's predict_one, then learn_one, on every label after N0 warm-up labels."""
    model = river_model(name)
    keys = list(range(stream.X.shape[1]))
    rows = [dict(zip(keys, r, strict=True)) for r in stream.X.tolist()]
    labels = (stream.y > 0).tolist() if stream.n_classes == 2 else stream.y.astype(int).tolist()
    for i in range(N0):
        model.learn_one(rows[i], labels[i])
    n = len(labels)
    probes = set(np.linspace(N0, n - 1, MEMORY_SAMPLES).astype(int).tolist())
    mem, correct, walk_s = [], 0, 0.0
    t0 = time.perf_counter()
    for i in range(N0, n):
        correct += model.predict_one(rows[i]) == labels[i]
        model.learn_one(rows[i], labels[i])
        if i in probes:
            t = time.perf_counter()
            mem.append(model._raw_memory_usage)
            walk_s += time.perf_counter() - t
    elapsed = time.perf_counter() - t0 - walk_s
    m = n - N0
    return {
        "method": name,
        "family": "river",
        "accuracy": correct / m,
        "recomputes": 0,
        "python_heap_bytes_mean": float(np.mean(mem)),
        "python_heap_bytes_max": int(np.max(mem)),
        "us_per_label_edge": elapsed / m * 1e6,
        "n_evaluated": m,
    }


# ----------------------------------------------------------------------------------- parts


def grid_configs(quick: bool) -> list[SEConfig]:
    Ms = (1, 4, 16) if quick else (1, 2, 4, 8, 16, 32)
    Ds = (2, 8) if quick else (2, 4, 8)
    Bs = (64, 1024) if quick else (64, 256, 1024)
    return [SEConfig(M=M, D=D, B=B) for M in Ms for D in Ds for B in Bs]


def grid_rho_configs(quick: bool) -> list[SEConfig]:
    Ms = (1, 4) if quick else (1, 2, 4, 8)
    return [SEConfig(M=M, D=D, B=B, rho=0.5) for M in Ms for D in (2, 4, 8) for B in (64, 256)]


#: The configurations whose accuracy is traced against the number of recomputes.
TRIGGER_BASES = (SEConfig(M=8, D=4, B=256), SEConfig(M=4, D=2, B=64), SEConfig(M=16, D=8, B=1024))
TRIGGERS = ("k=10", "k=50", "k=100", "k=500", "k=2000", "adwin=0.002", "adwin=0.1")


def trigger_configs(quick: bool) -> list[SEConfig]:
    triggers = ("k=50", "k=500", "adwin=0.002") if quick else TRIGGERS
    bases = TRIGGER_BASES[:1] if quick else TRIGGER_BASES
    out = [replace(b, trigger=t) for b in bases for t in triggers]
    base = TRIGGER_BASES[0]
    out += [replace(base, trigger=t, predict="batch") for t in triggers]
    out.append(replace(base, trigger="never", predict="batch"))
    return out


def default_study_configs(quick: bool) -> list[SEConfig]:
    steps: list[tuple[float | str, float | None]] = [
        ("adaptive", None),
        (0.01, None),
        (0.1, None),
        (1.0, None),
        ("adaptive", 0.25),
        ("adaptive", 0.5),
        ("adaptive", 0.75),
    ]
    cadences = (0, 1) if quick else (0, 1, 16)
    base = SEConfig(trigger="k=50")
    out = [replace(base, step=s, rho=r, update_every=u) for s, r in steps for u in cadences]
    out += [replace(base, burnin=b, update_every=u) for b in (0, 10) for u in (1, 16)]
    return out


def k1_cost(stream: Stream, prefix: int | None = None) -> dict[str, Any]:
    """A shrub on every label (the reference's cadence) for the default configuration: the whole stream,
    or the first ``prefix`` labels (then the run time of the whole stream is extrapolated)."""
    r = run_se(
        stream, replace(TRIGGER_BASES[0], trigger="k=1"), limit=None if prefix is None else N0 + prefix
    )
    per_label = (r["us_per_label_edge"] + r["us_per_label_training"]) * 1e-6
    r["family"] = "SE-k1"
    if prefix is not None:
        r["method"] += f" (first {prefix} labels only)"
    r["projected_full_run_s"] = per_label * (len(stream.y) - N0)
    return r


#: The paper's setting (the authors' reference defaults): M = 32, B = 32, depth ≤ 8, burn-in 5, steps only
#: when a shrub arrives; at Algorithm 1's cadence (a shrub on every label) and every 10 labels. The
#: former defaults (M = 8, D = 4, B = 256, a shrub every 100 labels, a step every 16) for the record.
PAPER = SEConfig(
    M=PAPER_MAX_TREES, D=PAPER_MAX_DEPTH, B=PAPER_WINDOW, trigger="k=1", step="per-class", update_every=0
)
PAPER_CONFIGS = (PAPER, replace(PAPER, trigger="k=10"), SEConfig())
PAPER_PEERS = ("river HoeffdingTree", "river HoeffdingAdaptiveTree", "river ARF n_models=10")
#: A shrub on every label costs a CART fit per label: run only on streams up to this many rows (keystroke,
#: outdoor), unless ``--paper-k1`` asks for it everywhere.
PAPER_K1_MAX_ROWS = 5_000


def paper_comparison(stream: Stream, k1: bool = False) -> list[dict[str, Any]]:
    """The ``paper`` part on one stream: the SE configurations and river's trees, in the same run."""
    out = []
    for cfg in PAPER_CONFIGS:
        if cfg.trigger == "k=1" and not k1 and len(stream.y) > PAPER_K1_MAX_ROWS:
            continue
        r = run_se(stream, cfg)
        r["family"] = "paper-SE"
        out.append(r)
    for name in PAPER_PEERS:
        out.append(run_river(stream, name))
    return out


def median_call(fn: Callable[[], object], repeat: int) -> float:
    """Seconds of one call: the median of ``repeat`` single-call timings (robust to a busy machine)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def measure_cache(
    se: ShrubEnsemble, window: np.ndarray, x: np.ndarray, y: float, repeat: int
) -> dict[str, float]:
    """Through the public API: ``learn_one`` with a step on every label (on a fresh copy each time, so
    that pruning never shrinks the ensemble being timed: appending the row, its descent through every
    tree, one cached step), the descent of the whole window (``predict_proba_many``, what every step
    would need without the cache) and of one row. The cached step is the first minus the last."""
    m = se.n_trees
    copies = [copy.deepcopy(se) for _ in range(repeat)]
    for c in copies:
        c.update_every = 1

    def learn_with_step() -> None:
        copies.pop().learn_one(x, y)

    learn = 1e6 * median_call(learn_with_step, repeat)
    row = 1e6 * median_call(lambda: se.predict_proba_many(x[None, :]), repeat)
    return {
        "trees": m,
        "us_learn_with_step": learn,
        "us_cached_step": learn - row,
        "us_window_descent": 1e6 * median_call(lambda: se.predict_proba_many(window), repeat),
        "us_row_descent": row,
    }


def cache_cost(stream: Stream, repeat: int = 100) -> list[dict[str, Any]]:
    """µs of one cached proximal step vs. the window descent an uncached step adds, and µs per label to
    keep the cache filled."""
    out = []
    X, y = stream.X, stream.y
    for M, D, B in ((8, 4, 256), (32, 8, 256), (8, 4, 1024), (32, 8, 1024)):
        se = ShrubEnsemble(max_trees=M, window=B, update_every=0)
        se.learn_many(X[N0 : N0 + B], y[N0 : N0 + B])
        docs = [
            train_shrub(X[lo : lo + B], y[lo : lo + B], "classification", max_depth=D, seed=t)
            for t, lo in enumerate(range(N0, N0 + M * 64, 64))
        ]
        se.load(docs, np.full(M, 1.0 / M))
        window = X[N0 : N0 + B]  # what the ensemble holds: it learned exactly these B rows
        out.append({"M": M, "D": D, "B": B, **measure_cache(se, window, X[N0 + B], float(y[N0 + B]), repeat)})
        print(out[-1], flush=True)
    return out


# ------------------------------------------------------------------------------------ main


def load_results(path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    if path.exists():
        loaded: dict[str, dict[str, dict[str, Any]]] = json.loads(path.read_text())
        return loaded
    return {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="grid,triggers,peers")
    ap.add_argument("--data", default="elec2,sea")
    ap.add_argument("--paper-data", default=",".join(PAPER_DATASETS), help="streams of the paper part")
    ap.add_argument("--paper-k1", action="store_true", help="a shrub on every label on long streams too")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: a small subset of every part on the first 3,000 rows of SEA (the paper part on the "
        "real keystroke stream, from the data directory), into a temp dir",
    )
    ap.add_argument("--match", default="", help="only run the SE configurations whose name contains this")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--img", type=Path, default=IMG)
    args = ap.parse_args()
    rows: int | None = None
    if args.quick:
        rows, args.data, args.paper_data = 3_000, "sea", "keystroke"
        args.parts = "grid,triggers,peers,cache,paper"
        if args.out == OUT and args.img == IMG:  # a smoke run never replaces the documented results
            args.out = args.img = Path(tempfile.mkdtemp(prefix="edgedrift-shrubs-quick-"))
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    args.img.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    results = load_results(results_path)

    def record(data: str, part: str, r: dict[str, Any]) -> None:
        old = results.setdefault(data, {}).get(r["method"], {})
        r["parts"] = sorted(set(old.get("parts", [])) | {part})
        results[data][r["method"]] = r
        results_path.write_text(json.dumps(results, indent=1))
        print(
            f"[{data}] {r['method']}: acc {100 * r['accuracy']:.2f}%  recomputes {r['recomputes']}  "
            f"{r['us_per_label_edge']:.0f} µs/label",
            flush=True,
        )

    if "defaults" in parts:
        for data, spec in DEFAULT_STUDY.items():
            stream = load_dataset(spec)
            for cfg in default_study_configs(args.quick):
                record(data, "defaults", run_se(stream, cfg))
    if "paper" in parts:
        for data in [d.strip() for d in args.paper_data.split(",") if d.strip()]:
            stream = load_dataset(data)
            if rows is not None:
                stream = replace(stream, X=stream.X[:600], y=stream.y[:600])
            paper_recs = []
            for r in paper_comparison(stream, args.paper_k1):
                record(data, "paper", r)
                paper_recs.append(r)
            print(f"\n## {data}: the paper's setting against river's trees\n\n{paper_table(paper_recs)}\n")
    for data in [d.strip() for d in args.data.split(",") if d.strip()]:
        stream = load_dataset(DATASETS[data])
        if rows is not None:
            stream = Stream(stream.name, stream.X[:rows], stream.y[:rows], stream.task, stream.feature_names)
        if "grid" in parts:
            for cfg in grid_configs(args.quick):
                if args.match in cfg.name:
                    record(data, "grid", run_se(stream, cfg))
        if "grid-rho" in parts:
            for cfg in grid_rho_configs(args.quick):
                if args.match in cfg.name:
                    record(data, "grid-rho", run_se(stream, cfg))
        if "triggers" in parts:
            for cfg in trigger_configs(args.quick):
                if args.match in cfg.name:
                    record(data, "triggers", run_se(stream, cfg))
        if "peers" in parts:
            peers = RIVER_PEERS[:2] if args.quick else RIVER_PEERS
            for name in peers:
                record(data, "peers", run_river(stream, name))
        if "k1" in parts:
            record(data, "k1", k1_cost(stream, 500 if args.quick else None))
        if "cache" in parts:
            cache = cache_cost(stream, 10 if args.quick else 100)
            (args.out / f"cache_{data}.json").write_text(json.dumps(cache, indent=1))
        recs = list(results.get(data, {}).values())
        in_grid = {"grid", "grid-rho"}
        grid_recs = [r for r in recs if r["family"] == "river" or in_grid & set(r.get("parts", ()))]
        pareto_plot(data, grid_recs, args.img / f"shrubs_{data}_pareto.png")
        recompute_plot(data, recs, args.img / f"shrubs_{data}_recomputes.png")
        print(f"\n## {data}\n\n{table(recs)}\n\n{summary(data, recs, TRIGGERS)}\n", flush=True)
    for data in DEFAULT_STUDY:
        if data in results:
            print(f"\n## defaults study: {data}\n\n{table(list(results[data].values()))}\n", flush=True)


if __name__ == "__main__":
    main()

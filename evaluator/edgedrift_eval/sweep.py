"""Parameter sweeps: every (strategy, parameter, offset) run in parallel, aggregated over offsets, and the
files a sweep writes (results.json, runs.json, runs.csv, meta.json)."""

from __future__ import annotations

import csv
import json
import math
import multiprocessing as mp
import os
import typing
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from edgedrift.data import Stream
from edgedrift_eval.peers import REGRESSION_PEERS, RIVER_PEERS
from edgedrift_eval.protocol import Protocol
from edgedrift_eval.results import RunResult, SweepEntry
from edgedrift_eval.runner import BASELINES, RunSpec, run_one
from edgedrift_eval.scoring import MAX_LAG
from edgedrift_eval.strategies import STRATEGIES

METRICS_CLS = (
    "accuracy",
    "kappa",
    "kappa_t",
    "kappa_m",
    "balanced_accuracy",
    "f1",
    "mcc",
    "accuracy_labeled",
    *(f"accuracy_lag{k}" for k in range(1, MAX_LAG + 1)),
)
METRICS_REG = ("mse", "rmse", "mae", "rae", "r2")

#: The stream and protocol of the sweep a worker process serves (set by :func:`_init`).
_JOB: list[tuple[Stream, Protocol]] = []


class _Bar(typing.Protocol):
    """The part of a tqdm progress bar a sweep uses."""

    def update(self, n: int = 1) -> object: ...

    def close(self) -> None: ...


def plan(
    strategies: Sequence[str],
    stream: Stream,
    protocol: Protocol,
    grids: Mapping[str, Sequence[float]] | None = None,
    offsets: Sequence[int] | None = None,
) -> list[RunSpec]:
    """All runs of a sweep; strategies that do not apply to the stream's task are skipped."""
    offsets = tuple(offsets) if offsets is not None else protocol.offsets
    specs: list[RunSpec] = []
    for name in [*strategies, *BASELINES]:
        if name in RIVER_PEERS:
            if stream.task == "regression" and name not in REGRESSION_PEERS:
                continue
            values: Sequence[float | None] = [None]
        elif name in BASELINES:
            values = [None]
        else:
            s = STRATEGIES[name]
            if s.classification_only and stream.task == "regression":
                continue
            if stream.n_classes > 2 and not s.multiclass:
                continue
            values = list((grids or {}).get(name, s.grid)) or [None]
        specs.extend(RunSpec(name, v, o) for v in values for o in offsets)
    return specs


def _init(stream: Stream, protocol: Protocol) -> None:
    """A worker's set-up: the sweep's stream and protocol, and BLAS pinned to one thread (the runs' small
    matrices gain nothing from BLAS threads, and ``jobs`` processes times the cores' threads oversubscribe
    the machine)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)
    _JOB[:] = [(stream, protocol)]


def _cost_first(specs: Sequence[RunSpec]) -> list[RunSpec]:
    """The specs with the re-tuning strategies' runs first (each is many times a plain run): started
    last, one of them would leave the other workers idle at the end of the sweep."""

    def slow(spec: RunSpec) -> bool:
        return spec.strategy in STRATEGIES and STRATEGIES[spec.strategy].needs_history

    return sorted(specs, key=lambda spec: not slow(spec))


def _work(spec: RunSpec) -> RunResult:
    stream, protocol = _JOB[0]
    return run_one(stream, protocol, spec)


def run_sweep(
    stream: Stream,
    protocol: Protocol,
    specs: Sequence[RunSpec],
    jobs: int | None = None,
    progress: bool = True,
) -> list[RunResult]:
    """Run every spec, ``jobs`` processes at a time (default: all cores, at most 2 here), with a progress
    bar and its ETA on stderr."""
    jobs = jobs or min(2, os.cpu_count() or 1)
    bar = _progress(len(specs), progress, f"{stream.name}")
    rows: list[RunResult] = []
    if jobs == 1:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1):
            _JOB[:] = [(stream, protocol)]
            for spec in _cost_first(specs):
                rows.append(_work(spec))
                bar.update(1)
    else:
        ctx = mp.get_context("fork")
        with ProcessPoolExecutor(
            jobs, mp_context=ctx, initializer=_init, initargs=(stream, protocol)
        ) as pool:
            futures = [pool.submit(_work, s) for s in _cost_first(specs)]
            for fut in as_completed(futures):
                rows.append(fut.result())
                bar.update(1)
    bar.close()
    key = {(s.strategy, s.param, s.offset): i for i, s in enumerate(specs)}
    rows.sort(key=lambda r: key.get((r.strategy, r.param, r.offset), 0))
    return rows


def _progress(total: int, enabled: bool, desc: str) -> _Bar:
    from tqdm import tqdm

    bar: _Bar = tqdm(total=total, desc=desc, unit="run", disable=not enabled, dynamic_ncols=True)
    return bar


def aggregate(rows: Iterable[RunResult], task: str) -> list[SweepEntry]:
    """One entry per (strategy, params): mean and sd over label offsets of every metric."""
    groups: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    for r in rows:
        groups[(r.strategy, json.dumps(r.params, sort_keys=True))].append(r)
    metrics = METRICS_CLS if task == "classification" else METRICS_REG
    out = []
    for (strategy, _), rs in groups.items():
        values = {
            m: np.array([r.metrics.get(m, np.nan) for r in rs], dtype=float)
            for m in metrics
            if any(m in r.metrics for r in rs)
        }
        out.append(
            SweepEntry(
                strategy=strategy,
                params=rs[0].params,
                n_offsets=len(rs),
                n_scored=rs[0].n_scored,
                recomputes=float(np.mean([r.recomputes for r in rs])),
                recomputes_max=int(max(r.recomputes for r in rs)),
                bytes_up=float(np.mean([r.bytes_up for r in rs])),
                bytes_down=float(np.mean([r.bytes_down for r in rs])),
                edge_us_per_sample=float(np.mean([r.edge_us_per_sample for r in rs])),
                update_order=rs[0].update_order,
                C=[r.C for r in rs],
                learner_params=rs[0].learner_params or {},
                mean={m: _nanmean(v) for m, v in values.items()},
                sd={m: sample_sd(v) for m, v in values.items()},
                offsets=[
                    {"offset": r.offset, "recomputes": r.recomputes}
                    | {m: r.metrics[m] for m in metrics if m in r.metrics}
                    for r in rs
                ],
                edge_state_bytes=float(np.mean([r.edge_state_bytes for r in rs])),
                cloud_cpu_s_per_recompute=float(np.mean([r.cloud_cpu_s_per_recompute for r in rs])),
            )
        )
    return out


def _nanmean(v: np.ndarray) -> float:
    finite = v[~np.isnan(v)]
    return float(np.mean(finite)) if len(finite) else float("nan")


def sample_sd(v: np.ndarray) -> float:
    """Standard deviation over label offsets with ddof = 1 (a sample of offsets); 0 for one offset.

    Examples
    --------
    >>> sample_sd(np.array([1.0, 2.0, 3.0])), sample_sd(np.array([5.0]))
    (1.0, 0.0)
    """
    finite = v[~np.isnan(v)]
    return float(np.std(finite, ddof=1)) if len(finite) > 1 else 0.0


def best_within(
    entries: Sequence[SweepEntry], budget: float, names: Iterable[str], metric: str = "accuracy"
) -> SweepEntry | None:
    """The best configuration among ``names`` whose mean recomputes are within ``budget``."""
    wanted = set(names)
    sign = 1.0 if metric not in METRICS_REG or metric == "r2" else -1.0
    pool = [e for e in entries if e.strategy in wanted and e.recomputes <= budget + 1e-9]
    return max(pool, key=lambda e: sign * e.metric(metric), default=None)


def write_outputs(
    out: Path, entries: Sequence[SweepEntry], rows: Sequence[RunResult], meta: Mapping[str, object]
) -> None:
    """results.json (aggregated runs), runs.json/runs.csv (one row per offset), meta.json."""
    out.mkdir(parents=True, exist_ok=True)
    dicts = [r.as_dict() for r in rows]
    (out / "results.json").write_text(json.dumps(_clean([e.as_dict() for e in entries]), indent=1))
    (out / "runs.json").write_text(json.dumps(_clean(dicts)))
    (out / "meta.json").write_text(json.dumps(_clean(meta), indent=1))
    keys = [
        "strategy",
        "params",
        "offset",
        "recomputes",
        "n_scored",
        "accuracy",
        "kappa",
        "kappa_t",
        "balanced_accuracy",
        "f1",
        "mcc",
        "mse",
        "rmse",
        "mae",
        "rae",
        "bytes_up",
        "bytes_down",
        "edge_us_per_sample",
        "edge_state_bytes",
        "cloud_cpu_s_per_recompute",
        "accuracy_labeled",
        "update_order",
        "C",
    ]
    with (out / "runs.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(keys)
        for r in dicts:
            writer.writerow([json.dumps(r["params"]) if k == "params" else r.get(k, "") for k in keys])


def _clean(obj: object) -> object:
    """JSON-safe copy: numpy scalars to Python, NaN/inf to None."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj

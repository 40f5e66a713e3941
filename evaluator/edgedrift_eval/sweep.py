"""Parameter sweeps: every (strategy, parameter, offset) run in parallel, aggregated over offsets."""

from __future__ import annotations

import csv
import json
import math
import multiprocessing as mp
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from edgedrift.data import Stream
from edgedrift_eval.peers import REGRESSION_PEERS, RIVER_PEERS
from edgedrift_eval.protocol import Protocol
from edgedrift_eval.runner import BASELINES, RunSpec, run_one
from edgedrift_eval.strategies import STRATEGIES

METRICS_CLS = ("accuracy", "kappa", "kappa_t", "kappa_m", "balanced_accuracy", "f1", "mcc")
METRICS_REG = ("mse", "rmse", "mae", "rae", "r2")

_STATE: dict[str, Any] = {}


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
            values = list((grids or {}).get(name, s.grid)) or [None]
        specs.extend(RunSpec(name, v, o) for v in values for o in offsets)
    return specs


def _init(stream: Stream, protocol: Protocol) -> None:
    _STATE["stream"], _STATE["protocol"] = stream, protocol


def _work(spec: RunSpec) -> dict[str, Any]:
    return run_one(_STATE["stream"], _STATE["protocol"], spec)


def run_sweep(
    stream: Stream,
    protocol: Protocol,
    specs: Sequence[RunSpec],
    jobs: int | None = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Run every spec, ``jobs`` processes at a time (default: all cores, at most 2 here)."""
    jobs = jobs or min(2, os.cpu_count() or 1)
    bar = _progress(len(specs), progress, f"{stream.name}")
    rows: list[dict[str, Any]] = []
    if jobs == 1:
        _init(stream, protocol)
        for spec in specs:
            rows.append(_work(spec))
            bar.update(1)
    else:
        ctx = mp.get_context("fork")
        with ProcessPoolExecutor(
            jobs, mp_context=ctx, initializer=_init, initargs=(stream, protocol)
        ) as pool:
            futures = [pool.submit(_work, s) for s in specs]
            for fut in as_completed(futures):
                rows.append(fut.result())
                bar.update(1)
    bar.close()
    key = {(s.strategy, s.param, s.offset): i for i, s in enumerate(specs)}
    rows.sort(key=lambda r: key.get((r["strategy"], _param_of(r), r["offset"]), 0))
    return rows


def _param_of(row: dict[str, Any]) -> float | None:
    return next(iter(row["params"].values()), None)


def _progress(total: int, enabled: bool, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="run", disable=not enabled, dynamic_ncols=True)


def aggregate(rows: Iterable[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    """One entry per (strategy, params): mean and sd over label offsets of every metric."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["strategy"], json.dumps(r["params"], sort_keys=True))].append(r)
    metrics = METRICS_CLS if task == "classification" else METRICS_REG
    out = []
    for (strategy, _), rs in groups.items():
        entry: dict[str, Any] = {
            "strategy": strategy,
            "params": rs[0]["params"],
            "n_offsets": len(rs),
            "n_scored": rs[0]["n_scored"],
            "recomputes": float(np.mean([r["recomputes"] for r in rs])),
            "recomputes_max": int(max(r["recomputes"] for r in rs)),
            "bytes_up": float(np.mean([r["bytes_up"] for r in rs])),
            "bytes_down": float(np.mean([r["bytes_down"] for r in rs])),
            "edge_us_per_sample": float(np.mean([r["edge_us_per_sample"] for r in rs])),
            "update_order": rs[0].get("update_order"),
            "C": [r.get("C") for r in rs],
            "learner_params": rs[0].get("learner_params", {}),
        }
        for m in metrics:
            vals = np.array([r[m] for r in rs], dtype=float)
            entry[m] = float(np.mean(vals))
            entry[f"{m}_sd"] = float(np.std(vals))
        entry["offsets"] = [{k: r[k] for k in ("offset", "recomputes", *metrics) if k in r} for r in rs]
        out.append(entry)
    return out


def best_within(
    entries: Sequence[dict[str, Any]], budget: float, names: Iterable[str], metric: str = "accuracy"
) -> dict[str, Any] | None:
    """The best configuration among ``names`` whose mean recomputes are within ``budget``."""
    wanted = set(names)
    sign = 1.0 if metric not in METRICS_REG or metric == "r2" else -1.0
    pool = [e for e in entries if e["strategy"] in wanted and e["recomputes"] <= budget + 1e-9]
    return max(pool, key=lambda e: sign * e[metric], default=None)


def write_outputs(
    out: Path, entries: list[dict[str, Any]], rows: list[dict[str, Any]], meta: dict[str, Any]
) -> None:
    """results.json (aggregated runs), runs.json/runs.csv (one row per offset), meta.json."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(_clean(entries), indent=1))
    (out / "runs.json").write_text(json.dumps(_clean(rows)))
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
        "update_order",
        "C",
    ]
    with (out / "runs.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(keys)
        for r in rows:
            writer.writerow([json.dumps(r["params"]) if k == "params" else r.get(k, "") for k in keys])


def _clean(obj: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, NaN/inf to None."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items() if k != "predictions"}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj

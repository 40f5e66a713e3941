"""Comparing the deployed run with the offline evaluator, and the final table and report."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edgedrift.models.losses import FloatArray
from edgedrift_demo.devices import PROTOCOL, STRATEGY, DeviceRun
from edgedrift_eval.runner import RunSpec, run_one
from edgedrift_harness.cloud import CloudProcess
from edgedrift_harness.mqtt import PredictionCollector


def same(a: FloatArray, b: FloatArray) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Element-wise equality that counts NaN == NaN."""
    return np.asarray((a == b) | (np.isnan(a) & np.isnan(b)))


def score(task: str, y: FloatArray, y_hat: FloatArray) -> float:
    """Accuracy (classification) or RMSE (regression) of the predictions."""
    if task == "classification":
        return float(np.mean(y_hat == y))
    return math.sqrt(float(np.mean((y_hat - y) ** 2)))


def compare(run: DeviceRun, collector: PredictionCollector, cloud: CloudProcess) -> dict[str, Any]:
    """The deployed figures, the offline evaluator's, and whether they agree."""
    spec, agent = run.spec, run.agent
    assert agent is not None
    stream, W = spec.stream, PROTOCOL.window
    offline = run_one(stream, PROTOCOL, RunSpec(STRATEGY, None, 0), curves=True)
    deployed_preds = collector.y_hat[spec.device_id][W:]
    offline_preds = np.asarray(offline.scored_predictions(), dtype=np.float64)
    equal = same(deployed_preds, offline_preds)
    mismatches = int(np.count_nonzero(~equal))
    first = int(np.argmin(equal)) + W if mismatches else None
    received = collector.received(spec.device_id)
    loop = agent.session.loop
    c = agent.session.counters
    loop_recomputes = loop.counters.recomputes if loop is not None else 0
    cloud_counters = cloud.counters(spec.device_id)
    complete = received == run.n and c.dropped == 0
    agree = complete and mismatches == 0 and loop_recomputes == offline.recomputes
    scored = ~np.isnan(deployed_preds)
    metric_key = spec.metric
    return {
        "device": spec.device_id,
        "dataset": stream.name,
        "note": spec.note,
        "task": stream.task,
        "metric": metric_key,
        "samples": run.n,
        "scored": int(len(stream) - W),
        "deployed": {
            metric_key: score(stream.task, stream.y[W:][scored], deployed_preds[scored])
            if scored.any()
            else None,
            "predictions_received": received,
            "samples_processed": c.samples,
            "dropped": c.dropped,
            "duplicates": c.duplicates,
            "recomputes": loop_recomputes,
            "cloud_recomputes": int(cloud_counters["recomputes"]),
            "cloud_reasons": cloud_counters.get("reasons", {}),
            "model_version": agent.session.model_version,
            "bytes_up": loop.counters.bytes_up if loop is not None else 0,
            "bytes_down": loop.counters.bytes_down if loop is not None else 0,
            "http_bytes_up": c.http_bytes_up,
            "http_bytes_down": c.http_bytes_down,
            "cloud_bytes_in": int(cloud_counters.get("bytes_in", 0)),
            "cloud_bytes_out": int(cloud_counters.get("bytes_out", 0)),
            "recompute_failures": c.recompute_failures,
            "replay_s": None if run.finished is None else round(run.finished - run.started, 2),
        },
        "offline": {
            metric_key: offline.metric(metric_key),
            "recomputes": offline.recomputes,
            "bytes_up": offline.bytes_up,
            "bytes_down": offline.bytes_down,
            "recompute_at": offline.recompute_at,
            "C": offline.C,
        },
        "mismatched_predictions": mismatches,
        "first_mismatch": first,
        "complete": complete,
        "agree": agree,
        "cloud_consistent": int(cloud_counters["recomputes"]) == loop_recomputes + 1,
    }


def _kb(n: int) -> str:
    if n < 1000:
        return str(n)
    return f"{n / 1e3:.1f}k" if n < 1e6 else f"{n / 1e6:.2f}M"


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The final table: deployed figures beside the offline evaluator's."""
    head_ = (
        "device", "samples", "metric", "deployed", "offline", "recomp edge/cloud/offline",
        "loop bytes up/down", "offline up/down", "HTTP bytes up/down", "agree",
    )  # fmt: skip
    body = []
    for r in rows:
        d, o = r["deployed"], r["offline"]
        dep = d[r["metric"]]
        body.append(
            (
                r["device"],
                f"{r['samples']:,}",
                r["metric"],
                "-" if dep is None else f"{dep:.4f}",
                f"{o[r['metric']]:.4f}",
                f"{d['recomputes']} / {d['cloud_recomputes']} / {o['recomputes']}",
                f"{_kb(d['bytes_up'])} / {_kb(d['bytes_down'])}",
                f"{_kb(o['bytes_up'])} / {_kb(o['bytes_down'])}",
                f"{_kb(d['http_bytes_up'])} / {_kb(d['http_bytes_down'])}",
                "yes" if r["agree"] else "NO",
            )
        )
    widths = [max(len(str(row[i])) for row in [head_, *body]) for i in range(len(head_))]
    fmt = "  ".join("{:<%d}" % w if i in (0, 2) else "{:>%d}" % w for i, w in enumerate(widths))  # noqa: UP031
    lines = [fmt.format(*head_), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row) for row in body]
    return lines


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """summary.md: the table and how it was made."""
    out = [
        "# EdgeDrift demo",
        "",
        f"{meta['broker']['kind']} broker, cloud trainer at {meta['cloud_url']}, protocol: label every "
        f"{PROTOCOL.every}th sample, window {PROTOCOL.window}, delay {PROTOCOL.delay}; strategy {STRATEGY} "
        f"(default alpha), sync recomputes; wall time {meta['wall_s']:.1f} s.",
        "",
        "| device | data | samples | metric | deployed | offline | recomputes edge | cloud (incl. initial) "
        "| offline | loop bytes up/down | offline bytes up/down | HTTP bytes up/down | agree |",
        "|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for r in rows:
        d, o = r["deployed"], r["offline"]
        dep = d[r["metric"]]
        out.append(
            f"| {r['device']} | {r['dataset']} | {r['samples']:,} | {r['metric']} | "
            f"{'-' if dep is None else f'{dep:.4f}'} | {o[r['metric']]:.4f} | {d['recomputes']} | "
            f"{d['cloud_recomputes']} | {o['recomputes']} | {d['bytes_up']:,} / {d['bytes_down']:,} | "
            f"{o['bytes_up']:,} / {o['bytes_down']:,} | {d['http_bytes_up']:,} / {d['http_bytes_down']:,} | "
            f"{'yes' if r['agree'] else '**no**'} |"
        )
    notes = [r["note"] for r in rows if r["note"]]
    if notes:
        out += ["", *(f"- {n}" for n in notes)]
    return "\n".join(out) + "\n"


def json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)

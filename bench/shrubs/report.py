"""The Shrub Ensembles benchmark's output: the accuracy–memory Pareto plot, the accuracy–recomputes plot,
the table of every run and the summary of docs/benchmarks.md §8."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def pareto_front(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """(memory, accuracy) points not dominated by a smaller-or-equal memory with higher accuracy."""
    front: list[tuple[float, float]] = []
    for mem, acc in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or acc > front[-1][1]:
            front.append((mem, acc))
    return front


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def pareto_plot(data: str, records: Sequence[dict[str, Any]], path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 6))
    se = [r for r in records if r["family"] == "SE"]
    if se:
        depth = np.array([r["config"]["D"] for r in se])
        mem = np.array([r["memory_bytes_mean"] for r in se]) / 1024
        acc = np.array([r["accuracy"] for r in se]) * 100
        rho = np.array([r["config"]["rho"] is not None for r in se])
        for (D, marker), color in zip(
            zip((2, 4, 8), ("o", "s", "^"), strict=True), ("C0", "C1", "C2"), strict=True
        ):
            for use_rho in (False, True):
                sel = (depth == D) & (rho == use_rho)
                if sel.any():
                    ax.scatter(
                        mem[sel], acc[sel], s=22, alpha=0.6, marker=marker,
                        facecolors="none" if use_rho else color, edgecolors=color,
                        label=f"SE depth {D}, " + ("ρ = 0.5 rule" if use_rho else "α = 1/(m+1)"),
                    )  # fmt: skip
        front = pareto_front(zip(mem.tolist(), acc.tolist(), strict=True))
        ax.plot(*zip(*front, strict=True), "-", color="C3", lw=2, label="SE Pareto front (array bytes)")
        heap = np.array([r["python_heap_bytes_final"] for r in se]) / 1024
        hfront = pareto_front(zip(heap.tolist(), acc.tolist(), strict=True))
        ax.plot(
            *zip(*hfront, strict=True),
            "--",
            color="C3",
            lw=1.2,
            label="SE front (Python heap, river's walker)",
        )
    for i, r in enumerate(x for x in records if x["family"] == "river"):
        ax.scatter(
            r["python_heap_bytes_mean"] / 1024, r["accuracy"] * 100, s=90, marker="*",
            color=f"C{4 + i}", label=r["method"], zorder=5,
        )  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("memory (KiB, mean over the stream; log scale)")
    ax.set_ylabel("test-then-train accuracy (%)")
    ax.set_title(f"{data}: accuracy vs memory (SE grid at k = 100, river peers)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def recompute_plot(data: str, records: Sequence[dict[str, Any]], path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 6))
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["family"] not in ("SE", "SE-k1", "latest-shrub") or not {"triggers", "k1"} & set(r["parts"]):
            continue
        c = r["config"]
        key = f"{r['family'].removesuffix('-k1')} M={c['M']} D={c['D']} B={c['B']}"
        groups.setdefault(key, []).append(r)
    for i, (key, rs) in enumerate(sorted(groups.items())):
        periodic = sorted(
            (r for r in rs if r["config"]["trigger"].startswith("k=")), key=lambda r: r["recomputes"]
        )
        color = f"C{i}"
        style = "-" if key.startswith("SE") else ":"
        if periodic:
            ax.plot(
                [r["recomputes"] for r in periodic], [r["accuracy"] * 100 for r in periodic], style,
                marker="o", color=color, label=f"{key}, every k labels",
            )  # fmt: skip
        for r in rs:
            trig = r["config"]["trigger"]
            if trig.startswith("adwin"):
                ax.scatter(r["recomputes"], r["accuracy"] * 100, marker="D", s=50, color=color)
                ax.annotate(trig, (r["recomputes"], r["accuracy"] * 100), fontsize=7, color=color)
            elif trig == "never":
                ax.scatter(r["recomputes"], r["accuracy"] * 100, marker="x", s=60, color=color)
                ax.annotate("static shrub", (r["recomputes"], r["accuracy"] * 100), fontsize=7, color=color)
    for j, r in enumerate(x for x in records if x["family"] == "river"):
        ax.axhline(
            r["accuracy"] * 100, ls="--", lw=1, color=f"C{6 + j}", label=f"{r['method']} (0 recomputes)"
        )
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(-0.3, 2.0 * max([r["recomputes"] for r in records] + [1]))
    ax.set_xlabel("cloud shrub trainings = recomputes (symmetric log scale); diamonds: ADWIN trigger")
    ax.set_ylabel("test-then-train accuracy (%)")
    ax.set_title(f"{data}: accuracy vs recomputes")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(records: Sequence[dict[str, Any]]) -> str:
    rows = ["| method | accuracy | recomputes | memory KiB (arrays / py-heap) | trees | µs/label edge |"]
    rows.append("|---|---:|---:|---:|---:|---:|")
    for r in sorted(records, key=lambda r: (r["family"], -r["accuracy"])):
        if r["family"] == "river":
            mem = f"– / {r['python_heap_bytes_mean'] / 1024:.1f}"
        else:
            mem = f"{r['memory_bytes_mean'] / 1024:.1f} / {r['python_heap_bytes_final'] / 1024:.1f}"
        trees = f"{r['n_trees_mean']:.1f}" if "n_trees_mean" in r else "–"
        rows.append(
            f"| {r['method']} | {100 * r['accuracy']:.2f} | {r['recomputes']} | {mem} | {trees} "
            f"| {r['us_per_label_edge']:.0f} |"
        )
    return "\n".join(rows)


def summary(data: str, records: Sequence[dict[str, Any]], triggers: Sequence[str]) -> str:
    """Docs-ready tables: the SE Pareto front (grid), the best SE within memory budgets against the river
    peers, and accuracy against recomputes for the default configuration."""
    grid = [r for r in records if r["family"] == "SE" and {"grid", "grid-rho"} & set(r["parts"])]
    river = sorted((r for r in records if r["family"] == "river"), key=lambda r: r["python_heap_bytes_mean"])
    lines = [
        f"### {data}: SE Pareto front (grid, k = 100)",
        "",
        "| KiB arrays | KiB py-heap | accuracy | config |",
    ]
    lines.append("|---:|---:|---:|---|")
    by_point = {(r["memory_bytes_mean"] / 1024, 100 * r["accuracy"]): r for r in grid}
    for mem, acc in pareto_front(by_point):
        r = by_point[(mem, acc)]
        lines.append(f"| {mem:.1f} | {r['python_heap_bytes_final'] / 1024:.1f} | {acc:.2f} | {r['method']} |")
    lines += ["", f"### {data}: river peers and the best SE within their memory", ""]
    lines.append("| peer | accuracy | KiB py-heap | µs/label | best SE with py-heap ≤ peer's | SE accuracy |")
    lines.append("|---|---:|---:|---:|---|---:|")
    for p in river:
        budget = p["python_heap_bytes_mean"]
        fit = [r for r in grid if r["python_heap_bytes_final"] <= budget]
        best = max(fit, key=lambda r: r["accuracy"], default=None)
        se_txt = (
            "–" if best is None else f"{best['method']} ({best['python_heap_bytes_final'] / 1024:.1f} KiB)"
        )
        se_acc = "–" if best is None else f"{100 * best['accuracy']:.2f}"
        lines.append(
            f"| {p['method']} | {100 * p['accuracy']:.2f} | {budget / 1024:.1f} | "
            f"{p['us_per_label_edge']:.0f} | {se_txt} | {se_acc} |"
        )
    lines += ["", f"### {data}: accuracy vs recomputes", ""]
    lines.append(
        "| configuration | trigger | recomputes | accuracy | KiB arrays | µs/label edge | µs/label cloud |"
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|")
    trig = [r for r in records if {"triggers", "k1"} & set(r["parts"])]
    order = {t: i for i, t in enumerate(("k=1", *triggers, "never"))}

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        c = r["config"]
        return (r["family"].removesuffix("-k1"), c["M"], c["D"], c["B"], order.get(c["trigger"], 99))

    for r in sorted(trig, key=key):
        c = r["config"]
        lines.append(
            f"| {r['family']} M={c['M']} D={c['D']} B={c['B']} | {c['trigger']} | {r['recomputes']} | "
            f"{100 * r['accuracy']:.2f} | {r['memory_bytes_mean'] / 1024:.1f} | "
            f"{r['us_per_label_edge']:.0f} | {r['us_per_label_training']:.0f} |"
        )
    return "\n".join(lines)


def paper_table(records: Sequence[dict[str, Any]]) -> str:
    """The ``paper`` part's table: accuracy, the model's memory by river's walker (mean over the stream;
    for SE also its array bytes), and µs per sample on the edge and in the (in-process) cloud."""
    rows = [
        "| method | accuracy % | KiB py-heap (mean) | KiB arrays | recomputes "
        "| µs/sample edge | µs/sample cloud |"
    ]
    rows.append("|---|---:|---:|---:|---:|---:|---:|")
    for r in records:
        arrays = f"{r['memory_bytes_mean'] / 1024:.1f}" if "memory_bytes_mean" in r else "–"
        cloud = f"{r['us_per_label_training']:.0f}" if "us_per_label_training" in r else "–"
        rows.append(
            f"| {r['method']} | {100 * r['accuracy']:.2f} | {r['python_heap_bytes_mean'] / 1024:.1f} "
            f"| {arrays} | {r['recomputes']} | {r['us_per_label_edge']:.0f} | {cloud} |"
        )
    return "\n".join(rows)

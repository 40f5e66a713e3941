"""In-process retrain time: liblinear-official's own dense path against EdgeDrift's vectorised builder.

Trains on the same 2000x6 ELEC2 window (``elec2-6``, labels ±1) with both and checks the weights are
bit-identical. Also reports the problem-building share and the solver time alone.

    python bench/liblinear_speed.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import numpy as np
from liblinear.liblinearutil import train

from edgedrift.data import load_dataset
from edgedrift.training.liblinear_fast import build_problem, solve


def per_call(fn: Callable[[], object], repeat: int) -> float:
    """Best-of-3 mean seconds per call."""
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - t) / repeat)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, help="calls per timing (default 200; quick 10)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 10 calls per timing")
    args = parser.parse_args()
    args.repeat = args.repeat or (10 if args.quick else 200)
    stream = load_dataset("elec2-6")
    X, y = stream.X[:2000], stream.y[:2000]
    print("| solver | C | binding ms | EdgeDrift ms | speed-up | of which building ms | bit-identical |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for s, C in ((0, 100.0), (0, 10_000.0), (2, 100.0)):
        options = f"-s {s} -c {C} -B 1 -q"
        model = train(y, X, options)
        w, b = model.get_decfun()
        reference = np.array([*w, b])
        ours = solve(X, y, s, C)
        t_binding = per_call(partial(train, y, X, options), max(1, args.repeat // 20))
        t_ours = per_call(partial(solve, X, y, s, C), args.repeat)
        t_build = per_call(lambda: build_problem(X, y, 1.0), args.repeat)
        print(
            f"| -s {s} | {C:g} | {1e3 * t_binding:.2f} | {1e3 * t_ours:.3f} | {t_binding / t_ours:.0f}x | "
            f"{1e3 * t_build:.3f} | {np.array_equal(ours, reference)} |"
        )


if __name__ == "__main__":
    main()

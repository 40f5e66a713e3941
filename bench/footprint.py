"""Edge footprint: resident memory of the edge's learning state, against another checkout of the code.

Each code version runs in a fresh child process that loads only what an edge process loads (the core
and the agent's modules, no training stack) and reports VmRSS:

* ``rss_ready_mb``: the agent's modules imported and one device's ``druid`` loop built on its first model;
* ``rss_<N>_mb``: with ``--devices`` such loops (d = 5, ELEC2 read from a different offset per device, every
  10th sample labeled, the DRUiD protocol) after N samples in total, fed one sample at a time round-robin.

``--sessions`` measures a gateway's per-device sessions instead (``DeviceSession``, as the gateway's
worker holds them: loop, warm-up, the recent samples (ids for deduplication, rows of the unlabeled ones
for late labels; a checkout from before has a join buffer and a duplicate window instead), counters), fed
the same samples as single JSON messages, once with the former fixed buffers (50,000 entries per device;
50,000 / 100,000 in a checkout from before) and once sized from the label delay (the gateway's defaults,
``edgedrift.window.delay_buffer_size``; ``--label-delay-s`` / ``--device-rate`` change them); with
``--baseline`` both also for the other checkout. Each row also gives the mean time inside
``DeviceSession.handle`` per message (µs).

The first model is trained once in this process and handed to the children as a model document; a
recompute answers with it (the cloud's work is not the edge's footprint). ``--baseline DIR`` points at
another checkout (e.g. a git worktree of an older commit); its ``shared/`` and ``edge_agent/`` go first
on the child's path.

``--image NAME`` (repeatable) measures built edge images instead: the image's size over its base
(``python:3.11-slim``), and the VmRSS of its agent (PID 1 of the container, ``--network host``) when it
prints ``ready``, against our own Mosquitto and cloud trainer (SQLite) on this machine.

    python bench/footprint.py [--devices 1000] [--samples 3000000] [--baseline DIR] [--json PATH]
    python bench/footprint.py --image edgedrift-edge:local [--image OTHER] [--json PATH]
    python bench/footprint.py --quick    # smoke run: 20 devices, 60,000 samples
    python bench/footprint.py --sessions [--devices 1000] [--samples 3000000] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgedrift_harness.proc import rss_mb

LABEL_EVERY = 10
FIRST = 2000
#: Samples of a gateway session's first window (--sessions): 20 labels train its first model.
WARMUP = 200


def child(data_dir: Path, devices: int, checkpoints: list[int]) -> dict[str, Any]:
    """The measurement inside the child process: what an edge process holds, nothing else."""
    import edgedrift_edge.agent  # noqa: F401  (the agent's modules, as a running agent has them)
    from edgedrift.models.document import model_from_document
    from edgedrift.strategies import STRATEGIES, Context

    X = np.load(data_dir / "X.npy")
    y = np.load(data_dir / "y.npy")
    doc = json.loads((data_dir / "model.json").read_text())
    X0, y0 = X[:FIRST:LABEL_EVERY], y[:FIRST:LABEL_EVERY]
    model = model_from_document(doc)

    def build() -> Any:
        ctx = Context(X.shape[1], "classification", "logistic", len(y0), 1.0, lambda *_a, **_k: model, X0, y0)
        loop = STRATEGIES["druid"].build(ctx, 0.999)
        loop.start(model, X0, y0, warm_learner=True)
        return loop

    loops = [build()]
    gc.collect()
    out: dict[str, Any] = {"code": str(Path(sys.modules["edgedrift"].__file__ or "").parent.parent)}
    out["rss_ready_mb"] = rss_mb(os.getpid())
    out["scipy_loaded"] = "scipy" in sys.modules
    loops += [build() for _ in range(devices - 1)]
    n_stream = len(y) - FIRST
    offsets = [FIRST + (i * 7919) % n_stream for i in range(devices)]
    seen = [0] * devices
    done = 0
    chunk = 10
    for target in checkpoints:
        while done < target:
            for i, loop in enumerate(loops):
                for _ in range(chunk):
                    j = FIRST + (offsets[i] + seen[i] - FIRST) % n_stream
                    label = float(y[j]) if seen[i] % LABEL_EVERY == 0 else None
                    loop.process_one(X[j], label)
                    seen[i] += 1
                done += chunk
                if done >= target:
                    break
        gc.collect()
        out[f"rss_{target}_mb"] = rss_mb(os.getpid())
        out[f"recomputes_{target}"] = sum(lp.counters.recomputes for lp in loops)
    return out


def gateway_sessions(data_dir: Path, devices: int, values: dict[str, Any]) -> tuple[list[Any], Any, Any]:
    """``devices`` ``DeviceSession``s as a gateway's worker holds them (druid, d of the stream, ``WARMUP``
    samples of warm-up, the settings in ``values`` on top), each recompute answered with the first model
    from ``data_dir`` (the cloud's work is not the edge's), and the stream (X, y) they read."""
    from edgedrift.models.document import model_from_document
    from edgedrift_edge.agent import EdgeAgent  # noqa: F401  (the agent's modules, as a gateway has them)
    from edgedrift_edge.device import session_config
    from edgedrift_edge.session.device_session import DeviceSession
    from edgedrift_edge.session.trainer import RecomputeRequest, TrainedModel
    from edgedrift_edge.settings import AgentSettings

    X = np.load(data_dir / "X.npy")
    y = np.load(data_dir / "y.npy")
    doc = json.loads((data_dir / "model.json").read_text())
    model = model_from_document(doc)

    def trainer(request: RecomputeRequest) -> TrainedModel:
        return TrainedModel(request.request_id, 1, model, doc, 1.0, 0, 0)

    base = {"gateway_id": "gw-bench", "n_features": X.shape[1], "strategy": "druid", "warmup_samples": WARMUP}
    settings = AgentSettings.model_validate(base | values)
    config = [session_config(settings, f"dev-{i}") for i in range(devices)]
    return [DeviceSession(c, trainer, lambda: 0.0) for c in config], X, y


def child_sessions(
    data_dir: Path, devices: int, checkpoints: list[int], sizing: str, delay: str
) -> dict[str, Any]:
    """A gateway's sessions in the child: ``sizing`` "fixed" (the former 50k entries per device; 50k /
    100k in a checkout with a separate join buffer and duplicate window) or "sized" (the gateway's
    buffers from ``delay`` = "label_delay_s,device_rate_per_s")."""
    from edgedrift_edge.session.ledger import SessionConfig

    merged = "recent_samples" in SessionConfig.__dataclass_fields__  # one window (this tree) or two
    label_delay_s, rate = (float(v) for v in delay.split(","))
    values: dict[str, Any] = {"label_delay_s": label_delay_s, "device_rate_per_s": rate}
    if sizing == "fixed":
        values = {"recent_samples": 50_000} if merged else {"join_buffer": 50_000, "dedup_window": 100_000}
    sessions, X, y = gateway_sessions(data_dir, devices, values)
    gc.collect()
    config = sessions[0].config
    buffers = f"{config.recent_samples:,}" if merged else f"{config.join_buffer:,} / {config.dedup_window:,}"
    out: dict[str, Any] = {"sizing": sizing, "buffers": buffers}
    out["code"] = str(Path(sys.modules["edgedrift_edge"].__file__ or "").parent.parent)
    out["rss_ready_mb"] = rss_mb(os.getpid())
    n_stream = len(y) - FIRST
    offsets = [FIRST + (i * 7919) % n_stream for i in range(devices)]
    seen = [0] * devices
    done = 0
    chunk = 10
    handling = 0.0  # seconds inside DeviceSession.handle
    for target in checkpoints:
        while done < target:
            for i, session in enumerate(sessions):
                for _ in range(chunk):
                    j = FIRST + (offsets[i] + seen[i] - FIRST) % n_stream
                    body: dict[str, Any] = {"id": seen[i], "x": X[j].tolist()}
                    if seen[i] % LABEL_EVERY == 0:
                        body["y"] = float(y[j])
                    payload = json.dumps(body).encode()
                    start = time.perf_counter()
                    session.handle("samples", payload)
                    handling += time.perf_counter() - start
                    seen[i] += 1
                done += chunk
                if done >= target:
                    break
        gc.collect()
        out[f"rss_{target}_mb"] = rss_mb(os.getpid())
        out[f"recomputes_{target}"] = sum(s.counters.recomputes_requested for s in sessions)
        if merged:
            out[f"entries_{target}"] = sum(len(s.recent_samples) for s in sessions)
        else:
            out[f"entries_{target}"] = sum(len(s.joins) + len(s.recent_ids) for s in sessions)
    out["handle_us"] = handling / done * 1e6
    return out


def run_child(
    data_dir: Path, devices: int, checkpoints: list[int], baseline: Path | None, sessions: str | None = None
) -> dict[str, Any]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    if baseline is not None:
        paths = [str(baseline / "shared"), str(baseline / "edge_agent")]
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    cmd = [sys.executable, __file__, "--child", str(data_dir), "--devices", str(devices)]
    cmd += ["--checkpoints", ",".join(map(str, checkpoints))]
    if sessions is not None:
        cmd += ["--child-sessions", sessions]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def image_mb(image: str) -> float:
    done = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Size}}", image], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip()) / 1e6


def container_row(image: str, workdir: Path) -> dict[str, Any]:
    """One fresh device's agent in a container of ``image``: image sizes and VmRSS at ``ready``."""
    import secrets

    from edgedrift_harness.agent import AgentProcess
    from edgedrift_harness.cloud import CloudProcess
    from edgedrift_harness.mosquitto import local_mosquitto

    workdir.mkdir(parents=True, exist_ok=True)
    broker = local_mosquitto(workdir / "broker", persistence=False).start()
    cloud = CloudProcess(
        f"sqlite:///{workdir / 'registry.db'}", workdir, operator_token=secrets.token_hex(16)
    )
    name = f"edgedrift-footprint-{secrets.token_hex(4)}"
    try:
        cloud.start(timeout=240)
        device, secret = f"fp-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
        cloud.register(device, secret)
        settings = {"device_id": device, "device_secret": secret, "broker_url": broker.url}
        settings |= {"cloud_url": cloud.url, "strategy": "druid"}
        env_names = [f"EDGEDRIFT_EDGE_{k.upper()}" for k in settings]
        command = ["docker", "run", "--rm", "--network", "host", "--name", name]
        command += [a for n in env_names for a in ("-e", n)] + [image, "run"]
        agent = AgentProcess(workdir / f"{name}.log", settings, command=command)
        agent.start(timeout=120)
        seconds = agent.t_ready - agent.t_spawn
        status = subprocess.run(
            ["docker", "exec", name, "cat", "/proc/1/status"], capture_output=True, text=True, check=True
        ).stdout
        rss = next(int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
        base = image_mb("python:3.11-slim")
        size = image_mb(image)
        return {
            "image": image,
            "image_mb": size,
            "base_mb": base,
            "added_mb": size - base,
            "rss_ready_mb": rss,
            "seconds_to_ready": seconds,
        }
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        cloud.stop()
        broker.stop()


def prepare(data_dir: Path) -> None:
    """ELEC2 and the first model (trained here, with the training stack the children do not load)."""
    from edgedrift.data import load_elec2
    from edgedrift.training.linear import LinearTrainer

    stream = load_elec2()
    X, y = stream.X, stream.y
    model = LinearTrainer("logistic", 1.0)(X[:FIRST:LABEL_EVERY], y[:FIRST:LABEL_EVERY])
    assert model is not None
    np.save(data_dir / "X.npy", X)
    np.save(data_dir / "y.npy", y)
    (data_dir / "model.json").write_text(json.dumps(model.to_document()))


def sessions_table(
    devices: int, checkpoints: list[int], delay: str, json_path: Path | None, baseline: Path | None
) -> None:
    """--sessions: the same gateway sessions with the former fixed buffers and with sized ones (and the
    fixed ones of ``baseline``, another checkout, first)."""
    rows: list[dict[str, Any]] = []
    runs: list[tuple[str, Path | None, str]] = [("this tree", None, "fixed"), ("this tree", None, "sized")]
    if baseline is not None:
        runs[:0] = [("baseline", baseline, "fixed"), ("baseline", baseline, "sized")]
    with tempfile.TemporaryDirectory() as tmp:
        prepare(Path(tmp))
        for version, code, sizing in runs:
            row = run_child(Path(tmp), devices, checkpoints, code, f"{sizing}:{delay}")
            rows.append({"version": version, "devices": devices, **row})
    first, last = checkpoints
    print(
        f"| code | buffers per device | devices | RSS ready MB | RSS {first:,} MB | RSS {last:,} MB | growth "
        f"| ids held at {last:,} | µs per message |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        growth = r[f"rss_{last}_mb"] / r[f"rss_{first}_mb"] - 1.0
        entries = r[f"entries_{last}"]
        print(
            f"| {r['version']} | {r['sizing']} ({r['buffers']}) "
            f"| {r['devices']} | {r['rss_ready_mb']:.1f} | {r[f'rss_{first}_mb']:.1f} "
            f"| {r[f'rss_{last}_mb']:.1f} | {growth:+.1%} | {entries:,} | {r['handle_us']:.1f} |"
        )
    if json_path is not None:
        json_path.write_text(json.dumps({"sessions": rows}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, help="device loops in one process (default 1,000)")
    parser.add_argument("--samples", type=int, help="total samples (default 3,000,000)")
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 devices, 60,000 samples")
    parser.add_argument("--image", action="append", default=[], help="measure this built edge image")
    parser.add_argument(
        "--sessions", action="store_true", help="measure a gateway's sessions: fixed buffers, then sized ones"
    )
    parser.add_argument(
        "--label-delay-s", type=float, default=60.0, help="--sessions: the longest label delay"
    )
    parser.add_argument("--device-rate", type=float, default=10.0, help="--sessions: samples/s per device")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoints", help=argparse.SUPPRESS)
    parser.add_argument("--child-sessions", help=argparse.SUPPRESS)
    args = parser.parse_args()
    devices = args.devices or (20 if args.quick else 1000)
    if args.child is not None:
        checkpoints = [int(c) for c in args.checkpoints.split(",")]
        if args.child_sessions is not None:
            sizing, delay = args.child_sessions.split(":")
            print(json.dumps(child_sessions(args.child, devices, checkpoints, sizing, delay)))
        else:
            print(json.dumps(child(args.child, devices, checkpoints)))
        return
    if args.image:
        with tempfile.TemporaryDirectory() as tmp:
            images = [container_row(image, Path(tmp) / str(i)) for i, image in enumerate(args.image)]
        print("| image | size MB | base MB | added MB | agent VmRSS at ready MB | s to ready |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in images:
            print(
                f"| {r['image']} | {r['image_mb']:.0f} | {r['base_mb']:.0f} | {r['added_mb']:.0f} "
                f"| {r['rss_ready_mb']:.1f} | {r['seconds_to_ready']:.1f} |"
            )
        if args.json is not None:
            args.json.write_text(json.dumps({"images": images}, indent=2))
        return
    total = args.samples or (60_000 if args.quick else 3_000_000)
    checkpoints = [total // 3, total]
    if args.sessions:
        delay = f"{args.label_delay_s},{args.device_rate}"
        sessions_table(devices, checkpoints, delay, args.json, args.baseline)
        return
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        prepare(Path(tmp))
        for label, base in (("this tree", None), ("baseline", args.baseline)):
            if label == "baseline" and base is None:
                continue
            row = {"version": label, "devices": devices, **run_child(Path(tmp), devices, checkpoints, base)}
            rows.append(row)
    first, last = checkpoints
    print(f"| code | devices | RSS ready MB | RSS {first:,} MB | RSS {last:,} MB | growth | scipy loaded |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        growth = r[f"rss_{last}_mb"] / r[f"rss_{first}_mb"] - 1.0
        print(
            f"| {r['version']} | {r['devices']} | {r['rss_ready_mb']:.1f} | {r[f'rss_{first}_mb']:.1f} "
            f"| {r[f'rss_{last}_mb']:.1f} | {growth:+.1%} | {r['scipy_loaded']} |"
        )
    if len(rows) == 2:
        print(f"ratio ready (this / baseline): {rows[0]['rss_ready_mb'] / rows[1]['rss_ready_mb']:.2f}x")
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": rows}, indent=2))


if __name__ == "__main__":
    main()

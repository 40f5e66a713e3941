"""The command line of ``bench/mqtt_ingest.py``: options, the run in order, the report."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from edgedrift_harness.proc import py_spy_command
from edgedrift_harness.results import write_json
from ingest.data import Data
from ingest.gateway import GatewayRow, describe_row, gateway_row
from ingest.lab import Config, IngestLab
from ingest.phases import Memory, Result, agent_phases, run_memory
from ingest.report import report
from ingest.sink import Sink
from ingest.startup import Startup, import_seconds, run_startup

#: (option, full run, --quick) for the options whose default depends on --quick.
SIZES = (
    ("samples", 200_000, 10_000),
    ("memory_samples", 1_000_000, 50_000),
    ("startup_runs", 5, 1),
    ("gateway_devices", "1,1000", "1,10"),
    ("gateway_rss", "1000000,3000000", "40000,60000"),
)


@contextlib.contextmanager
def workspace(keep: bool) -> Iterator[Path]:
    """A temporary work directory (logs, state), removed afterwards unless ``keep``."""
    path = Path(tempfile.mkdtemp(prefix="edgedrift-mqtt-bench-"))
    try:
        yield path
    finally:
        if keep:
            print(f"(logs and state kept in {path})")
        else:
            shutil.rmtree(path, ignore_errors=True)


def parse_args(description: str) -> tuple[Config, bool]:
    """The run's configuration from the command line, and whether to keep the work directory."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, help="samples per timed phase (default 200,000)")
    parser.add_argument(
        "--memory-samples", type=int, help="samples of the memory run (default 1,000,000; 0: skip)"
    )
    parser.add_argument(
        "--window",
        type=int,
        default=5_000,
        help="single-sample messages outstanding at most (closed loop; the agent's queue holds 20,000)",
    )
    parser.add_argument("--batch-window", type=int, default=200, help="batch messages outstanding at most")
    parser.add_argument("--d", type=int, default=5, help="features per sample")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--startup-runs", type=int, help="agent spawns for the startup figure (default 5; 0: skip)"
    )
    parser.add_argument(
        "--qos", default="1,0", help="QoS levels of the throughput phases (comma-separated; none: skip them)"
    )
    parser.add_argument("--no-exact", action="store_true", help="skip the batch_mode=exact agent")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 10k samples, 50k memory run, 1 spawn"
    )
    parser.add_argument(
        "--agent-pythonpath",
        default="",
        help="experiment: put DIR first on the agent's PYTHONPATH (e.g. a copy of edgedrift_edge from git "
        "HEAD, for a before/after of an agent change on the same machine state)",
    )
    parser.add_argument(
        "--agent-python",
        default="",
        help="the interpreter of the agents and gateways (default: this one), e.g. the python of a venv "
        "holding only ./shared and ./edge_agent, as a gateway host has",
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=0.0,
        help="experiment: the agents' and gateways' switch_interval_s setting (sys.setswitchinterval; "
        "default 0.005 s)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    parser.add_argument(
        "--json", type=Path, help='gateway rows (one per --gateway-devices) into PATH as {"runs": [...]}'
    )
    parser.add_argument(
        "--gateway-devices", help="devices of each gateway row (default 1,1000; --quick 1,10; none: skip)"
    )
    parser.add_argument(
        "--gateway-processes",
        type=int,
        default=1,
        help="gateway processes sharing each row's devices (default 1; e.g. one per core)",
    )
    parser.add_argument(
        "--gateway-rss",
        help="samples after which a gateway row reads its RSS (default 1000000,3000000)",
    )
    parser.add_argument(
        "--gateway-modes",
        default="exact",
        help="the gateway rows' batch_mode values, comma-separated: exact (per-sample semantics, the "
        "default) and/or vectorised (the opt-in mini-batch path), one row per devices and mode",
    )
    parser.add_argument(
        "--profile", type=Path, help="py-spy the agent during its phases, raw stacks into DIR"
    )
    parser.add_argument(
        "--py-spy", default=py_spy_command("record --rate 250"), help="the py-spy record command"
    )
    args = parser.parse_args()
    for name, full, quick in SIZES:
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.samples % 100:
        parser.error("--samples must be a multiple of 100")
    cfg = Config(
        args.samples, args.memory_samples, args.window, args.batch_window, args.d, args.seed,
        args.startup_runs, not (args.no_exact or args.quick), args.profile, shlex.split(args.py_spy),
        [int(q) for q in args.qos.split(",") if q.strip() not in ("", "none")],
        args.agent_pythonpath, args.switch_interval,
        [int(n) for n in args.gateway_devices.split(",") if n.strip() not in ("", "none")],
        tuple(int(n) for n in args.gateway_rss.split(",")), args.json,
        tuple(m.strip() for m in args.gateway_modes.split(",") if m.strip()), args.gateway_processes,
        args.agent_python,
    )  # fmt: skip
    if unknown := set(cfg.gateway_modes) - {"exact", "vectorised"}:
        parser.error(f"--gateway-modes: unknown mode(s) {', '.join(sorted(unknown))}")
    return cfg, bool(args.keep)


def main(description: str) -> int:
    """Run every phase the options ask for, then print the report."""
    cfg, keep = parse_args(description)
    if cfg.profile is not None:
        cfg.profile.mkdir(parents=True, exist_ok=True)
    phases = len(cfg.qos) * 2 * 3 + (1 if cfg.exact else 0)
    data = Data(phases * cfg.samples + (len(cfg.qos) + 3) * 2500 + cfg.memory_samples, cfg.d, cfg.seed)
    results: list[Result] = []
    warmups: list[tuple[int, str, float]] = []
    memory: Memory | None = None
    startup: list[Startup] = []
    imports = None
    rows: list[GatewayRow] = []
    with workspace(keep) as workdir:
        lab = IngestLab(workdir, cfg)
        peers: dict[int, Sink] = {}
        try:
            for qos in cfg.qos:
                peers[qos] = Sink(workdir, lab.broker.url, f"bench/peer-q{qos}/samples", qos, "samples")
                print(f"QoS {qos}: publisher alone, peer, agent (vectorised)", flush=True)
                agent_phases(cfg, lab, data, qos, peers[qos], results, warmups)
            if cfg.exact and 1 in cfg.qos:
                print("QoS 1: agent with batch_mode=exact", flush=True)
                agent_phases(cfg, lab, data, 1, peers[1], results, warmups, "exact", ("batch",))
            if cfg.memory_samples:
                print(f"memory: {cfg.memory_samples:,} samples", flush=True)
                memory = run_memory(cfg, lab, data)
            if cfg.startup_runs:
                print(f"startup: {cfg.startup_runs} spawns", flush=True)
                startup = run_startup(lab, cfg.startup_runs, cfg.d)
                imports = import_seconds(3)
            if cfg.json is not None and cfg.gateway_devices:
                if 1 not in peers:
                    peers[1] = Sink(workdir, lab.broker.url, "bench/peer-q1/samples", 1, "samples")
                for n, mode in [(n, m) for n in cfg.gateway_devices for m in cfg.gateway_modes]:
                    print(
                        f"gateway with {n} devices (QoS 1, batch_mode={mode}, "
                        f"{cfg.gateway_processes} processes)",
                        flush=True,
                    )
                    rows.append(
                        gateway_row(cfg, lab, peers[1], n, cfg.gateway_rss, mode, cfg.gateway_processes)
                    )
                    print(describe_row(rows[-1]), flush=True)
        finally:
            for sink in peers.values():
                sink.stop()
            lab.close()
        report(cfg, results, warmups, memory, startup, imports)
    if cfg.json is not None:
        write_json(cfg.json, {"runs": [r.as_json() for r in rows]}, indent=1)
        print(f"wrote {cfg.json}")
    return 0

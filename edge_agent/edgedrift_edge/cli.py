"""``edgedrift-edge``: run the ``agent`` for one device, or ``replay`` a data set to devices over MQTT.
The same commands are ``edgedrift agent`` and ``edgedrift replay``.

    edgedrift-edge agent --device-id gw-1 --device-secret S --broker-url mqtt://127.0.0.1:1883 \\
        --cloud-url http://127.0.0.1:8000 --strategy druid
    edgedrift-edge replay --dataset elec2 --devices gw-1,gw-2 --rate 500 --label-every 10

Every ``agent`` flag is also an environment variable ``EDGEDRIFT_EDGE_<FLAG>`` (flags win); ``run`` is
an alias of ``agent``. The commands run BLAS and OpenMP on one thread unless OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS or MKL_NUM_THREADS says otherwise (``edgedrift-edge threads`` shows what holds).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, get_args

from pydantic import SecretStr
from pydantic_core import PydanticUndefined

from edgedrift.cli import Formatter, Parser, add_version, run_command
from edgedrift.ids import device_id_problem, shown_id, topic_prefix_problem
from edgedrift.secrets import secrets_from_files
from edgedrift_edge.settings import ENV_PREFIX, SECRET_FIELDS, AgentSettings, SettingsError
from edgedrift_edge.transport.mqtt import with_password

#: The thread-count variables of the BLAS and OpenMP runtimes numpy may load.
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def default_one_blas_thread(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set each BLAS/OpenMP thread variable the user left unset (or empty) to 1; returns those set.

    Must run before numpy is imported (the runtimes read them once, when loaded): the edge loop makes
    small sequential dot products (d = 5), and one BLAS thread per core on a weak, shared CPU only adds
    threads and contention. A value the user set is kept.
    """
    environ = os.environ if environ is None else environ
    unset = [name for name in BLAS_THREAD_VARS if not environ.get(name)]
    for name in unset:
        environ[name] = "1"
    return unset


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


#: The ``agent --help`` sections, each setting in one; the rare knobs (buffers, timeouts, retries, the
#: interpreter) are "advanced", so the first screen shows what a deployment sets.
RUN_GROUPS: dict[str, tuple[str, ...]] = {
    "device": ("device_id", "device_secret", "mode"),
    "gateway (several devices over one connection)": (
        "gateway_id",
        "gateway_secret",
        "devices",
        "devices_file",
        "gateway_sync_s",
        "label_delay_s",
        "device_rate_per_s",
        "silent_after_s",
        "device_share",
        "broker_sessions",
        "broker_inflight",
    ),
    "broker and cloud": (
        "broker_url",
        "broker_password",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file",
        "mqtt_version",
        "message_expiry_s",
        "topic_prefix",
        "qos",
        "cloud_url",
    ),
    "learning": (
        "strategy",
        "strategy_param",
        "task",
        "classes",
        "n_features",
        "warmup_samples",
        "window_labels",
        "C",
        "recompute_mode",
    ),
    "state and monitoring": (
        "checkpoint_dir",
        "checkpoint_every_s",
        "heartbeat_every_s",
        "accuracy_window",
        "log_level",
        "metrics_port",
        "metrics_addr",
        "metrics_device_labels",
    ),
    "advanced (buffers, limits, timeouts, retries, the interpreter)": (
        "batch_mode",
        "window_encoding",
        "queue_size",
        "max_inbox_mb",
        "publish_queue",
        "max_items_per_message",
        "recent_samples",
        "recent_samples_mb",
        "outlier_threshold",
        "http_timeout_s",
        "http_deadline_s",
        "retry_base_s",
        "retry_max_s",
        "unauthorized_retry_s",
        "retry_cooldown_s",
        "seq_grace_s",
        "sync_wait_s",
        "history_batch",
        "history_outbox",
        "watchdog_s",
        "keepalive_s",
        "session_expiry_s",
        "switch_interval_s",
        "gc_threshold",
    ),
}


#: The agent's usage line: its flags are listed by section below it, not all in one line.
RUN_USAGE = "%(prog)s [--device-id ID | --gateway-id ID ...] [options]"


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per AgentSettings field, in the sections of :data:`RUN_GROUPS`, with its help text,
    default and choices (strings: pydantic validates and converts)."""
    fields = AgentSettings.model_fields
    for title, names in RUN_GROUPS.items():
        group = parser.add_argument_group(title)
        for name in names:
            _add_setting(group, name)
    missing = set(fields) - {name for names in RUN_GROUPS.values() for name in names}
    if missing:
        raise RuntimeError(f"settings without a --help section (RUN_GROUPS): {sorted(missing)}")


def _add_setting(group: argparse._ArgumentGroup, name: str) -> None:
    """The flag of one AgentSettings field."""
    info = AgentSettings.model_fields[name]
    literal = "Literal" in str(info.annotation)
    choices = [a for a in get_args(info.annotation) if isinstance(a, str)] if literal else None
    default = info.default if info.default is not PydanticUndefined else None
    if isinstance(default, SecretStr):
        default = None
    shown = "required" if info.is_required() else f"default: {default}"
    env = f"{ENV_PREFIX}{name.upper()}"
    if name in SECRET_FIELDS:
        env += f" or {env}_FILE"
    group.add_argument(
        _flag(name),
        dest=name,
        default=None,
        metavar=None if choices else name.upper(),
        help=f"{info.description} ({shown}; env {env})",
        choices=choices or None,
    )


def tune_interpreter(settings: AgentSettings) -> None:
    """The agent process's thread switch interval and its cyclic collector's youngest generation
    (``switch_interval_s``, ``gc_threshold``; the older generations keep Python's thresholds)."""
    sys.setswitchinterval(settings.switch_interval_s)
    gc.set_threshold(settings.gc_threshold, *gc.get_threshold()[1:])


def run(args: argparse.Namespace) -> int:
    """Run the agent until SIGTERM/SIGINT (exit 0) or until it cannot work any more (exit 1)."""
    default_one_blas_thread()
    from edgedrift import kernels
    from edgedrift_edge.agent import EdgeAgent

    overrides = {name: getattr(args, name) for name in AgentSettings.model_fields}
    try:
        settings = AgentSettings.load(overrides)
    except SettingsError as exc:
        problems = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"edgedrift-edge agent: error: invalid settings: {problems}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tune_interpreter(settings)
    try:
        agent = EdgeAgent(settings)
    except SettingsError as exc:
        print(f"edgedrift-edge agent: error: invalid settings: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def _stop(signum: int, _frame: Any) -> None:
        logging.getLogger("edgedrift_edge").info("signal %d: stopping (finish, checkpoint, offline)", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        agent.start()
    except Exception as exc:  # the broker or the cloud (a gateway's device list) refused or did not answer
        print(f"edgedrift-edge agent: error: cannot start: {type(exc).__name__}: {exc}", file=sys.stderr)
        agent.stop()
        return 1
    who = (
        f"gateway {settings.gateway_id}, {len(agent.devices)} devices"
        if settings.gateway_id
        else (f"device {settings.device_id}")
    )
    logging.getLogger("edgedrift_edge").info("ready: %s (kernels: %s)", who, kernels.path())
    print(f"edgedrift-edge: ready, {who} (kernels: {kernels.path()})", flush=True)
    while not stop.wait(0.5):
        if agent.finished.is_set():
            print(f"edgedrift-edge: stopped: {agent.fatal}", file=sys.stderr, flush=True)
            return 1
    agent.stop()
    if agent.fatal:
        print(f"edgedrift-edge: stopped: {agent.fatal}", file=sys.stderr, flush=True)
        return 1
    return 0


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", required=True, help="elec2, csv:PATH (with --target), sine1+:d=10, ...")
    parser.add_argument("--target", help="label column of a CSV data set")
    parser.add_argument("--seed", type=int, default=0, help="seed of a generated stream")
    parser.add_argument("--devices", required=True, help="comma-separated device ids (each gets the stream)")
    parser.add_argument(
        "--broker-url",
        default="mqtt://127.0.0.1:1883",
        help="mqtt://[user@]host:port (default: %(default)s); the password better comes from "
        "--broker-password-file or EDGEDRIFT_REPLAY_BROKER_PASSWORD(_FILE)",
    )
    parser.add_argument(
        "--broker-password-file", help="file holding the broker password (one line), so it is not on argv"
    )
    parser.add_argument("--topic-prefix", default="edgedrift", help="MQTT topic prefix")
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="messages per second to each device, a message carrying --batch-size samples "
        "(0: as fast as possible)",
    )
    parser.add_argument("--batch-size", type=int, default=1, help="samples per message (1: single messages)")
    parser.add_argument("--label-every", type=int, default=10, help="label every k-th sample")
    parser.add_argument(
        "--label-fraction", type=float, help="label a random fraction instead (seeded by offset)"
    )
    parser.add_argument(
        "--label-offset", type=int, default=0, help="which residue of --label-every is labeled"
    )
    parser.add_argument("--label-delay", type=int, default=0, help="labels arrive this many samples late")
    parser.add_argument("--qos", type=int, choices=[0, 1, 2], default=1, help="MQTT quality of service")
    parser.add_argument("--limit", type=int, help="publish only the first N samples")
    parser.add_argument("--no-progress", action="store_true", help="no progress report on stderr")


def replay_command(args: argparse.Namespace) -> int:
    default_one_blas_thread()
    from edgedrift.data import load_dataset
    from edgedrift.protocol import Protocol
    from edgedrift_edge.replay import ReplayPlan, replay

    if args.batch_size < 1 or args.label_every < 1 or args.label_delay < 0:
        print(
            "edgedrift-edge replay: --batch-size and --label-every must be >= 1, --label-delay >= 0",
            file=sys.stderr,
        )
        return 2
    devices = tuple(d.strip() for d in args.devices.split(",") if d.strip())
    problems = [topic_prefix_problem(args.topic_prefix)] + [
        f"{shown_id(d)}: {p}" for d in devices if (p := device_id_problem(d)) is not None
    ]
    if not devices or any(problems):
        why = "; ".join(p for p in problems if p) or "--devices names no device"
        print(f"edgedrift-edge replay: {why}", file=sys.stderr)
        return 2
    protocol = (
        Protocol(schedule="random", fraction=args.label_fraction, delay=args.label_delay)
        if args.label_fraction is not None
        else Protocol(every=args.label_every, delay=args.label_delay)
    )
    stream = load_dataset(args.dataset, target=args.target, seed=args.seed)
    plan = ReplayPlan(
        stream,
        devices,
        protocol,
        args.label_offset,
        args.batch_size,
        args.rate,
        args.qos,
        args.limit,
        args.topic_prefix,
    )
    n = replay(
        plan, replay_broker_url(args.broker_url, args.broker_password_file), progress=not args.no_progress
    )
    print(f"replayed {n} samples of {stream.name} to {len(devices)} device(s)")
    return 0


def threads_command(args: argparse.Namespace) -> int:
    """Print, as JSON, the thread variables the edge commands run with and, when threadpoolctl is
    installed, the thread count of each BLAS/OpenMP runtime numpy loaded (a check for operators)."""
    default_one_blas_thread()
    import importlib
    import json

    import numpy  # noqa: F401  (loads the BLAS runtime, which reads the variables now)

    report: dict[str, Any] = {"env": {name: os.environ.get(name) for name in BLAS_THREAD_VARS}}
    try:
        threadpoolctl = importlib.import_module("threadpoolctl")  # optional: not an edge dependency
    except ImportError:
        report["threadpools"] = None
    else:
        report["threadpools"] = [
            {"api": p.get("user_api"), "library": p.get("internal_api"), "num_threads": p.get("num_threads")}
            for p in threadpoolctl.threadpool_info()
        ]
    print(json.dumps(report))
    return 0


def replay_broker_url(url: str, password_file: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The replay's broker URL with a password from ``--broker-password-file``, or from
    ``EDGEDRIFT_REPLAY_BROKER_PASSWORD`` / ``EDGEDRIFT_REPLAY_BROKER_PASSWORD_FILE``, put into it."""
    environ = os.environ if environ is None else environ
    env = dict(environ)
    if password_file:
        env["EDGEDRIFT_REPLAY_BROKER_PASSWORD_FILE"] = password_file
    password = secrets_from_files(env, "EDGEDRIFT_REPLAY_", ["broker_password"]).get("broker_password")
    password = password or env.get("EDGEDRIFT_REPLAY_BROKER_PASSWORD") or None
    if password is None:
        return url
    return with_password(url, password)


def register_agent(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``edgedrift agent`` (entry-point group ``edgedrift.commands``)."""
    p = sub.add_parser(
        "agent",
        help="run the edge agent for one device",
        description=__doc__,
        usage=RUN_USAGE,
        formatter_class=Formatter,
    )
    add_run_arguments(p)
    p.set_defaults(func=run)


def register_replay(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``edgedrift replay``."""
    p = sub.add_parser("replay", help="publish a data set to devices over MQTT", formatter_class=Formatter)
    add_replay_arguments(p)
    p.set_defaults(func=replay_command)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="edgedrift-edge", description=__doc__, formatter_class=Formatter)
    add_version(parser, "edgedrift-edge")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "agent",
        aliases=["run"],
        help="run the agent for one device",
        usage=RUN_USAGE,
        formatter_class=Formatter,
    )
    add_run_arguments(p)
    p.set_defaults(func=run)
    p = sub.add_parser("replay", help="publish a data set to devices over MQTT", formatter_class=Formatter)
    add_replay_arguments(p)
    p.set_defaults(func=replay_command)
    p = sub.add_parser(
        "threads",
        help="print the BLAS/OpenMP thread settings the commands run with (JSON) and exit",
        formatter_class=Formatter,
    )
    p.set_defaults(func=threads_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(f"edgedrift-edge {args.command}", args)


if __name__ == "__main__":
    sys.exit(main())

"""``edgedrift-cloud``: serve the trainer with uvicorn, migrate the registry, register a device.

    edgedrift-cloud serve --host 0.0.0.0 --port 8000 --database-url postgresql://user@db/edgedrift --workers 2

Flags override the ``EDGEDRIFT_CLOUD_*`` environment (see ``cloud_trainer/.env.example``). Secrets
belong in the environment or in files (``EDGEDRIFT_CLOUD_OPERATOR_TOKEN_FILE``,
``EDGEDRIFT_CLOUD_DATABASE_PASSWORD_FILE``, ``add-device --secret-file``), not on a command line that
every user of the machine can read in ``ps``. An unusable configuration is reported one line per
problem, naming the variable and never its value.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from edgedrift.cli import CommandError, Formatter, Parser, add_version, run_command

if TYPE_CHECKING:
    from edgedrift_cloud.settings import CloudSettings


def _settings(serving: bool = False) -> CloudSettings:
    """The settings; the registry commands (``migrate``, ``add-device``, ``prune``) start no service, so
    the operator token is not theirs to check."""
    from edgedrift_cloud.settings import ConfigurationError, load_settings

    try:
        return load_settings() if serving else load_settings(operator_token=secrets.token_urlsafe(32))
    except ConfigurationError as exc:
        problems = (
            exc.problems if serving else [p.replace("refusing to start", "refusing") for p in exc.problems]
        )
        raise CommandError("; ".join(problems)) from None


def _apply(args: argparse.Namespace) -> None:
    """Flags become environment variables so that every uvicorn worker process sees them."""
    flags = (
        ("database_url", "DATABASE_URL"),
        ("mode", "MODE"),
        ("log_level", "LOG_LEVEL"),
        ("forwarded_allow_ips", "FORWARDED_ALLOW_IPS"),
        ("redis_url", "JOBS_REDIS_URL"),
    )
    for flag, env in flags:
        value = getattr(args, flag, None)
        if value is not None:
            os.environ[f"EDGEDRIFT_CLOUD_{env}"] = str(value)
            os.environ.pop(f"EDGEDRIFT_CLOUD_{env}_FILE", None)  # the flag wins over a file, as over a value
    log_format = getattr(args, "log_format", None)
    if log_format in ("json", "text"):
        os.environ["EDGEDRIFT_CLOUD_LOG_JSON"] = str(log_format == "json").lower()
    elif log_format == "auto" and "EDGEDRIFT_CLOUD_LOG_JSON" not in os.environ:
        os.environ["EDGEDRIFT_CLOUD_LOG_JSON"] = str(not sys.stderr.isatty()).lower()
    if getattr(args, "database_url", None) and _has_password(args.database_url):
        print(
            "edgedrift-cloud: warning: --database-url holds a password, which every user of this machine "
            "can read in the process list; use EDGEDRIFT_CLOUD_DATABASE_PASSWORD_FILE (or "
            "EDGEDRIFT_CLOUD_DATABASE_URL_FILE) instead",
            file=sys.stderr,
        )


def _has_password(url: str) -> bool:
    """Whether a database URL carries a password (an unparsable one is left to the settings' check)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).password is not None
    except Exception:
        return False


def _given_secret(args: argparse.Namespace) -> str | None:
    """The secret of ``add-device``: ``--secret-file`` (``-`` = standard input), ``--secret``, or none."""
    from edgedrift.secrets import SecretFileError, read_secret_file

    if args.secret_file is None:
        return None if args.secret is None else str(args.secret)
    try:
        if args.secret_file == "-":
            secret = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
            if not secret:
                raise CommandError("--secret-file -: standard input gave an empty line")
            return secret
        return read_secret_file("--secret-file", args.secret_file)
    except SecretFileError as exc:
        raise CommandError(str(exc)) from None


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from edgedrift_cloud.db.engine import make_engine, upgrade

    _apply(args)
    settings = _settings(serving=True)
    engine = make_engine(settings.database_url)
    upgrade(engine)
    engine.dispose()
    os.environ["EDGEDRIFT_CLOUD_AUTO_MIGRATE"] = "false"
    if args.workers > 1:
        _multiprocess_metrics()
    _raise_open_files(settings.max_connections * 2)
    url = f"http://{_display_host(args.host)}:{args.port}"
    print(
        f"edgedrift-cloud: serving on {url} (API docs {url}/docs); "
        f"dashboard {url}/dashboard#token=<the operator token>",
        flush=True,
    )
    uvicorn.run(
        "edgedrift_cloud.main:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
        http="edgedrift_cloud.connections:LimitedHttpProtocol",
        limit_concurrency=settings.max_connections,
        timeout_keep_alive=settings.keep_alive_s,
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=settings.forwarded_allow_ips or None,
    )
    return 0


def _raise_open_files(wanted: int) -> None:
    """Raise the soft limit of open files towards ``wanted`` (at most the hard limit): each connection
    is a file, and at a soft limit of 1,024 a few hundred held connections made ``/healthz``
    unreachable. The workers inherit it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _multiprocess_metrics() -> None:
    """Several workers: prometheus_client's multiprocess mode, so a scrape of any worker sums them all
    (``PROMETHEUS_MULTIPROC_DIR`` as given, emptied of a previous run's files, or a new directory)."""
    import tempfile
    from pathlib import Path

    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        for stale in Path(given).glob("*.db"):
            stale.unlink()
    else:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="edgedrift-metrics-")


def trainer_worker(args: argparse.Namespace) -> int:
    """A training worker: consume the queue of ``EDGEDRIFT_CLOUD_TRAINING=queue`` (the ``jobs`` extra)."""
    from pathlib import Path

    from edgedrift_cloud.job_queue import JobsUnavailableError
    from edgedrift_cloud.observability import configure_logging

    _apply(args)
    settings = _settings()
    configure_logging(settings.log_level, settings.log_json)
    try:
        from edgedrift_cloud.trainer_worker import run

        return run(settings, None if args.alive_file is None else Path(args.alive_file))
    except (ImportError, JobsUnavailableError) as exc:
        raise CommandError(str(exc)) from None


def migrate(args: argparse.Namespace) -> int:
    from edgedrift_cloud.db.engine import make_engine, upgrade

    _apply(args)
    engine = make_engine(_settings().database_url)
    upgrade(engine)
    print(f"registry at {engine.url.render_as_string(hide_password=True)} is at the newest migration")
    return 0


def _display_host(host: str) -> str:
    """The host to put into a link: a wildcard address is reached on the loopback."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def add_device(args: argparse.Namespace) -> int:
    from edgedrift.ids import DEVICE_ID_PATTERN
    from edgedrift.secrets import weak_secret_reason
    from edgedrift_cloud import registry
    from edgedrift_cloud.auth import new_secret
    from edgedrift_cloud.db.engine import make_engine, make_sessionmaker, upgrade

    if not re.fullmatch(DEVICE_ID_PATTERN, args.device_id):
        raise CommandError(f"device id {args.device_id!r} must match {DEVICE_ID_PATTERN}")
    given = _given_secret(args)
    if given is not None and (reason := weak_secret_reason(given)):
        raise CommandError(f"the device secret {reason}")
    _apply(args)
    engine = make_engine(_settings().database_url)
    upgrade(engine)
    secret = given or new_secret()
    with make_sessionmaker(engine)() as session:
        created = registry.upsert_device(session, args.device_id, secret)
        session.commit()
    print(f"{'registered' if created else 'rotated the secret of'} device {args.device_id}")
    if given is None:
        print(f"secret (shown once): {secret}")
    return 0


def add_devices(args: argparse.Namespace) -> int:
    """Bulk registration from a file, in a few statements (see :mod:`edgedrift_cloud.bulk`)."""
    from sqlalchemy.exc import IntegrityError

    from edgedrift_cloud.auth import new_secret
    from edgedrift_cloud.bulk import register_devices
    from edgedrift_cloud.db.engine import make_engine, make_sessionmaker, upgrade

    if args.file == "-":
        given, generated = _device_list(sys.stdin)
    else:
        try:
            with open(args.file, encoding="utf-8") as lines:
                given, generated = _device_list(lines)
        except OSError as exc:
            raise CommandError(f"{args.file}: {exc.strerror}") from None
    _apply(args)
    engine = make_engine(_settings().database_url)
    upgrade(engine)
    for device_id in generated:
        given[device_id] = new_secret()
    with make_sessionmaker(engine)() as session:
        try:
            done = register_devices(session, given)
            session.commit()
        except IntegrityError:
            raise CommandError("a secret in the file is already used by another device") from None
    print(f"registered {done.created} devices, rotated the secrets of {done.rotated}", file=sys.stderr)
    for device_id in generated:
        print(f"{device_id},{given[device_id]}")
    return 0


def _device_list(lines: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """(device -> given secret, devices without one) from 'id' or 'id,secret' lines ('#' comments)."""
    from edgedrift.ids import DEVICE_ID_PATTERN
    from edgedrift.secrets import weak_secret_reason

    given: dict[str, str] = {}
    generated: list[str] = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        device_id, _, secret = (part.strip() for part in line.partition(","))
        if not re.fullmatch(DEVICE_ID_PATTERN, device_id):
            raise CommandError(f"line {number}: device id {device_id!r} must match {DEVICE_ID_PATTERN}")
        if device_id in given or device_id in generated:
            raise CommandError(f"line {number}: device {device_id} appears twice")
        if secret and (reason := weak_secret_reason(secret)):
            raise CommandError(f"line {number}: the secret of {device_id} {reason}")
        if secret:
            given[device_id] = secret
        else:
            generated.append(device_id)
    return given, generated


def prune(args: argparse.Namespace) -> int:
    """Retention for every device: keep the newest ``--keep`` versions, the pinned and the aliased ones."""
    from edgedrift_cloud import registry, versions
    from edgedrift_cloud.db.engine import make_engine, make_sessionmaker, upgrade

    _apply(args)
    engine = make_engine(_settings().database_url)
    upgrade(engine)
    total = 0
    with make_sessionmaker(engine)() as session:
        for device_id in registry.list_device_ids(session):
            total += len(versions.prune(session, device_id, args.keep).pruned)
            session.commit()  # each device's lock is held only while its versions are pruned
    print(f"pruned the documents of {total} model versions (kept the newest {args.keep}, pinned, aliased)")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cloud_command", metavar="COMMAND", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--database-url",
        help="SQLAlchemy URL (default: sqlite:///edgedrift-cloud.db); keep its password out of the command "
        "line: EDGEDRIFT_CLOUD_DATABASE_PASSWORD_FILE",
    )
    common.add_argument(
        "--mode", choices=["development", "production"], help="development allows placeholder secrets"
    )
    common.add_argument(
        "--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level (default: INFO)"
    )
    p = sub.add_parser(
        "serve", parents=[common], help="run the service with uvicorn", formatter_class=Formatter
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000, help="TCP port")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument(
        "--forwarded-allow-ips",
        help="reverse proxies whose X-Forwarded-For is trusted (comma-separated addresses or networks, '*' "
        "for any; default: none, the TCP peer is the client)",
    )
    p.add_argument(
        "--log-format",
        choices=["auto", "text", "json"],
        default="auto",
        help="auto: text on a terminal, JSON otherwise (or as EDGEDRIFT_CLOUD_LOG_JSON says)",
    )
    p.set_defaults(func=serve)
    p = sub.add_parser(
        "trainer-worker",
        parents=[common],
        help="a training worker: run the recomputes of EDGEDRIFT_CLOUD_TRAINING=queue (the jobs extra)",
        formatter_class=Formatter,
    )
    p.add_argument(
        "--redis-url",
        help="the Redis of the training queue (default: EDGEDRIFT_CLOUD_JOBS_REDIS_URL, "
        "redis://127.0.0.1:6379/0)",
    )
    p.add_argument(
        "--alive-file",
        metavar="PATH",
        help="touch PATH every second while the worker's threads live (a liveness probe's file)",
    )
    p.set_defaults(func=trainer_worker)
    p = sub.add_parser(
        "migrate",
        parents=[common],
        help="bring the registry schema to the newest migration",
        formatter_class=Formatter,
    )
    p.set_defaults(func=migrate)
    p = sub.add_parser(
        "add-device",
        parents=[common],
        help="register a device or rotate its secret",
        formatter_class=Formatter,
    )
    p.add_argument("device_id", help="letters, digits, '_' and '-' (1-64 characters)")
    given = p.add_mutually_exclusive_group()
    given.add_argument(
        "--secret-file",
        metavar="PATH",
        help="read the secret to set from PATH, '-' for standard input (default: generate and print one)",
    )
    given.add_argument(
        "--secret", help="the secret itself (visible to every user in the process list: prefer --secret-file)"
    )
    p.set_defaults(func=add_device)
    p = sub.add_parser(
        "add-devices",
        parents=[common],
        help="register many devices from a file: one 'device_id' or 'device_id,secret' per line",
        formatter_class=Formatter,
    )
    p.add_argument("file", help="the device list ('-' for standard input); generated secrets print as CSV")
    p.set_defaults(func=add_devices)
    p = sub.add_parser(
        "prune",
        parents=[common],
        help="retention of old model versions, every device",
        formatter_class=Formatter,
    )
    p.add_argument(
        "--keep",
        type=_positive,
        required=True,
        help="newest versions to keep per device (pinned and aliased are kept too)",
    )
    p.set_defaults(func=prune)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``edgedrift cloud ...`` subcommand (entry-point group ``edgedrift.commands``)."""
    parser = sub.add_parser(
        "cloud", help="the cloud trainer service", description=__doc__, formatter_class=Formatter
    )
    add_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="edgedrift-cloud", description=__doc__, formatter_class=Formatter)
    add_version(parser, "edgedrift-cloud")
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(f"edgedrift-cloud {args.cloud_command}", args)


if __name__ == "__main__":
    sys.exit(main())

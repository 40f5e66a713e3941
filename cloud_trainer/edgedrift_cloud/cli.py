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
import sys
from collections.abc import Sequence

from edgedrift.secrets import SecretFileError, read_secret_file, weak_secret_reason
from edgedrift.wire import DEVICE_ID_PATTERN
from edgedrift_cloud.settings import CloudSettings, ConfigurationError, load_settings


def _settings() -> CloudSettings:
    try:
        return load_settings()
    except ConfigurationError as exc:
        raise SystemExit("\n".join(f"edgedrift-cloud: {problem}" for problem in exc.problems)) from None


def _apply(args: argparse.Namespace) -> None:
    """Flags become environment variables so that every uvicorn worker process sees them."""
    for flag, env in (("database_url", "DATABASE_URL"), ("mode", "MODE"), ("log_level", "LOG_LEVEL")):
        value = getattr(args, flag, None)
        if value is not None:
            os.environ[f"EDGEDRIFT_CLOUD_{env}"] = str(value)
            os.environ.pop(f"EDGEDRIFT_CLOUD_{env}_FILE", None)  # the flag wins over a file, as over a value
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
    if args.secret_file is None:
        return None if args.secret is None else str(args.secret)
    try:
        if args.secret_file == "-":
            secret = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
            if not secret:
                raise SystemExit("edgedrift-cloud: --secret-file -: standard input gave an empty line")
            return secret
        return read_secret_file("--secret-file", args.secret_file)
    except SecretFileError as exc:
        raise SystemExit(f"edgedrift-cloud: {exc}") from None


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from edgedrift_cloud.db.engine import make_engine, upgrade

    _apply(args)
    settings = _settings()
    engine = make_engine(settings.database_url)
    upgrade(engine)
    engine.dispose()
    os.environ["EDGEDRIFT_CLOUD_AUTO_MIGRATE"] = "false"
    uvicorn.run(
        "edgedrift_cloud.main:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    return 0


def migrate(args: argparse.Namespace) -> int:
    from edgedrift_cloud.db.engine import make_engine, upgrade

    _apply(args)
    engine = make_engine(_settings().database_url)
    upgrade(engine)
    print(f"registry at {engine.url.render_as_string(hide_password=True)} is at the newest migration")
    return 0


def add_device(args: argparse.Namespace) -> int:
    from edgedrift_cloud import registry
    from edgedrift_cloud.auth import new_secret
    from edgedrift_cloud.db.engine import make_engine, make_sessionmaker, upgrade

    if not re.fullmatch(DEVICE_ID_PATTERN, args.device_id):
        raise SystemExit(f"edgedrift-cloud: device id {args.device_id!r} must match {DEVICE_ID_PATTERN}")
    given = _given_secret(args)
    if given is not None and (reason := weak_secret_reason(given)):
        raise SystemExit(f"edgedrift-cloud: the device secret {reason}")
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
    common.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p = sub.add_parser("serve", parents=[common], help="run the service with uvicorn")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.set_defaults(func=serve)
    p = sub.add_parser("migrate", parents=[common], help="bring the registry schema to the newest migration")
    p.set_defaults(func=migrate)
    p = sub.add_parser("add-device", parents=[common], help="register a device or rotate its secret")
    p.add_argument("device_id")
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


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``edgedrift cloud ...`` subcommand (entry-point group ``edgedrift.commands``)."""
    parser = sub.add_parser("cloud", help="the cloud trainer service", description=__doc__)
    add_arguments(parser)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="edgedrift-cloud", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

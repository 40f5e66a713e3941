"""``edgedrift-cloud``: serve the trainer with uvicorn, migrate the registry, register a device.

    edgedrift-cloud serve --host 0.0.0.0 --port 8000 --database-url postgresql://user@db/edgedrift --workers 2

Flags override the ``EDGEDRIFT_CLOUD_*`` environment (see ``cloud_trainer/.env.example``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from edgedrift.wire import DEVICE_ID_PATTERN
from edgedrift_cloud.settings import MIN_SECRET_LENGTH, CloudSettings, InsecureSettingsError


def _settings() -> CloudSettings:
    try:
        return CloudSettings()
    except (InsecureSettingsError, ValidationError) as exc:
        raise SystemExit(f"edgedrift-cloud: {exc}") from None


def _apply(args: argparse.Namespace) -> None:
    """Flags become environment variables so that every uvicorn worker process sees them."""
    for flag, env in (("database_url", "DATABASE_URL"), ("mode", "MODE"), ("log_level", "LOG_LEVEL")):
        value = getattr(args, flag, None)
        if value is not None:
            os.environ[f"EDGEDRIFT_CLOUD_{env}"] = str(value)


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
    if args.secret is not None and len(args.secret) < MIN_SECRET_LENGTH:
        raise SystemExit(f"edgedrift-cloud: a device secret needs at least {MIN_SECRET_LENGTH} characters")
    _apply(args)
    engine = make_engine(_settings().database_url)
    upgrade(engine)
    secret = args.secret or new_secret()
    with make_sessionmaker(engine)() as session:
        created = registry.upsert_device(session, args.device_id, secret)
        session.commit()
    print(f"{'registered' if created else 'rotated the secret of'} device {args.device_id}")
    if not args.secret:
        print(f"secret (shown once): {secret}")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cloud_command", metavar="COMMAND", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database-url", help="SQLAlchemy URL (default: sqlite:///edgedrift-cloud.db)")
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
    p.add_argument("--secret", help="the secret to set (default: generate and print one)")
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

"""`fedsentry serve` (API, dashboard and coordinator in one process) and `fedsentry apikey`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from fedsentry.cli.common import DB_HELP, positive_int
from fedsentry.errors import UsageError


def register(groups: dict[str, Any], verbs: Any) -> None:
    from fedsentry.cli.server import add_service_args

    s = verbs.add_parser("serve", help="REST API, dashboard and coordinator")
    add_service_args(s)
    s.add_argument("--host", default="127.0.0.1", help="address the dashboard and API listen on (default 127.0.0.1)")
    s.add_argument("--port", type=positive_int, default=8000, help="port of the dashboard and API (default 8000)")
    s.add_argument("--no-coordinator", action="store_true", help="API only (another process coordinates)")
    s.add_argument("--insecure-cookie", action="store_true", help="session cookie without Secure (plain http)")
    s.set_defaults(func=run_serve)

    k = verbs.add_parser("apikey", help="manage API keys").add_subparsers(dest="action", required=True)
    c = k.add_parser("create", help="create a key; it is printed once, alone on the last line")
    c.add_argument("--role", choices=("admin", "viewer"), required=True,
                   help="admin: create jobs, promote models, acknowledge; viewer: read only")
    c.add_argument("--name", help="who holds the key (e.g. alice@soc): recorded on what it acknowledges")
    c.add_argument("--db", help=DB_HELP)
    c.set_defaults(func=run_apikey)
    ls = k.add_parser("list", help="list keys (ids and roles, never the keys)")
    ls.add_argument("--db", help=DB_HELP)
    ls.set_defaults(func=run_apikey)
    rv = k.add_parser("revoke", help="revoke a key by id")
    rv.add_argument("id", help="the key's id (first column of `fedsentry apikey list`)")
    rv.add_argument("--db", help=DB_HELP)
    rv.set_defaults(func=run_apikey)


def run_apikey(args: argparse.Namespace) -> int:
    from api.security import create_key, list_keys
    from store.db import ApiKey, make_engine, migrate, session_factory

    engine = make_engine(args.db)
    migrate(engine)
    with session_factory(engine).begin() as s:
        if args.action == "create":
            try:
                key = create_key(s, args.role, args.name)
            except ValueError as e:
                raise UsageError(f"--name: {e}") from None
            article = "an" if args.role[0] in "aeiou" else "a"
            print(f"created {article} {args.role} key (shown once):", file=sys.stderr)
            print(key)
        elif args.action == "list":
            print("id\trole\tcreated (UTC)\tstate\tname")
            for k in list_keys(s):
                print(f"{k.id}\t{k.role}\t{k.created:%Y-%m-%d %H:%M}\t{'revoked' if k.revoked else 'active'}"
                      f"\t{k.name or ''}")
        else:
            row = s.get(ApiKey, args.id)
            if row is None:
                raise UsageError(f"no API key with id {args.id!r} (see `fedsentry apikey list`)")
            row.revoked = True
            print(f"revoked {args.id}", file=sys.stderr)
    return 0


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from api.app import create_app
    from api.settings import Settings
    from fedsentry.cli.server import port_free

    if not port_free(args.host, args.port):  # before anything starts or prints
        raise UsageError(f"port {args.port} on {args.host} is in use (another fedsentry serve or demo?): give "
                         "--port N, or stop what listens there")
    settings = Settings(db_url=args.db or os.environ.get("FEDSENTRY_DB_URL"), host=args.host, port=args.port)
    if args.insecure_cookie:
        settings.cookie_secure = False
    broker, coord = None, None
    if not args.no_coordinator:
        from coordinator.service import Coordinator
        from fedsentry.cli.server import forward_destinations, service_broker

        forward = forward_destinations(args)
        broker, url, username, password = service_broker(args)
        try:
            coord = Coordinator(url, settings.db_url, username=username, password=password, tls=args.tls,
                                ca_cert=args.ca_cert, retention_days=settings.retention_days,
                                forward=forward).start()
        except ValueError as e:
            if broker:
                broker.stop()
            raise UsageError(str(e)) from None
    app = create_app(settings)
    print(f"FedSentry dashboard on http://{args.host}:{args.port}/  (API docs: /docs)", file=sys.stderr, flush=True)
    # SIGTERM (a service manager's stop) shuts uvicorn down gracefully; uvicorn then raises the signal again with
    # the handler it found, which must not kill the process before the coordinator and the broker are closed
    previous = signal.signal(signal.SIGTERM, lambda *a: None)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        signal.signal(signal.SIGTERM, previous)
        if coord:
            coord.close()
        if broker:
            broker.stop()
    return 0

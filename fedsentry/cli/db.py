"""`fedsentry db partition-alerts --db URL [--undo]`: PostgreSQL's alerts partitioned by day, or one table again
(store.partitions; opt-in, for large deployments: the default schema is one table)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from fedsentry.errors import UsageError, database_error


def register(groups: dict[str, Any], verbs: Any) -> None:
    d = verbs.add_parser("db", help="database administration").add_subparsers(dest="action", required=True)
    p = d.add_parser("partition-alerts", help="PostgreSQL: partition the alerts by UTC day (retention then drops whole "
                                              "days; queries without a time bound read every day, slower)")
    p.add_argument("--db", required=True, help="PostgreSQL database URL")
    p.add_argument("--undo", action="store_true", help="make the alerts one table again")
    p.set_defaults(func=run_partition_alerts)


def run_partition_alerts(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import ArgumentError, OperationalError

    from store import partitions
    from store.db import backend, make_engine, migrate, utcnow

    try:
        name = backend(args.db)
    except ArgumentError as e:
        raise UsageError(f"db partition-alerts: not a database URL {args.db!r}: {e}") from None
    if name != "postgresql":  # refused before make_engine, which would make an SQLite file
        raise UsageError(f"db partition-alerts: {partitions.POSTGRESQL_ONLY} (--db is {name}); nothing changed")
    engine = make_engine(args.db)
    try:
        try:
            c = engine.connect()
        except OperationalError as e:
            raise database_error("db partition-alerts: cannot reach the database", e) from None
        try:
            with c:
                partitions.check(c, not args.undo)  # before migrating: refused, nothing changed
            migrate(engine)
            t0 = time.perf_counter()
            with engine.begin() as c:
                n = partitions.unconvert(c) if args.undo else partitions.convert(c, utcnow())
        except partitions.ShapeError as e:
            raise UsageError(f"db partition-alerts: {e}; nothing changed") from None
    finally:
        engine.dispose()
    shape = "one table" if args.undo else "partitioned by day"
    print(f"alerts {shape}: {n} alerts copied in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0

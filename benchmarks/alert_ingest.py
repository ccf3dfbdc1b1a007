"""What the alert path costs the database: alerts stored as the coordinator stores them (store.alerts.alert_row,
then store_alerts in batches), on a scratch PostgreSQL database migrated to the head of the tree that runs this
script, timed: alerts per second (wall clock) and the database's CPU per alert (the backend's user + system time
from /proc, so the server must run on this machine).

To compare two trees, run this file against each in turn, alternating (the machine's load drifts):

    for i in 1 2 3 4; do
      (cd /work/main && PYTHONPATH=/work/main python /work/hNN/benchmarks/alert_ingest.py --json /tmp/main-$i.json)
      (cd /work/hNN && python benchmarks/alert_ingest.py --json /tmp/branch-$i.json)
    done

The alerts are those `fedsentry bench api` stores (fedsentry.bench.api.Fleet: 200 devices, 30 % incident updates),
their times spread over the last `--spread` seconds (3,600: live traffic, every batch in the current hour and day;
2,592,000: a month, each batch touching a tally of every hour). `--partitioned`: the same on alerts partitioned by day
(store.partitions), against a run without it in the same tree."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process on this machine (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/postgres",
                   help="a PostgreSQL server on this machine (a scratch database is created there and dropped)")
    p.add_argument("--alerts", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=2000,
                   help="alerts per store_alerts call, one transaction (the coordinator's largest batch)")
    p.add_argument("--spread", type=float, default=3600.0, help="the alerts' times span this many seconds, to now")
    p.add_argument("--sql", help="a file of SQL run after the migrations (a variant tried before it is one)")
    p.add_argument("--partitioned", action="store_true",
                   help="partition the scratch database's alerts by day before storing (store.partitions, as "
                        "`fedsentry db partition-alerts` does)")
    p.add_argument("--json", help="write the result here")
    args = p.parse_args()
    if args.alerts < 1 or args.batch < 1 or args.spread <= 120:
        p.error("--alerts and --batch must be positive, --spread above 120 s")

    from sqlalchemy import text

    import fedsentry.bench.api as bench_api
    import store
    from store.alerts import alert_row, store_alerts
    from store.db import make_engine, migrate, session_factory

    fleet = bench_api.Fleet(args.alerts, 200, span=timedelta(seconds=args.spread))  # alerts over this span, to now
    with bench_api.database(args.server, True) as url:  # a database made for the run on that server, then dropped
        engine = make_engine(url)
        migrate(engine)
        if args.partitioned:
            from store import partitions
            from store.db import utcnow

            with engine.begin() as c:
                partitions.convert(c, utcnow())
        if args.sql:
            with engine.begin() as c:
                c.exec_driver_sql(Path(args.sql).read_text())
        sessions = session_factory(engine)
        batches = [[alert_row(d, "bench", 1, m, datetime.fromtimestamp(m["ts"] + 0.5, timezone.utc)
                              .replace(tzinfo=None)) for d, m, _ in chunk] for chunk in fleet.chunks(args.batch)]
        with sessions() as s:  # one connection for the whole run: its backend's CPU is the database's
            pid = s.execute(text("SELECT pg_backend_pid()")).scalar_one()
            cpu0, t0 = cpu_seconds(pid), time.perf_counter()
            for rows in batches:
                store_alerts(s, rows)
                s.commit()
            seconds, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
            stored = s.execute(text("SELECT count(*) FROM alerts")).scalar_one()
        engine.dispose()
    assert stored == fleet.size, (stored, fleet.size)
    out = {"tree": os.path.dirname(os.path.dirname(os.path.abspath(store.__file__))), "alerts": stored,
           "batch": args.batch, "spread_s": args.spread, "seconds": round(seconds, 3),
           "alerts_per_s": round(stored / seconds, 1), "db_cpu_us_per_alert": round(1e6 * cpu / stored, 2),
           "partitioned": args.partitioned, "load_before": os.getloadavg()[0]}
    print(json.dumps(out), file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

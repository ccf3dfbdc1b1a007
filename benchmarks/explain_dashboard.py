"""EXPLAIN (ANALYZE, BUFFERS) of the statements store.triage runs for the dashboard's month requests, on a database
`fedsentry bench api --db URL` filled (its fleet's end from bench_api_fleet):

    python benchmarks/explain_dashboard.py postgresql://postgres@127.0.0.1:5432/DB ["per-device half" ...]

prints each statement's execution time; naming one request prints its plans too."""
import sys
from datetime import datetime, timedelta

from sqlalchemy import event, text
from sqlalchemy.orm import Session

from store.db import make_engine
from store.triage import AlertFilter, flagged_counts, flagged_series, records_per_device

url = sys.argv[1]
engine = make_engine(url)
with engine.connect() as c:
    end = c.execute(text("SELECT end_unix FROM bench_api_fleet")).scalar()
now = datetime(1970, 1, 1) + timedelta(seconds=end + 60)
since = now - timedelta(days=31)
half = 3.0 + 2.0 * 0.6931
cases = {"counts all": lambda s: flagged_counts(s, AlertFilter(since=since, until=now)),
         "counts all cam-": lambda s: flagged_counts(s, AlertFilter(since=since, until=now, device_prefix="cam-")),
         "counts half": lambda s: flagged_counts(s, AlertFilter(since=since, until=now, min_score=half)),
         "per-device all": lambda s: records_per_device(s, AlertFilter(since=since, until=now)),
         "per-device half": lambda s: records_per_device(s, AlertFilter(since=since, until=now, min_score=half)),
         "series all": lambda s: flagged_series(s, AlertFilter(since=since, until=now))}
only = sys.argv[2:] or list(cases)
for name in only:
    captured = []
    def grab(conn, cursor, statement, params, context, executemany, captured=captured):
        captured.append((statement, params))
    event.listen(engine, "before_cursor_execute", grab)
    with Session(engine) as s:
        cases[name](s)
    event.remove(engine, "before_cursor_execute", grab)
    for statement, params in captured:
        with engine.connect() as c:
            raw = c.connection.driver_connection
            with raw.cursor() as cur:
                cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params)
                plan = [r[0] for r in cur.fetchall()]
        print(f"=== {name}: {plan[-1].strip()}")
        if len(only) == 1:
            print("\n".join(plan[:40]))

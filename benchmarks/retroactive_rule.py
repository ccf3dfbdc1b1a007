"""A retroactive suppression rule over N stored alerts (29 days, 100 devices) while one matching device keeps
sending: how long the rule takes and how long ingestion's stores take meanwhile (store.suppress.apply_retroactive).

    python benchmarks/retroactive_rule.py 100000 postgresql   # a scratch database retro_bench on 127.0.0.1:5432
    python benchmarks/retroactive_rule.py 100000 sqlite:////tmp/retro.db
"""

from __future__ import annotations

import sys
import threading
import time
import uuid

from sqlalchemy import create_engine, text

from store import suppress
from store.alerts import alert_row, store_alerts
from store.db import make_engine, migrate, session_factory, utcnow


def main(n: int, url: str) -> None:
    if url == "postgresql":
        admin = create_engine("postgresql+psycopg://postgres@127.0.0.1:5432/postgres", isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text("DROP DATABASE IF EXISTS retro_bench"))
            c.execute(text("CREATE DATABASE retro_bench"))
        url = "postgresql://postgres@127.0.0.1:5432/retro_bench"
    engine = make_engine(url)
    migrate(engine)
    sessions = session_factory(engine)
    now, t0 = time.time(), time.time()
    for b in range(0, n, 5000):
        rows = [alert_row(f"dev-{i % 100}", "job-1", 1, {
            "id": uuid.uuid4().hex, "ts": now - (i / n) * 29 * 86400, "score": 5.0, "threshold": 3.0, "count": 1,
            "explanation": [], "flow": {"id.orig_h": f"10.{i % 10}.0.{i % 250}", "id.resp_p": 443}, "incident": None},
            utcnow()) for i in range(b, min(n, b + 5000))]
        with sessions.begin() as s:
            store_alerts(s, rows)
    print(f"loaded {n} alerts in {time.time() - t0:.1f} s")
    latency: list[float] = []
    stop = threading.Event()

    def ingest() -> None:  # a device the rule matches, sending as the rule is applied
        while not stop.is_set():
            a = {"id": uuid.uuid4().hex, "ts": time.time(), "score": 5.0, "threshold": 3.0, "count": 1,
                 "explanation": [], "flow": {"id.orig_h": "10.3.0.1"}, "incident": None}
            t = time.time()
            with sessions.begin() as s:
                store_alerts(s, [alert_row("dev-3", "job-1", 1, a, utcnow())])
            latency.append(time.time() - t)
            time.sleep(0.05)

    th = threading.Thread(target=ingest)
    th.start()
    time.sleep(1)
    t = time.time()
    with sessions.begin() as s:
        rule = suppress.create(s, suppress.Match.parse({"cidr": "10.3.0.0/16"}), "bench", "bench", retroactive=True)
    held = suppress.apply_retroactive(sessions, rule.id)
    took = time.time() - t
    time.sleep(1)
    stop.set()
    th.join()
    latency.sort()
    print(f"retroactive rule: {held} alerts held back in {took:.1f} s; ingestion's stores meanwhile: median "
          f"{latency[len(latency) // 2] * 1000:.0f} ms, worst {latency[-1]:.2f} s ({len(latency)} stores)")
    engine.dispose()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])

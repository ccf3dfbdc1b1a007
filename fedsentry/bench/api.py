"""`fedsentry bench api`: listing anomalies with filters over a large table, page by page."""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from fedsentry.output import write_json


def run(args: argparse.Namespace) -> int:
    from fastapi.testclient import TestClient
    from sqlalchemy import insert

    from api.app import create_app
    from api.security import create_key
    from api.settings import Settings
    from coordinator.db import Alert, utcnow

    db = args.db or f"sqlite:///{tempfile.mkdtemp(prefix='fedsentry-benchapi-')}/bench.db"
    app = create_app(Settings(db_url=db))
    now = utcnow()
    rows = [{"id": uuid.uuid4().hex, "device_id": f"dev-{i % args.devices:04d}", "job_id": "bench", "model_version": 1,
             "ts": now - timedelta(seconds=i), "received": now, "score": float((i * 7919) % 1000), "threshold": 1.0,
             "count": 1, "explanation": [{"feature": "src_bytes", "share": 0.9, "value": 1.0, "expected": 0.0}],
             "acknowledged": i % 10 == 0}
            for i in range(args.alerts)]
    with app.state.sessions.begin() as s:
        for i in range(0, len(rows), 10_000):
            s.execute(insert(Alert), rows[i:i + 10_000])
        key = create_key(s, "viewer")
    client = TestClient(app, headers={"Authorization": f"Bearer {key}"})
    queries: dict[str, dict[str, Any]] = {
        "newest 50, no filter": {"limit": 50},
        "one device, score >= 500": {"device": "dev-0042", "min_score": 500, "limit": 50},
        "unacknowledged, last hour": {"acknowledged": False, "since": (now - timedelta(hours=1)).isoformat(),
                                      "limit": 100},
        "score >= 990 (rare)": {"min_score": 990, "limit": 50},
    }
    results = {}
    for name, params in queries.items():
        times, cursor, pages = [], None, 0
        for _ in range(10):  # ten consecutive pages (or until the last)
            t0 = time.perf_counter()
            r = client.get("/api/v1/anomalies", params={**params, **({"cursor": cursor} if cursor else {})})
            times.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
            pages += 1
            cursor = r.json()["next_cursor"]
            if not cursor:
                break
        results[name] = {"pages": pages, "median_ms": 1000 * statistics.median(times), "max_ms": 1000 * max(times)}
    out = {"command": shlex.join(["fedsentry", *sys.argv[1:]]), "alerts": args.alerts, "devices": args.devices,
           "database": db.split(":")[0], "queries": results}
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["# Anomaly listing benchmark", "", f"Command: `{out['command']}`", "",
             f"{args.alerts:,} stored anomalies over {args.devices} devices ({out['database']}); each query pages "
             "through up to 10 pages with its cursor, timed through the full app (auth, query, serialisation).", "",
             "| query | pages | median ms/page | worst ms/page |", "|---|---:|---:|---:|"]
    lines += [f"| {n} | {r['pages']} | {r['median_ms']:.1f} | {r['max_ms']:.1f} |" for n, r in results.items()]
    (folder / "api-listing.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), file=sys.stderr)
    write_json(out, args.json)
    return 0

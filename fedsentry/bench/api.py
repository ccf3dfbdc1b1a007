"""`fedsentry bench api`: what the analyst's dashboard asks of a large alert table, timed through the full app
(auth, query, serialisation) on each database given: filtered anomaly pages (by device, device prefix, time,
score, acknowledgement), counts of flagged records with their time series, incidents (first and a deep page),
and both alert charts.

The alerts look like a month of a fleet's: devices of three kinds (gw-, cam-, sensor-; a prefix matching about
1 % and 50 % of them), some noisier than others, and a share of incident updates (count > 1) grouped into
incidents, each made into a row by store.alerts.alert_row and stored by store_alerts, so incident_id is
filled as in production; most alerts older than a day are acknowledged (through store.triage)."""

from __future__ import annotations

import argparse
import logging
import random
import shlex
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from fedsentry.errors import UsageError, database_error
from fedsentry.output import write_json

#: the alerts span this long, up to now (the dashboard's longest period, "last 30 days", holds them all)
SPAN = timedelta(days=30)
#: share of the alerts that are incident updates, and their number per incident on average
UPDATE_SHARE = 0.3
UPDATES_PER_INCIDENT = 10
#: scores are THRESHOLD + an exponential of this mean: half are >= THRESHOLD + mean ln 2, 1 % >= + mean ln 100
THRESHOLD, SCORE_MEAN = 3.0, 2.0
FEATURES = ("src_bytes", "dst_bytes", "duration", "dst_port", "orig_pkts", "resp_pkts", "conn_state", "missed_bytes")
ACKED_BY = "bench@soc"
#: alerts made (and stored) at a time: the stream's memory
CHUNK = 5000


def device_ids(n: int) -> list[str]:
    """Gateways (about 1 %), cameras (half) and sensors (the rest)."""
    gateways = max(1, round(n / 100))
    cameras = min(n // 2, n - gateways)
    return ([f"gw-{i:04d}" for i in range(gateways)] + [f"cam-{i:04d}" for i in range(cameras)]
            + [f"sensor-{i:04d}" for i in range(n - gateways - cameras)])


class Fleet:
    """The alerts as agents would send them (seeded, made as they are read: `stream`), which of them an analyst
    acknowledged, and what the API should report about them (one pass over the stream when made)."""

    def __init__(self, alerts: int, devices: int, seed: int = 2026, span: timedelta = SPAN,
                 end: float | None = None):
        self.size, self.seed = alerts, seed
        self.end = time.time() - 60 if end is None else end
        self.devices = device_ids(devices)
        self.span = span.total_seconds()  # the alerts' times: the last `span` to now
        per_device: Counter[str] = Counter()
        incidents: set[tuple[str, float]] = set()
        open_incidents: set[tuple[str, float]] = set()
        self.records = self.updates = self.acked = 0
        for device, m, acked in self.stream():
            per_device[device] += 1
            self.records += m["count"]
            self.acked += acked
            if m["incident"] is not None:
                self.updates += 1
                incidents.add(key := (device, m["incident"]["window"]))
                if not acked:
                    open_incidents.add(key)
        self.noisiest = per_device.most_common(1)[0][0]
        self.active_devices = len(per_device)
        self.incidents, self.open_incidents = len(incidents), len(open_incidents)

    def stream(self) -> Iterator[tuple[str, dict[str, Any], bool]]:
        """Every alert as (device, alert as sent, acknowledged), the same for the same seed: the single alerts,
        then the incidents' updates. Acknowledged: 70 % of the single alerts and 80 % of the incidents older than a
        day, 10 % of the newer ones; one in twenty of those incidents got an update after (open again). Holds
        a number per incident, never the alerts."""
        self.rng = rng = random.Random(self.seed)
        weights = [rng.lognormvariate(0, 1) for _ in self.devices]  # some devices are noisier than others
        alerts = self.size
        n_updates = min(alerts - 1, int(alerts * UPDATE_SHARE)) if alerts > 1 else 0
        n_incidents = max(1, n_updates // UPDATES_PER_INCIDENT) if n_updates else 0
        day_ago = self.end - 86400
        singles = alerts - n_updates
        for first in range(0, singles, CHUNK):
            for device in rng.choices(self.devices, weights, k=min(CHUNK, singles - first)):
                m = self._alert(self.end - rng.random() * self.span, 1, self._explanation(), self._flow(), None)
                yield device, m, rng.random() < (0.7 if m["ts"] < day_ago else 0.1)
        sizes = [1] * n_incidents  # updates per incident: at least one each, the rest spread at random
        for i in rng.choices(range(n_incidents), k=n_updates - n_incidents):
            sizes[i] += 1
        for size, device in zip(sizes, rng.choices(self.devices, weights, k=n_incidents), strict=True):
            window = self.end - 120 - rng.random() * (self.span - 120)  # the rate limiter's window start
            explanation = self._explanation()
            key = "+".join(sorted(e["feature"] for e in explanation[:2]))
            step = min(1.0, 58 / size)  # an update a second while the incident grows
            first_ts, updates = window + 1, []
            for j in range(size):
                ts = window + 1 + (j + 1) * step
                updates.append(self._alert(ts, int(2 + rng.expovariate(1 / 40)), explanation, None, {
                    "key": key, "window": window, "first": first_ts, "last": ts,
                    "samples": [self._flow() for _ in range(rng.randint(1, 5))]}))
                first_ts = ts
            acked = rng.random() < (0.8 if updates[-1]["ts"] < day_ago else 0.1)
            reopened = acked and size > 1 and rng.random() < 0.05
            for j, m in enumerate(updates):
                yield device, m, acked and not (reopened and j == size - 1)

    def chunks(self, size: int) -> Iterator[list[tuple[str, dict[str, Any], bool]]]:
        """The stream in lists of `size` alerts."""
        chunk: list[tuple[str, dict[str, Any], bool]] = []
        for alert in self.stream():
            chunk.append(alert)
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def _alert(self, ts: float, count: int, explanation: list[dict[str, Any]], flow: dict[str, Any] | None,
               incident: dict[str, Any] | None) -> dict[str, Any]:
        return {"id": uuid.UUID(int=self.rng.getrandbits(128)).hex, "ts": ts,
                "score": round(THRESHOLD + self.rng.expovariate(1 / SCORE_MEAN), 4), "threshold": THRESHOLD,
                "count": count, "explanation": explanation, "flow": flow, "incident": incident}

    def _explanation(self) -> list[dict[str, Any]]:
        shares = sorted((self.rng.random() for _ in range(3)), reverse=True)
        total = sum(shares) * 1.1
        return [{"feature": f, "share": round(s / total, 3), "value": round(self.rng.uniform(1, 1e5), 1),
                 "expected": round(self.rng.uniform(0, 100), 1)}
                for f, s in zip(self.rng.sample(FEATURES, 3), shares, strict=True)]

    def _flow(self) -> dict[str, Any]:
        r = self.rng
        return {"uid": f"C{r.getrandbits(64):016x}",
                "id.orig_h": f"10.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(1, 255)}",
                "id.orig_p": r.randrange(1024, 65536), "id.resp_h": f"192.0.2.{r.randrange(1, 255)}",
                "id.resp_p": r.choice((22, 53, 80, 443, 1883, 8883)), "proto": "tcp", "service": "ssl"}


@contextmanager
def database(spec: str, scratch_server: bool) -> Iterator[str]:
    """The URL to run on: `sqlite` is a file in a temporary folder; with scratch_server, a database created on
    that PostgreSQL server for the run and dropped afterwards; else the URL as given."""
    if spec == "sqlite":
        with tempfile.TemporaryDirectory(prefix="fedsentry-benchapi-") as folder:
            yield f"sqlite:///{folder}/bench.db"
        return
    if not scratch_server:
        yield spec
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from store.db import db_url

    server = make_url(db_url(spec))
    name = f"fedsentry_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield server.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as c:
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


#: in a database `--reuse` may time again: the fleet its alerts are (the alerts, the devices, their end in Unix seconds)
FLEET_TABLE = "bench_api_fleet"


def stored_fleet(url: str) -> tuple[int, int, float] | None:
    """The fleet an earlier run stored in this database (alerts, devices, end), or None."""
    from sqlalchemy import create_engine, inspect, text

    from store.db import db_url

    engine = create_engine(db_url(url))
    try:
        with engine.connect() as c:
            if not inspect(c).has_table(FLEET_TABLE):
                return None
            row = c.execute(text(f"SELECT alerts, devices, end_unix FROM {FLEET_TABLE}")).one_or_none()
            return None if row is None else (int(row[0]), int(row[1]), float(row[2]))
    finally:
        engine.dispose()


def load(app: Any, fleet: Fleet, partitioned: bool = False, bulk: bool = False) -> str:
    """Store the fleet's alerts as the coordinator does, acknowledge some as an analyst does; an API key. With
    `partitioned` (PostgreSQL), the fresh database's alerts are partitioned by day first (store.partitions, as
    `fedsentry db partition-alerts` does). With `bulk` (PostgreSQL), the same alerts, acknowledged as they are
    made, are loaded by store.bulk (COPY, the roll-ups filled once after) in one transaction instead."""
    from sqlalchemy import text

    from api.security import create_key
    from store import bulk as bulk_load
    from store import partitions
    from store.alerts import alert_row, store_alerts
    from store.db import utcnow
    from store.triage import MAX_BULK, acknowledge

    t0 = time.perf_counter()
    engine = app.state.sessions.kw["bind"]
    with engine.begin() as c:  # and the day partitions the coordinator's upkeep made over the month
        if partitioned:
            partitions.convert(c, utcnow())
            partitions.make_days(c, datetime.fromtimestamp(fleet.end - fleet.span, timezone.utc).date(),
                                 datetime.fromtimestamp(fleet.end, timezone.utc).date())

    def row(device: str, m: dict[str, Any]) -> dict[str, Any]:
        return alert_row(device, "bench", 1, m, datetime.fromtimestamp(m["ts"] + 0.5, timezone.utc)
                         .replace(tzinfo=None))

    if bulk:
        with app.state.sessions.begin() as s:
            at, done = utcnow(), [0]  # acknowledged alerts so far, in the stream's order (their note: ack_note)

            def rows(chunk: list[tuple[str, dict[str, Any], bool]]) -> list[dict[str, Any]]:
                out = [row(d, m) for d, m, _ in chunk]
                for r, (_, _, acked) in zip(out, chunk, strict=True):
                    if acked:
                        r.update(acknowledged=True, acknowledged_at=at, acknowledged_by=ACKED_BY,
                                 ack_note=ack_note(done[0] - done[0] % MAX_BULK))
                        done[0] += 1
                return out

            bulk_load.load(s, map(rows, fleet.chunks(CHUNK)))
            key = create_key(s, "viewer")
    else:
        ids: list[str] = []
        for chunk in fleet.chunks(CHUNK):
            with app.state.sessions.begin() as s:
                store_alerts(s, [row(d, m) for d, m, _ in chunk])
            ids += [m["id"] for _, m, acked in chunk if acked]
        with app.state.sessions.begin() as s:
            for i in range(0, len(ids), MAX_BULK):
                acknowledge(s, ACKED_BY, ack_note(i), ids=ids[i:i + MAX_BULK])
            key = create_key(s, "viewer")
    with engine.begin() as c:  # for --reuse
        c.execute(text(f"CREATE TABLE {FLEET_TABLE} (alerts integer, devices integer, end_unix float)"))
        c.execute(text(f"INSERT INTO {FLEET_TABLE} VALUES (:a, :d, :e)"),
                  {"a": fleet.size, "d": len(fleet.devices), "e": fleet.end})
    if engine.dialect.name == "postgresql":  # what autovacuum does within a minute of the load (if it is on)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.execute(text("VACUUM ANALYZE alerts"))
            c.execute(text("VACUUM ANALYZE alert_tallies"))
            c.execute(text("VACUUM ANALYZE alert_bands"))
    print(f"stored {fleet.size:,} alerts in {time.perf_counter() - t0:.1f} s{' (bulk)' if bulk else ''}; "
          f"this process's peak resident memory {peak_rss_mib():.0f} MiB", file=sys.stderr)
    return key


def ack_note(offset: int) -> str | None:
    """The note of the acknowledgements sent from the `offset`-th acknowledged alert on (MAX_BULK at a time)."""
    return "reviewed" if offset % 3 else None


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM, Linux; 0 elsewhere)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")), 0.0)


def measure(url: str, fleet: Fleet, repeat: int, partitioned: bool = False, stored: bool = False,
            bulk: bool = False) -> dict[str, dict[str, Any]]:
    """Fill the database with the fleet's alerts (`stored`: there already) and time the requests."""
    from fastapi.testclient import TestClient

    from api.app import create_app
    from api.security import create_key
    from api.settings import Settings

    app = create_app(Settings(db_url=url))
    try:
        if stored:
            with app.state.sessions.begin() as s:
                key = create_key(s, "viewer")
        else:
            key = load(app, fleet, partitioned, bulk)
        client = TestClient(app, headers={"Authorization": f"Bearer {key}"})
        return Requests(client, fleet, repeat).run()
    finally:
        app.state.sessions.kw["bind"].dispose()


class Requests:
    def __init__(self, client: Any, fleet: Fleet, repeat: int):
        self.client, self.fleet, self.repeat = client, fleet, repeat
        self.now = datetime.fromtimestamp(fleet.end + 60, timezone.utc).replace(tzinfo=None)
        self.results: dict[str, dict[str, Any]] = {}

    def get(self, path: str, params: dict[str, Any]) -> tuple[float, Any]:
        t0 = time.perf_counter()
        r = self.client.get(path, params=params)
        elapsed = time.perf_counter() - t0
        assert r.status_code == 200, (path, params, r.status_code, r.text[:300])
        return elapsed, r

    def record(self, name: str, times: list[float], timed: str) -> None:
        self.results[name] = {"timed": timed, "requests": len(times), "median_ms": 1000 * statistics.median(times),
                              "max_ms": 1000 * max(times)}
        print(f"  {name}: {self.results[name]['median_ms']:.1f} ms median, {self.results[name]['max_ms']:.1f} "
              "worst", file=sys.stderr)

    def pages(self, name: str, params: dict[str, Any], check: Any = None) -> None:
        """Ten consecutive pages (or until the last), each following the previous one's cursor."""
        times, cursor = [], None
        for _ in range(10):
            t, r = self.get("/api/v1/anomalies", {**params, **({"cursor": cursor} if cursor else {})})
            times.append(t)
            page = r.json()
            if check:
                assert all(check(a) for a in page["items"]), name
            cursor = page["next_cursor"]
            if not cursor:
                break
        self.record(name, times, f"{len(times)} page{'s' if len(times) > 1 else ''}")

    def same(self, name: str, path: str, params: dict[str, Any]) -> Any:
        """The same request `repeat` times; returns the last answer."""
        times, r = [], None
        for _ in range(self.repeat):
            t, r = self.get(path, params)
            times.append(t)
        self.record(name, times, f"{self.repeat}×")
        return r

    def incident_pages(self, params: dict[str, Any]) -> list[str | None]:
        """The cursor of every page of incidents (untimed walk); checks that every incident is on one."""
        cursors: list[str | None] = [None]
        seen: set[str] = set()
        while True:
            _, r = self.get("/api/v1/incidents", {**params, **({"cursor": cursors[-1]} if cursors[-1] else {})})
            page = r.json()
            seen.update(i["id"] for i in page["items"])
            if not page["next_cursor"]:
                break
            cursors.append(page["next_cursor"])
        expected = self.fleet.open_incidents if params.get("acknowledged") is False else self.fleet.incidents
        assert len(seen) == expected, (params, len(seen), expected)
        return cursors

    def run(self) -> dict[str, dict[str, Any]]:
        f, now = self.fleet, self.now
        one = f.noisiest
        half, rare = THRESHOLD + SCORE_MEAN * 0.6931, THRESHOLD + SCORE_MEAN * 4.6052
        few = sum(d.startswith("gw-") for d in f.devices)
        many = sum(d.startswith("cam-") for d in f.devices)
        # anomaly pages
        self.pages("newest 50, no filter", {"limit": 50})
        self.pages(f"one device ({one}), score >= {half:.2f} (half)", {"device": one, "min_score": half, "limit": 50},
                   lambda a: a["device_id"] == one and a["score"] >= half)
        self.pages("unacknowledged, last 24 h", {"acknowledged": False, "since": (now - timedelta(days=1)).isoformat(),
                                                 "limit": 100}, lambda a: not a["acknowledged"])
        self.pages(f"score >= {rare:.2f} (1 %)", {"min_score": rare, "limit": 50}, lambda a: a["score"] >= rare)
        self.pages(f"device_prefix gw- ({few} of {len(f.devices)} devices)", {"device_prefix": "gw-", "limit": 50},
                   lambda a: a["device_id"].startswith("gw-"))
        self.pages(f"device_prefix cam- ({many} of {len(f.devices)} devices)", {"device_prefix": "cam-", "limit": 50},
                   lambda a: a["device_id"].startswith("cam-"))
        # counts: the dashboard's default period, and one holding every alert (the dashboard always sends since)
        day = {"since": (now - timedelta(days=1)).isoformat()}
        self.same("counts, last 24 h", "/api/v1/anomalies/counts", day)
        everything = {"since": (now - SPAN - timedelta(days=1)).isoformat()}
        c = self.same("counts, all (31 days)", "/api/v1/anomalies/counts", everything).json()
        got = (c["alerts"], c["records"], c["incidents"], c["devices"])
        assert got == (f.size, f.records, f.incidents, f.active_devices), got
        self.same("counts, all, device_prefix cam-", "/api/v1/anomalies/counts",
                  {**everything, "device_prefix": "cam-"})
        self.same(f"counts, all, score >= {half:.2f}", "/api/v1/anomalies/counts", {**everything, "min_score": half})
        self.same(f"counts, all, score >= {rare:.2f}", "/api/v1/anomalies/counts", {**everything, "min_score": rare})
        # incidents: newest page, and one about 80 % of the way down
        incident_filters: tuple[tuple[str, dict[str, Any]], ...] = (("", {}),
                                                                   (", acknowledged=false", {"acknowledged": False}))
        for label, params in incident_filters:
            cursors = self.incident_pages({**params, "limit": 50})
            self.same(f"incidents{label}, first page", "/api/v1/incidents", {**params, "limit": 50})
            deep = int(len(cursors) * 0.8)
            if deep:
                self.same(f"incidents{label}, page {deep + 1} of {len(cursors)}", "/api/v1/incidents",
                          {**params, "limit": 50, "cursor": cursors[deep]})
        # charts as the dashboard shows them (last 24 h) and over every alert
        for label, period in (("last 24 h", day), ("all (31 days)", everything)):
            self.same(f"chart alerts-over-time, {label}", "/charts/alerts-over-time.svg", period)
            self.same(f"chart alerts-per-device, {label}", "/charts/alerts-per-device.svg", period)
        for label, score in ((f"{half:.2f}", half), (f"{rare:.2f}", rare)):  # the dashboard's score field
            self.same(f"chart alerts-over-time, all, score >= {label}", "/charts/alerts-over-time.svg",
                      {**everything, "min_score": score})
            self.same(f"chart alerts-per-device, all, score >= {label}", "/charts/alerts-per-device.svg",
                      {**everything, "min_score": score})
        return self.results


def run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import ArgumentError, OperationalError

    from store.bulk import BulkError
    from store.db import is_postgresql
    from store.partitions import ShapeError

    specs = [(db, False) for db in args.db or ["sqlite"]]
    if args.postgres:
        specs.append((args.postgres, True))
    postgres = [scratch or is_postgresql(spec) for spec, scratch in specs]
    if args.partitioned and not any(postgres):
        raise UsageError("--partitioned: alerts are partitioned on PostgreSQL only (give --db or --postgres a "
                         "PostgreSQL URL)")
    if args.bulk and not all(postgres):
        raise UsageError("--bulk: COPY into PostgreSQL only; SQLite stores through the ingestion path (give every "
                         "--db a PostgreSQL URL, or leave --bulk out)")
    if args.bulk and args.partitioned:
        raise UsageError("--bulk: alerts partitioned by day are not bulk-loaded (leave out --partitioned)")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
    if args.reuse and (args.postgres or not args.db or "sqlite" in args.db):
        raise UsageError("--reuse: only a --db URL outlives a run (not sqlite, not --postgres)")
    fleet: Fleet | None = None
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    for (spec, scratch), convert in zip(specs, postgres):
        convert = convert and args.partitioned
        try:
            with database(spec, scratch) as url:
                name = url.split(":")[0].split("+")[0] + (" partitioned" if convert else "")
                name = name if name not in runs else f"{name} ({len(runs) + 1})"
                print(f"{name}:", file=sys.stderr)
                stored = stored_fleet(url) if args.reuse else None
                if stored is not None and stored[:2] != (args.alerts, args.devices):
                    raise UsageError(f"--reuse: {spec} holds {stored[0]} alerts of {stored[1]} devices, not "
                                     f"{args.alerts} of {args.devices}")
                if fleet is None or (stored is not None and fleet.end != stored[2]):
                    fleet = Fleet(args.alerts, args.devices, end=None if stored is None else stored[2])
                runs[name] = measure(url, fleet, args.repeat, convert, stored=stored is not None, bulk=args.bulk)
        except (ArgumentError, OperationalError) as e:
            raise database_error("--postgres" if scratch else "--db", e) from None
        except BulkError as e:  # (--db given a database partitioned already)
            raise UsageError(f"--bulk: {e}") from None
        except ShapeError as e:  # (--db given a database partitioned already)
            raise UsageError(f"--partitioned: {e}; --db must be an empty database") from None
    assert fleet is not None
    out = {"command": shlex.join(["fedsentry", *sys.argv[1:]]), "alerts": args.alerts, "devices": args.devices,
           "incidents": fleet.incidents, "incident_updates": fleet.updates,
           "records": fleet.records, "repeat": args.repeat, "partitioned": args.partitioned, "bulk": args.bulk,
           "databases": runs}
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    lines = table(out)
    (folder / "api-listing.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), file=sys.stderr)
    write_json(out, args.json)
    return 0


def table(out: dict[str, Any]) -> list[str]:
    """api-listing.md: one row per request, a median and worst column pair per database."""
    runs = out["databases"]
    names = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "postgresql partitioned": "PostgreSQL partitioned"}
    head = " | ".join(f"{names.get(n, n)} median | {names.get(n, n)} worst" for n in runs)
    lines = ["# Anomaly listing, counts, incidents and charts benchmark", "", f"Command: `{out['command']}`", "",
             f"{out['alerts']:,} stored alerts over {out['devices']} devices and {SPAN.days} days, "
             f"{out['incident_updates']:,} of them incident updates (count > 1) of {out['incidents']:,} incidents: "
             f"{out['records']:,} flagged records; "
             + ("made by alert_row and loaded by COPY, roll-ups filled after (store.bulk)" if out.get("bulk") else
                "stored through alert_row and store_alerts") + ", most older than a day acknowledged; "
             "PostgreSQL then vacuumed and analysed as autovacuum would (SQLite, as served, never is). "
             "Times in ms per request through the full app (auth, query, serialisation); pages follow each other's "
             "cursor, the other requests are repeated (the first, cold, counts too).", "",
             f"| request | timed | {head} |", "|---|---|" + "---:|" * 2 * len(runs)]
    first = next(iter(runs.values()))
    for q in first:
        cells = " | ".join(f"{r[q]['median_ms']:.1f} | {r[q]['max_ms']:.1f}" for r in runs.values())
        lines.append(f"| {q} | {first[q]['timed']} | {cells} |")
    return lines

"""Tables (SQLAlchemy 2.x) and the engine. The schema is created and upgraded by Alembic migrations
(store/migrations); SQLite in a file by default, PostgreSQL by URL."""

from __future__ import annotations

import io
import logging
import math
import os
import sqlite3
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    String,
    create_engine,
    event,
    false,
    text,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

DEFAULT_DB_URL = "sqlite:///fedsentry.db"
log = logging.getLogger("fedsentry.db")


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def db_url(explicit: str | None = None) -> str:
    """--db, else $FEDSENTRY_DB_URL, else sqlite:///fedsentry.db in the working directory."""
    url = explicit or os.environ.get("FEDSENTRY_DB_URL") or DEFAULT_DB_URL
    for alias in ("postgresql://", "postgres://"):  # the driver this project installs (psycopg 3)
        if url.startswith(alias):
            return "postgresql+psycopg://" + url[len(alias):]
    return url


def backend(url: str | None = None) -> str:
    """The database a URL names ("sqlite", "postgresql", ...), read as `make_engine` reads it, without connecting or
    making a file; sqlalchemy's ArgumentError when it is no database URL."""
    return make_url(db_url(url)).get_backend_name()


def is_postgresql(url: str) -> bool:
    """Whether a URL names a PostgreSQL database (False for anything else, or no database URL)."""
    from sqlalchemy.exc import ArgumentError

    try:
        return backend(url) == "postgresql"
    except ArgumentError:
        return False


def pack(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    named: dict[str, Any] = dict(arrays)
    np.savez(buf, **named)
    return buf.getvalue()


def unpack(blob: bytes | None) -> dict[str, np.ndarray]:
    if not blob:
        return {}
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


class Base(DeclarativeBase):
    type_annotation_map: ClassVar = {dict[str, Any]: JSON, list[Any]: JSON}


class Device(Base):
    __tablename__ = "devices"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    online: Mapped[bool] = mapped_column(Boolean, default=False)
    first_seen: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    rounds: Mapped[int] = mapped_column(Integer, default=0)
    alerts: Mapped[int] = mapped_column(BigInteger, default=0)  # flagged records its alerts stand for (64-bit)
    # the device's model: {job, version, status: loaded | scoring | refused, reason} from its status messages
    model_status: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # what its status says it can do: {jobs, abilities, features} (coordinator.status; none yet: legacy defaults)
    capabilities: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class Job(Base):
    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    type: Mapped[str] = mapped_column(String(16))
    algorithm: Mapped[str] = mapped_column(String(32))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending running finished failed cancelled
    phase: Mapped[str] = mapped_column(String(64), default="waiting")
    current_round: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(String(500), nullable=True)
    leader: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    created: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated: Mapped[datetime] = mapped_column(DateTime, default=utcnow, onupdate=utcnow)


class JobState(Base):
    """The resumable state of a job as of its last completed round."""

    __tablename__ = "job_state"
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    round: Mapped[int] = mapped_column(Integer)
    phase: Mapped[str] = mapped_column(String(64))
    participants: Mapped[list[Any]] = mapped_column(JSON)  # written when it changes (the statistics phase)
    counts: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)  # each participant's records, likewise
    info: Mapped[dict[str, Any]] = mapped_column(JSON)  # rng state, preprocessing, ...
    server: Mapped[bytes] = mapped_column(LargeBinary)
    broadcast: Mapped[bytes] = mapped_column(LargeBinary)


class ServerChunk(Base):
    """Rows of a server array that grows with the federation (`FederatedAlgorithm.row_tables`), in fixed
    chunks: a round rewrites only the chunks holding rows it changed (raw little-endian bytes)."""

    __tablename__ = "server_chunks"
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    array: Mapped[str] = mapped_column(String(32), primary_key=True)
    chunk: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class RoundUpload(Base):
    """An accepted answer to the round a job is in, stored before the device's message is acknowledged: a
    coordinator that takes the job over mid-round (issue 27) closes the round with it instead of asking again.
    A round's rows are deleted in the transaction that stores the closed round."""

    __tablename__ = "round_uploads"
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    device: Mapped[str] = mapped_column(String(64), primary_key=True)
    phase: Mapped[str] = mapped_column(String(64))
    payload: Mapped[bytes] = mapped_column(LargeBinary)  # the message as the device sent it


class Round(Base):
    __tablename__ = "rounds"
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    phase: Mapped[str] = mapped_column(String(64))
    sampled: Mapped[list[Any]] = mapped_column(JSON)
    answered: Mapped[list[Any]] = mapped_column(JSON)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    seconds: Mapped[float] = mapped_column(Float)
    completed: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class ModelVersion(Base):
    __tablename__ = "model_versions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(16))
    round: Mapped[int] = mapped_column(Integer)
    arrays: Mapped[bytes] = mapped_column(LargeBinary)  # Z, mean, scale, log_mask
    info: Mapped[dict[str, Any]] = mapped_column(JSON)  # features, threshold, metrics
    promoted: Mapped[bool] = mapped_column(Boolean, default=False)
    published: Mapped[bool] = mapped_column(Boolean, default=False, server_default="1")  # the coordinator sent it
    created: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class AlertFields:
    """The columns of a stored alert (the alerts table, and suppressed_alerts for those a suppression rule holds)."""

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # chosen by the agent: redelivery-safe
    device_id: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(String(64))
    model_version: Mapped[int] = mapped_column(Integer)
    ts: Mapped[datetime] = mapped_column(DateTime)
    received: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    score: Mapped[float] = mapped_column(Float)
    threshold: Mapped[float] = mapped_column(Float)
    count: Mapped[int] = mapped_column(Integer, default=1)
    explanation: Mapped[list[Any]] = mapped_column(JSON)
    # the record's connection as the agent's source knows it (Zeek: uid, ts, id.orig_h/p, id.resp_h/p, proto,
    # service; a CSV: its line number), so that an analyst can find it
    flow: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # an incident update (rate limiting): {key, window, first, last, samples}; `count` is its new records
    incident: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    acknowledged: Mapped[bool] = mapped_column(Boolean, default=False)
    acknowledged_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    acknowledged_by: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the API key's name or id
    ack_note: Mapped[str | None] = mapped_column(String(500), nullable=True)
    # the incident an incident update belongs to (store.alerts.incident_id), so that the database groups them
    incident_id: Mapped[str | None] = mapped_column(String(24), nullable=True)


class Alert(AlertFields, Base):
    __tablename__ = "alerts"
    # the counts, charts and incidents add up columns over a time range, per device, per incident or above a score:
    # these four indexes hold the columns they read, so that no row is (ts first: the newest pages are read through
    # it too; migration 0017: the score index holds its columns as PostgreSQL's INCLUDE, as trailing ones on SQLite,
    # and the incident index incident updates alone)
    __table_args__ = (Index("ix_alerts_device_ts_count", "device_id", "ts", "count"),
                      Index("ix_alerts_ts_tally", "ts", "device_id", "incident_id", "count", "acknowledged",
                            "score"),
                      Index("ix_alerts_incident_tally", "incident_id", "device_id", "ts", "count", "score",
                            "acknowledged", "job_id", postgresql_where=text("incident_id IS NOT NULL"),
                            sqlite_where=text("incident_id IS NOT NULL")),
                      Index("ix_alerts_score_tally", "score", postgresql_include=["ts", "device_id", "incident_id",
                                                                                  "count", "acknowledged", "job_id"]),
                      Index("ix_alerts_job_ts", "job_id", "ts"), Index("ix_alerts_received", "received"))


class AlertTally(Base):
    """The alerts table added up per hour (span 3600) and per day (span 86400), by device, job, incident ('' for an
    alert that is no incident update) and acknowledgement: `alerts` stored, `records` flagged records they hold.
    Kept by the database itself (triggers of migration 0013, in the transaction that changes alerts: insert,
    acknowledgement, suppression, retention, deletion), so that a month's counts and charts read whole days and
    hours here and only the partial hours at the window's ends from alerts (store.rollup). `start`: Unix seconds."""

    __tablename__ = "alert_tallies"
    span: Mapped[int] = mapped_column(Integer)
    start: Mapped[int] = mapped_column(BigInteger)
    device_id: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(String(64))
    incident_id: Mapped[str] = mapped_column(String(24))
    acknowledged: Mapped[bool] = mapped_column(Boolean)
    alerts: Mapped[int] = mapped_column(BigInteger, default=0)
    records: Mapped[int] = mapped_column(BigInteger, default=0)
    # the highest score of its alerts (migration 0021; NULL: none), so that a count under a minimum score finds the
    # devices and incidents with an alert at or above it here
    top: Mapped[float | None] = mapped_column(Float, nullable=True)
    __table_args__ = (PrimaryKeyConstraint("span", "start", "device_id", "job_id", "incident_id", "acknowledged",
                                           postgresql_include=["alerts", "records", "top"]),
                      {"sqlite_with_rowid": False})


class AlertBand(Base):
    """The alerts table added up per hour and per day by job, acknowledgement and score band (store.rollup.band_sql):
    a count or a series under a minimum score adds up the bands above the score's own here, and reads that band's
    alerts alone (migration 0021, kept by the tally triggers). No device nor incident: few rows a day."""

    __tablename__ = "alert_bands"
    span: Mapped[int] = mapped_column(Integer)
    start: Mapped[int] = mapped_column(BigInteger)
    job_id: Mapped[str] = mapped_column(String(64))
    acknowledged: Mapped[bool] = mapped_column(Boolean)
    band: Mapped[int] = mapped_column(Integer)
    alerts: Mapped[int] = mapped_column(BigInteger, default=0)
    records: Mapped[int] = mapped_column(BigInteger, default=0)
    __table_args__ = (PrimaryKeyConstraint("span", "start", "job_id", "acknowledged", "band",
                                           postgresql_include=["alerts", "records"]), {"sqlite_with_rowid": False})


class SuppressedAlert(AlertFields, Base):
    """An alert a suppression rule holds (store.suppress): stored whole, out of every listing, count and
    forwarding of the alerts table, found through its rule."""

    __tablename__ = "suppressed_alerts"
    suppression_id: Mapped[str] = mapped_column(String(32))
    suppressed_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    __table_args__ = (Index("ix_suppressed_rule_ts", "suppression_id", "ts", "id"),)


class Suppression(Base):
    """An analyst's rule (store.suppress): the alerts and flagged records it matches are stored, marked with it and
    kept out of the listings and forwarding. It lives in the database, whatever model is promoted; removing it is
    recorded, never deleted (the audit of who held what back, and why)."""

    __tablename__ = "suppressions"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    reason: Mapped[str] = mapped_column(String(500))
    created: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    created_by: Mapped[str] = mapped_column(String(64))
    expires: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    removed: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    removed_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # what it matches (every given field must hold): JSON of store.suppress.Match
    match: Mapped[dict[str, Any]] = mapped_column(JSON)
    retroactive: Mapped[int] = mapped_column(BigInteger, default=0)  # alerts and records it marked when created
    held: Mapped[int] = mapped_column(BigInteger, default=0)  # alerts and records it held at ingestion since
    # a retroactive rule's application (store.suppress.apply_retroactive): "" (none), "running" or "done", and
    # where it is ("alerts:<id>", "records:<id>")
    retro_state: Mapped[str] = mapped_column(String(16), default="", server_default="")
    retro_cursor: Mapped[str | None] = mapped_column(String(100), nullable=True)


class FlaggedRecord(Base):
    """A flagged record past its device's alert budget, kept whole (issue 24): the budget limits notifications and
    forwarding, never storage. It arrives in an incident update (the alert `alert_id`, whose `count` includes it)
    and is found by its incident, device, time, Zeek uid or addresses (store.records)."""

    __tablename__ = "flagged_records"
    id: Mapped[str] = mapped_column(String(80), primary_key=True)  # the update's id and the record's position
    alert_id: Mapped[str] = mapped_column(String(64))
    device_id: Mapped[str] = mapped_column(String(64))
    incident_id: Mapped[str | None] = mapped_column(String(24), nullable=True)
    ts: Mapped[datetime] = mapped_column(DateTime)
    score: Mapped[float] = mapped_column(Float)
    threshold: Mapped[float] = mapped_column(Float)
    explanation: Mapped[list[Any]] = mapped_column(JSON)
    flow: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # the flow's Zeek uid and addresses as columns, so that an analyst's search is an index lookup
    uid: Mapped[str | None] = mapped_column(String(64), nullable=True)
    orig_h: Mapped[str | None] = mapped_column(String(64), nullable=True)
    resp_h: Mapped[str | None] = mapped_column(String(64), nullable=True)
    suppression_id: Mapped[str | None] = mapped_column(String(32), nullable=True)  # the rule holding it back
    __table_args__ = (Index("ix_flagged_incident_ts", "incident_id", "ts", "id"),
                      Index("ix_flagged_device_ts", "device_id", "ts", "id"),
                      Index("ix_flagged_ts", "ts", "id"), Index("ix_flagged_uid", "uid"),
                      Index("ix_flagged_orig_h", "orig_h"), Index("ix_flagged_resp_h", "resp_h"))


class Feedback(Base):
    """An analyst's "false positive" on a device's alert, flagged record or incident (store.feedback): the scores of
    the records it marks (`entries`, [job, version, score] each) go to the device, which raises its threshold so
    that they are not flagged again, within a cap, and reports the effect (`effect`). Undoing it is recorded, never
    deleted (the audit of who marked what, when and why)."""

    __tablename__ = "feedback"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    device_id: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(16))  # alert | record | incident
    target_id: Mapped[str] = mapped_column(String(80))
    reason: Mapped[str] = mapped_column(String(500))
    created: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    created_by: Mapped[str] = mapped_column(String(64))
    removed: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    removed_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    records: Mapped[int] = mapped_column(Integer)  # flagged records the action marked
    entries: Mapped[list[Any]] = mapped_column(JSON)  # [job, version, score] of those sent (the highest scores)
    published: Mapped[bool] = mapped_column(Boolean, default=False)  # the device's feedback sent since a change
    # the device's report: {model, before, after, cap, capped, records, stale, trained, training, reported}
    effect: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    __table_args__ = (Index("ix_feedback_device", "device_id", "created"),
                      Index("ix_feedback_target", "target", "target_id"))


class ForwardDestination(Base):
    """A place alerts are forwarded to (a webhook, a syslog server; coordinator/forward.py), keyed by the
    SHA-256 of its address. `cursor`: the newest `received` time delivered; `since`: when it was first
    configured (older alerts are not sent to it)."""

    __tablename__ = "forward_destinations"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    label: Mapped[str] = mapped_column(String(300))  # the address without credentials
    since: Mapped[datetime] = mapped_column(DateTime)
    cursor: Mapped[datetime] = mapped_column(DateTime)
    delivered: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # alerts marked failed
    last_error: Mapped[str | None] = mapped_column(String(300), nullable=True)
    updated: Mapped[datetime] = mapped_column(DateTime, default=utcnow, onupdate=utcnow)


class ForwardDelivery(Base):
    """An alert delivered to a destination; kept for a window behind the destination's cursor, so that an
    alert committed late (out of `received` order) is still sent, and none twice."""

    __tablename__ = "forward_deliveries"
    destination_id: Mapped[str] = mapped_column(ForeignKey("forward_destinations.id", ondelete="CASCADE"),
                                                primary_key=True)
    alert_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    received: Mapped[datetime] = mapped_column(DateTime)
    # refused by the destination or stuck while later ones were delivered: marked failed, never sent again
    failed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    __table_args__ = (Index("ix_forward_deliveries_received", "destination_id", "received"),)


class Rejection(Base):
    __tablename__ = "rejections"
    reason: Mapped[str] = mapped_column(String(32), primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)


class Secret(Base):
    """Server secrets generated once (the session-cookie signing key)."""

    __tablename__ = "secrets"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[str] = mapped_column(String(128))


class ApiKey(Base):
    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    hash: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    name: Mapped[str | None] = mapped_column(String(64), nullable=True)  # who holds it: recorded on acknowledgements
    created: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)


class DashboardSession(Base):
    """A signed-in dashboard: the cookie carries a random token, only its SHA-256 is stored. Signing out
    deletes the row; a revoked key's sessions stop working at once (checked on every request)."""

    __tablename__ = "dashboard_sessions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 hex of the cookie's token
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    created: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    expires: Mapped[datetime] = mapped_column(DateTime)


def private_sqlite_file(path: str | os.PathLike) -> None:
    """Create the SQLite file readable by its owner only (it holds the cookie-signing key and API key
    hashes) before SQLite does (with 0644 under the usual umask); SQLite gives its -wal and -shm files the
    database's mode. Existing files readable by others are narrowed to 0600, with a warning."""
    path = Path(path)
    try:  # never open an existing file: closing it would drop this process's SQLite locks on it (POSIX
        # locks are per process), and another process would then delete the WAL our connections still use
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))
    except FileExistsError:
        pass
    except OSError:  # no such folder, no permission: SQLite says so when it connects
        return
    for f in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            mode = stat.S_IMODE(f.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            log.warning("database file %s was readable by others (mode %o): set to 0600", f, mode)
            f.chmod(0o600)


def make_engine(url: str | None = None) -> Engine:
    url = db_url(url)
    kwargs: dict[str, Any] = {"future": True}
    if url.startswith("sqlite"):
        database = make_url(url).database
        if database and database != ":memory:" and not database.startswith("file:"):
            private_sqlite_file(database)
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
    engine = create_engine(url, pool_pre_ping=True, **kwargs)
    if url.startswith("sqlite"):
        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            # LIKE as PostgreSQL's: case-sensitive (a device prefix `cam` must not match `Cam-1` on SQLite only)
            cur.execute("PRAGMA case_sensitive_like=ON")
            cur.close()
            sqlite_math(dbapi_conn)
    return engine


def sqlite_math(dbapi_conn: Any, force: bool = False) -> None:
    """Give a SQLite connection the math functions the score bands use (store.rollup.band_sql: ln, sign, floor)
    where its library was built without them (SQLite before 3.35, or built without SQLITE_ENABLE_MATH_FUNCTIONS):
    Python's, with SQLite's answers (NULL where SQLite's are). `force` installs them anyway (the test of their
    equality)."""
    if not force:
        try:
            dbapi_conn.execute("SELECT ln(2), sign(-1), floor(1.5)").fetchone()
            return
        except sqlite3.OperationalError:
            pass

    def ln(x: Any) -> float | None:
        return math.log(x) if isinstance(x, (int, float)) and x > 0 else None

    def sign(x: Any) -> int | None:
        return None if not isinstance(x, (int, float)) or math.isnan(x) else (x > 0) - (x < 0)

    def floor(x: Any) -> float | int | None:
        if isinstance(x, int) or not isinstance(x, float):
            return x if isinstance(x, int) else None
        return float(math.floor(x)) if math.isfinite(x) else x

    for name, fn in (("ln", ln), ("sign", sign), ("floor", floor)):
        dbapi_conn.create_function(name, 1, fn, deterministic=True)


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest migration."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with engine.begin() as conn:
        # several processes may start at once (coordinator, API workers, CLI): one migrates at a time
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(7270417)"))
        elif conn.dialect.name == "sqlite":
            conn.execute(text("CREATE TABLE IF NOT EXISTS fedsentry_migration_lock (n INTEGER)"))
            conn.execute(text("DELETE FROM fedsentry_migration_lock"))  # holds the write lock until commit
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def session_factory(engine: Engine) -> sessionmaker:
    return sessionmaker(engine, expire_on_commit=False)

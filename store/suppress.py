"""Suppression rules: an analyst's "this traffic is known, hold its alerts back" (issue 24, point 2).

A rule matches a flagged record when every condition it gives holds (`Match`): the device (an id, or a prefix
ending in `*`), an address of either end of the flow within a network (CIDR), the responder's port within a
range, the service, and an explanation value of a feature within a range. Alerts it matches are stored whole in
`suppressed_alerts`, marked with the rule, and are in no listing, count, chart or forwarding of the alerts table;
flagged records it matches are stored marked (`suppression_id`) and hidden from the records listing unless asked
for. An incident update is held back when every record it carries is (one without records: when its own flow
is). A rule can expire; removing it is recorded (who, when), never deleted; created with `retroactive`, it also
moves the matching stored alerts of the last RETRO_DAYS days and marks their records, and says how many.

A retroactive rule is applied after it is made, RETRO_BATCH rows a transaction (`apply_retroactive`), never in
the request that makes it: a month of alerts took minutes in one transaction, which held the roll-up rows that
ingestion writes too. The rule's `retro_state` says "running" until it is done, `retro_cursor` where it is (so
that a restarted server goes on where it stopped: `resume_retroactive`), and `retroactive` counts what it moved
so far. Every step counts only rows it changed, so two processes applying one rule count each row once.
"""

from __future__ import annotations

import ipaddress
import math
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from store.db import Alert, FlaggedRecord, SuppressedAlert, Suppression, utcnow
from store.records import insert_for, store_records

#: how far back a retroactive rule reaches
RETRO_DAYS = 30
#: rows read per pass when a rule is applied retroactively
RETRO_BATCH = 1000
_ALERT_COLUMNS = [c.key for c in Alert.__table__.columns]


@dataclass(frozen=True)
class Match:
    device: str | None = None  # an id, or a prefix ending in '*'
    cidr: str | None = None  # either end of the flow
    port_min: int | None = None  # the responder's port (id.resp_p)
    port_max: int | None = None
    service: str | None = None
    feature: str | None = None  # an explanation value of this feature within [value_min, value_max]
    value_min: float | None = None
    value_max: float | None = None

    @classmethod
    def parse(cls, fields: dict[str, Any]) -> Match:
        """A rule's conditions, checked; ValueError names the field at fault."""
        m = cls(**{k: v for k, v in fields.items() if v is not None})
        if all(v is None for v in asdict(m).values()):
            raise ValueError("match: give at least one condition (device, cidr, port, service, feature)")
        if m.device is not None and not (0 < len(m.device) <= 64 and m.device.isprintable()):
            raise ValueError("device: an id (or a prefix ending in '*') of at most 64 printable characters")
        if m.cidr is not None:
            try:
                ipaddress.ip_network(m.cidr, strict=False)
            except ValueError as e:
                raise ValueError(f"cidr: {e}") from None
        for name in ("port_min", "port_max"):
            v = getattr(m, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 65535):
                raise ValueError(f"{name}: a port 0-65535")
        if m.port_min is not None and m.port_max is not None and m.port_min > m.port_max:
            raise ValueError("port_min: must not exceed port_max")
        if m.service is not None and not (0 < len(m.service) <= 64 and m.service.isprintable()):
            raise ValueError("service: printable text of at most 64 characters")
        if (m.value_min is not None or m.value_max is not None) and m.feature is None:
            raise ValueError("feature: a value range needs the feature it applies to")
        for name in ("value_min", "value_max"):
            v = getattr(m, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)):
                raise ValueError(f"{name}: a finite number")
        if m.feature is not None and not (0 < len(m.feature) <= 128 and m.feature.isprintable()):
            raise ValueError("feature: a feature name of at most 128 printable characters")
        return m

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def matches(self, device: str, flow: dict[str, Any] | None, explanation: list[Any] | None) -> bool:
        if self.device is not None:
            if self.device.endswith("*"):
                if not device.startswith(self.device[:-1]):
                    return False
            elif device != self.device:
                return False
        flow = flow or {}
        if self.cidr is not None:
            net = ipaddress.ip_network(self.cidr, strict=False)
            if not any(_in(flow.get(k), net) for k in ("id.orig_h", "id.resp_h")):
                return False
        if self.port_min is not None or self.port_max is not None:
            port = _int(flow.get("id.resp_p"))
            lo = self.port_min if self.port_min is not None else 0
            hi = self.port_max if self.port_max is not None else 65535
            if port is None or not lo <= port <= hi:
                return False
        if self.service is not None and str(flow.get("service", "")).lower() != self.service.lower():
            return False
        if self.feature is not None:
            lo_v = self.value_min if self.value_min is not None else -math.inf
            hi_v = self.value_max if self.value_max is not None else math.inf
            values = [e.get("value") for e in (explanation or []) if isinstance(e, dict)
                      and e.get("feature") == self.feature]
            if not any(isinstance(v, int | float) and lo_v <= v <= hi_v for v in values):
                return False
        return True


def _in(value: Any, net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return ipaddress.ip_address(str(value)) in net
    except ValueError:
        return False


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


@dataclass
class Rules:
    """The active rules, reloaded from the database every `refresh` seconds (a rule added through the API or the
    CLI applies within that)."""

    refresh: float = 2.0
    rules: list[tuple[str, Match]] | None = None
    loaded: float = -math.inf

    def active(self, session: Session) -> list[tuple[str, Match]]:
        if self.rules is None or time.monotonic() - self.loaded >= self.refresh:
            now = utcnow()
            rows = session.scalars(select(Suppression).where(Suppression.removed.is_(None)))
            self.rules = [(r.id, Match(**r.match)) for r in rows if state(r, now) == "active"]
            self.loaded = time.monotonic()
        return self.rules

    @staticmethod
    def first(rules: list[tuple[str, Match]], device: str, flow: Any, explanation: Any) -> str | None:
        return next((rid for rid, m in rules if m.matches(device, flow if isinstance(flow, dict) else None,
                                                         explanation if isinstance(explanation, list) else None)),
                    None)

    def hold(self, session: Session, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(the alerts to store, the alerts held back with their rule), their records marked in place."""
        rules = self.active(session)
        if not rules:
            return rows, []
        kept: list[dict[str, Any]] = []
        held: list[dict[str, Any]] = []
        for r in rows:
            records = r.get("records") or []
            for rec in records:
                rec["suppression_id"] = self.first(rules, r["device_id"], rec["flow"], rec["explanation"])
            if records:  # an incident update: held when every record it carries is
                rule = records[0]["suppression_id"] if all(x["suppression_id"] for x in records) else None
            else:
                rule = self.first(rules, r["device_id"], r["flow"], r["explanation"])
            if rule is None:
                kept.append(r)
            else:
                held.append({**r, "suppression_id": rule})
        return kept, held


def store_held(session: Session, rows: list[dict[str, Any]]) -> None:
    """Store alerts a rule holds back (a redelivered one once) and count them on their rules."""
    if not rows:
        return
    new = _insert_held(session, rows)
    stored = {i for i, _ in new}
    store_records(session, [rec for r in rows if r["id"] in stored for rec in r.get("records", ())])
    counts: dict[str, int] = {}
    for _, rule in new:
        counts[rule] = counts.get(rule, 0) + 1
    for rule, n in counts.items():
        session.execute(update(Suppression).where(Suppression.id == rule).values(held=Suppression.held + n))


def create(session: Session, match: Match, reason: str, by: str, expires: datetime | None = None,
           retroactive: bool = False) -> Suppression:
    """A new rule; `retroactive`: marked to be applied to the stored alerts and records of the last RETRO_DAYS
    days (`apply_retroactive`, after the caller commits)."""
    if not (reason and reason.strip() and len(reason) <= 500):
        raise ValueError("reason: say why (at most 500 characters)")
    if expires is not None and expires <= utcnow():
        raise ValueError("expires: must be in the future")
    rule = Suppression(id=uuid.uuid4().hex, reason=reason.strip(), created=utcnow(), created_by=by[:64],
                       expires=expires, match=match.to_json(), retroactive=0, held=0,
                       retro_state=RUNNING if retroactive else "", retro_cursor=f"{ALERTS}:" if retroactive else None)
    session.add(rule)
    session.flush()
    return rule


RUNNING, DONE = "running", "done"
ALERTS, RECORDS = "alerts", "records"


def apply_retroactive(sessions: sessionmaker[Session], rule_id: str) -> int:
    """Apply a retroactive rule to what is stored, a batch a transaction, until it is done (or removed); how many
    alerts and records it moved or marked in all."""
    while True:
        with sessions.begin() as session:
            rule = session.get(Suppression, rule_id, with_for_update=session.get_bind().dialect.name != "sqlite")
            if rule is None or rule.retro_state != RUNNING or rule.removed is not None:
                return rule.retroactive if rule is not None else 0
            step(session, rule)


def resume_retroactive(sessions: sessionmaker[Session]) -> int:
    """Finish the retroactive rules a stopped process left running; how many there were."""
    with sessions() as session:
        ids = list(session.scalars(select(Suppression.id).where(Suppression.retro_state == RUNNING,
                                                                Suppression.removed.is_(None))))
    for rule_id in ids:
        apply_retroactive(sessions, rule_id)
    return len(ids)


def step(session: Session, rule: Suppression) -> None:
    """One batch of a retroactive rule: the next RETRO_BATCH alerts (moved to suppressed_alerts) or, once they
    are done, flagged records (marked), after the rule's cursor; done when both are."""
    match, since = Match(**rule.match), rule.created - timedelta(days=RETRO_DAYS)
    phase, _, after = (rule.retro_cursor or f"{ALERTS}:").partition(":")
    if phase == ALERTS:
        q = select(Alert).where(Alert.ts >= since, Alert.id > after).order_by(Alert.id).limit(RETRO_BATCH)
        if match.device is not None and not match.device.endswith("*"):
            q = q.where(Alert.device_id == match.device)
        batch = list(session.scalars(q))
        hit = [a for a in batch if a.incident_id is None and match.matches(a.device_id, a.flow, a.explanation)]
        if hit:
            moved = _insert_held(session, [{**{k: getattr(a, k) for k in _ALERT_COLUMNS}, "suppression_id": rule.id}
                                           for a in hit])
            session.execute(delete(Alert).where(Alert.id.in_([a.id for a in hit])))
            rule.retroactive += len(moved)
        rule.retro_cursor = f"{ALERTS}:{batch[-1].id}" if batch else f"{RECORDS}:"
        return
    rq = select(FlaggedRecord).where(FlaggedRecord.ts >= since, FlaggedRecord.suppression_id.is_(None),
                                     FlaggedRecord.id > after).order_by(FlaggedRecord.id).limit(RETRO_BATCH)
    records = list(session.scalars(rq))
    ids = [r.id for r in records if match.matches(r.device_id, r.flow, r.explanation)]
    if ids:
        done = session.execute(update(FlaggedRecord).where(FlaggedRecord.id.in_(ids),
                                                           FlaggedRecord.suppression_id.is_(None))
                               .values(suppression_id=rule.id))
        rule.retroactive += int(getattr(done, "rowcount", 0) or 0)
    if records:
        rule.retro_cursor = f"{RECORDS}:{records[-1].id}"
    else:
        rule.retro_state, rule.retro_cursor = DONE, None


def _insert_held(session: Session, rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Alert rows (with their `suppression_id`) into suppressed_alerts; (id, rule) of those not there yet."""
    stmt = insert_for(session)(SuppressedAlert).on_conflict_do_nothing(index_elements=["id"]).returning(
        SuppressedAlert.id, SuppressedAlert.suppression_id)
    now = utcnow()
    return [(i, rule) for i, rule in session.execute(stmt, [
        {**{k: r[k] for k in _ALERT_COLUMNS if k in r}, "suppression_id": r["suppression_id"], "suppressed_at": now}
        for r in rows])]


def state(rule: Suppression, now: datetime) -> str:
    """"active", "removed" or "expired"."""
    if rule.removed is not None:
        return "removed"
    return "expired" if rule.expires is not None and rule.expires <= now else "active"


def remove(session: Session, rule_id: str, by: str) -> Suppression | None:
    """Stop a rule (recorded with who and when); what it held stays held. None: no such rule."""
    rule = session.get(Suppression, rule_id)
    if rule is not None and rule.removed is None:
        rule.removed, rule.removed_by = utcnow(), by[:64]
    return rule

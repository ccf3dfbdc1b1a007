"""Alerts as Elastic Common Schema (ECS 8.11) documents, for Elasticsearch, OpenSearch, Security Onion, Filebeat
and Vector: a webhook that POSTs each alert as an ECS document, and a JSON-lines file (one document a line) that
a shipper tails.

The mapping (`ecs_document`): the alert's time is `@timestamp`; `event` says what it is (kind alert, category
network, the alert id as `event.id`, `event.created` when the coordinator stored it, an incident's first and last
record as `event.start` and `event.end`, `event.risk_score` the score over the threshold, x100); `observer` is the
device that scored the flow; `source`, `destination` and `network` come from the flow's Zeek fields, each only
when it is what ECS says it is (an IP address, a port 0-65535, a short lower-case protocol name). Everything of
FedSentry's own is under `fedsentry.*`, and every flow field an agent sent is under `fedsentry.flow`, verbatim
as stored: a field name an agent chose can never sit beside or shadow an ECS field or the coordinator's own.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from coordinator.forward import DeliveryError, RefusedError, Webhook
from store.db import Alert
from wire.flows import ip_text

ECS_VERSION = "8.11.0"
_PROTOCOL = re.compile(r"[a-z0-9][a-z0-9_.+-]{0,31}")


def _port(value: Any) -> int | None:
    try:
        port = int(str(value))
    except ValueError:
        return None
    return port if 0 <= port <= 65535 else None


def _endpoint(flow: dict[str, Any], host: str, port: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if (ip := ip_text(flow.get(host))) is not None:
        out["ip"] = ip
    if (p := _port(flow.get(port))) is not None:
        out["port"] = p
    return out


def _protocol(value: Any) -> str | None:
    text = str(value).lower() if value is not None else ""
    return text if _PROTOCOL.fullmatch(text) else None


def _message(alert: dict[str, Any]) -> str:
    """One line an analyst reads in a list: which device, how anomalous, which features."""
    parts = []
    for e in (alert.get("explanation") or [])[:3]:
        if isinstance(e, dict) and "feature" in e:
            value = e.get("value")
            parts.append(f"{e['feature']}={value:g}" if isinstance(value, (int, float)) else str(e["feature"]))
    what = f"{int(alert.get('count') or 1)} anomalous flows" if alert.get("incident") else "anomalous flow"
    why = f"; explained by {', '.join(parts)}" if parts else ""
    return (f"FedSentry: {what} on {alert.get('device_id')}: score {float(alert.get('score') or 0):.4g} over "
            f"threshold {float(alert.get('threshold') or 0):.4g}{why}")


def ecs_document(alert: dict[str, Any]) -> dict[str, Any]:
    """The ECS document of a forwarded alert (coordinator.forward.alert_json: times already RFC 3339)."""
    raw_flow, raw_incident = alert.get("flow"), alert.get("incident")
    flow: dict[str, Any] = raw_flow if isinstance(raw_flow, dict) else {}
    incident: dict[str, Any] | None = raw_incident if isinstance(raw_incident, dict) else None
    score, threshold = alert.get("score"), alert.get("threshold")
    event: dict[str, Any] = {"kind": "alert", "category": ["network", "intrusion_detection"], "type": ["info"],
                             "module": "fedsentry", "dataset": "fedsentry.alert", "id": alert.get("id"),
                             "created": alert.get("received")}
    if isinstance(score, (int, float)) and isinstance(threshold, (int, float)) and threshold > 0:
        event["risk_score"] = round(100.0 * float(score) / float(threshold), 3)
    if incident:
        event["start"], event["end"] = incident.get("first"), incident.get("last")
    doc: dict[str, Any] = {
        "@timestamp": alert.get("ts"),
        "ecs": {"version": ECS_VERSION},
        "message": _message(alert),
        "event": event,
        "observer": {"name": alert.get("device_id"), "type": "sensor", "vendor": "FedSentry", "product": "FedSentry"},
        "rule": {"name": "fedsentry anomaly" if not incident else f"fedsentry incident {incident.get('key', '')}"},
        "fedsentry": {k: alert.get(k) for k in ("device_id", "job_id", "model_version", "score", "threshold", "count",
                                                  "explanation", "incident", "incident_id")},
    }
    doc["fedsentry"]["flow"] = flow or None
    source, destination = _endpoint(flow, "id.orig_h", "id.orig_p"), _endpoint(flow, "id.resp_h", "id.resp_p")
    if source:
        doc["source"] = source
    if destination:
        doc["destination"] = destination
    network = {k: v for k, v in (("transport", _protocol(flow.get("proto"))),
                                 ("protocol", _protocol(flow.get("service")))) if v}
    if network:
        doc["network"] = network
    return doc


@dataclass
class EcsWebhook(Webhook):
    """A webhook that receives each alert as an ECS document."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.key, self.label = "ecs " + self.key, "ecs " + self.label

    def send(self, alert: dict[str, Any], row: Alert) -> None:
        super().send({**ecs_document(alert), "id": alert["id"]}, row)


@dataclass
class EcsFile:
    """ECS documents appended to a file, one JSON document a line, for Filebeat or Vector to ship. Each line
    is written whole and flushed to disk before the delivery is recorded; a file moved away (rotation) is
    reopened at its path. A line longer than `max_line` bytes (a shipper's limit: Filebeat's default is
    10 MiB) is refused for that alert alone."""

    path: str
    max_line: int = 10 * 2**20
    _file: Any = field(default=None, repr=False)
    _inode: tuple[int, int] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.path or os.path.isdir(self.path):
            raise ValueError(f"{self.path!r}: expected the path of a file (the folder must exist)")
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise ValueError(f"{self.path!r}: the folder {folder} does not exist")
        self.key = "ecs-file " + os.path.abspath(self.path)
        self.label = self.key

    def _handle(self) -> Any:
        try:
            st = os.stat(self.path)
            current: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            current = None
        if self._file is None or current != self._inode:
            self.close()
            self._file = open(self.path, "ab")  # noqa: SIM115 (kept open across alerts; closed by close())
            st = os.fstat(self._file.fileno())
            self._inode = (st.st_dev, st.st_ino)
        return self._file

    def send(self, alert: dict[str, Any], row: Alert) -> None:
        line = (json.dumps(ecs_document(alert), separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        if len(line) > self.max_line:
            raise RefusedError(f"the document is {len(line)} bytes, longer than the file's line limit {self.max_line}")
        try:
            f = self._handle()
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        except OSError as e:
            self.close()
            raise DeliveryError(f"{self.path}: {e.strerror or e}") from None

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            finally:
                self._file = None

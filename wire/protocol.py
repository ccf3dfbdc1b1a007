"""The wire protocol shared by agents and the coordinator: topics and a versioned binary envelope.

An envelope is ``MAGIC | u16 schema version | u32 header length | JSON header | raw arrays``. The header
names the message kind, job, round and sender, small metadata, and each array's name, dtype and shape;
the arrays follow as raw little-endian bytes in that order. Nothing is ever pickled. ``decode`` checks
every size, dtype and shape against the header and refuses non-finite numbers before anything touches a
model; the caller then checks what is specific to the message (expected shapes, sane norm, round).

This module imports neither paho nor anything heavier than numpy.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.core.messages import MAX_MESSAGE_BYTES

MAGIC = b"FSN1"
SCHEMA_VERSION = 1
PREFIX = "fedsentry/v1"
MAX_PAYLOAD = MAX_MESSAGE_BYTES  # 64 MiB: recommendation uploads are item-sized (megabytes)
MAX_HEADER = 64 * 1024
ALLOWED_DTYPES = {"<f8", "<f4", "<i8", "<i4", "<i2", "|i1", "|u1", "|b1"}
_FIXED = struct.Struct("<4sHI")
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

KINDS = ("round", "upload", "model", "status", "alert", "alerts", "stats", "histogram", "setup", "eval", "ack",
         "decline", "feedback", "keys", "shares", "routed", "masked", "revealed",
         "count")


class ProtocolError(ValueError):
    """A message that must be rejected; `reason` is a short label for counting."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# -- topics ---------------------------------------------------------------------------------------

def job_topic(job: str) -> str:
    """Retained: the job's current round (broadcast state, phase, sampled agents)."""
    return f"{PREFIX}/jobs/{job}/round"


#: the model slot every anomaly-detection family (pca, gmm) promotes into: an agent scores with one model
ANOMALY_MODELS = "anomaly"


def model_topic(slot: str = ANOMALY_MODELS) -> str:
    """Retained: the promoted model of a slot (agents score with the anomaly slot's)."""
    return f"{PREFIX}/models/{slot}"


def agent_topic(agent: str, what: str) -> str:
    """Per-agent topics (upload, status, alerts): an ACL lets an agent publish only under its own id."""
    return f"{PREFIX}/agents/{agent}/{what}"


def driver_topic(agent: str) -> str:
    """Where an ingest worker passes on, unstored, an agent's answer that must never be stored (coordinator.
    upload_queue) for the job's driver: written by coordinators only, so the worker's check of the sender holds."""
    return f"{PREFIX}/drivers/{agent}/upload"


def handed_agent_topic(topic: str) -> str | None:
    """The agent topic an answer on a `driver_topic` came in on, None for any other topic."""
    parts = topic.split("/")
    if len(parts) == 5 and "/".join(parts[:3]) == f"{PREFIX}/drivers" and parts[4] == "upload":
        return agent_topic(parts[3], "upload")
    return None


#: what an agent's program can do beyond taking part in its families, declared in its status message (an older
#: agent declares nothing): "dp", it adds its share of the noise to a differentially private job's sums (an agent
#: without it would send its values without noise into a sum whose noise was shared out for it)
ABILITIES = ("dp",)
#: what the coordinator reads: every agent's status, uploads and alerts (not the ack topics it writes)
AGENT_SUBSCRIPTIONS = [(f"{PREFIX}/agents/+/{what}", 1) for what in ("status", "upload", "alerts")]
#: alert ids confirmed per "ack" message at most
ACK_IDS_PER_MESSAGE = 1000
JOB_SUBSCRIPTION = f"{PREFIX}/jobs/+/round"
#: what drivers read when the agents' answers go through the ingest workers' queue
DRIVER_SUBSCRIPTION = (f"{PREFIX}/drivers/+/upload", 1)


def parse_agent_topic(topic: str) -> tuple[str, str]:
    """(agent id, what) of a per-agent topic, or ProtocolError."""
    parts = topic.split("/")
    if len(parts) != 5 or "/".join(parts[:2]) != PREFIX or parts[2] != "agents":
        raise ProtocolError("topic", f"not an agent topic: {topic!r}")
    if not ID_RE.match(parts[3]):
        raise ProtocolError("sender", f"invalid agent id in topic: {parts[3]!r}")
    return parts[3], parts[4]


def agent_message(topic: str, payload: bytes) -> tuple[str, str, Envelope]:
    """(agent id, what, envelope) of a message on a per-agent topic, or ProtocolError: an agent speaks only for
    itself, so the envelope's sender must be the topic's agent."""
    agent, what = parse_agent_topic(topic)
    env = decode(payload)
    if env.sender != agent:
        raise ProtocolError("sender", f"{env.sender!r} published under {agent!r}")
    return agent, what, env


def check_id(value: str, what: str = "id") -> str:
    if not isinstance(value, str) or not ID_RE.match(value):
        raise ValueError(f"invalid {what} {value!r}: use 1-64 letters, digits, '.', '_' or '-', starting "
                         "with a letter or digit")
    return value


# -- envelope -------------------------------------------------------------------------------------

@dataclass
class Envelope:
    kind: str
    job: str
    round: int
    sender: str
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        return encode(self)


def encode(env: Envelope) -> bytes:
    descr, blobs = [], []
    for name, a in env.arrays.items():
        a = np.asarray(a)
        le = a.astype(a.dtype.newbyteorder("<"), copy=False)
        dt = le.dtype.str
        if dt not in ALLOWED_DTYPES:
            raise ValueError(f"array {name!r}: dtype {dt} is not allowed on the wire")
        descr.append({"name": name, "dtype": dt, "shape": list(le.shape)})
        blobs.append(np.ascontiguousarray(le).tobytes())
    header = json.dumps({"kind": env.kind, "job": env.job, "round": int(env.round), "sender": env.sender,
                         "meta": env.meta, "arrays": descr}, separators=(",", ":")).encode()
    return b"".join([_FIXED.pack(MAGIC, SCHEMA_VERSION, len(header)), header, *blobs])


def decode(payload: bytes, max_size: int = MAX_PAYLOAD) -> Envelope:
    """Parse and validate an envelope; raise ProtocolError with a reason label on anything wrong."""
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise ProtocolError("malformed", "payload is not bytes")
    payload = bytes(payload)
    if len(payload) > max_size:
        raise ProtocolError("oversized", f"{len(payload)} bytes > {max_size}")
    if len(payload) < _FIXED.size:
        raise ProtocolError("malformed", "shorter than the fixed header")
    magic, version, hlen = _FIXED.unpack_from(payload)
    if magic != MAGIC:
        raise ProtocolError("malformed", "bad magic")
    if version != SCHEMA_VERSION:
        raise ProtocolError("version", f"schema version {version}, expected {SCHEMA_VERSION}")
    if hlen > MAX_HEADER or _FIXED.size + hlen > len(payload):
        raise ProtocolError("malformed", "header length out of range")
    try:
        h = json.loads(payload[_FIXED.size : _FIXED.size + hlen])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError("malformed", f"header is not JSON: {e}") from None
    if not isinstance(h, dict):
        raise ProtocolError("malformed", "header is not an object")
    kind, job, rnd, sender = h.get("kind"), h.get("job"), h.get("round"), h.get("sender")
    if kind not in KINDS:
        raise ProtocolError("malformed", f"unknown kind {kind!r}")
    if not isinstance(job, str) or (job and not ID_RE.match(job)):
        raise ProtocolError("malformed", f"invalid job {job!r}")
    if not isinstance(rnd, int) or isinstance(rnd, bool) or not 0 <= rnd < 2**31:
        raise ProtocolError("malformed", f"invalid round {rnd!r}")
    if not isinstance(sender, str) or not ID_RE.match(sender):
        raise ProtocolError("sender", f"invalid sender {sender!r}")
    meta = h.get("meta", {})
    descr = h.get("arrays", [])
    if not isinstance(meta, dict) or not isinstance(descr, list) or len(descr) > 32:
        raise ProtocolError("malformed", "meta must be an object and arrays a list of at most 32")
    arrays: dict[str, np.ndarray] = {}
    offset = _FIXED.size + hlen
    for d in descr:
        name, dt, shape = _descriptor(d)
        if name in arrays:
            raise ProtocolError("malformed", f"array {name!r} appears twice")
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
        if offset + n > len(payload):
            raise ProtocolError("size", f"array {name!r} needs {n} bytes, payload too short")
        a = np.frombuffer(payload, dtype=dt, count=int(np.prod(shape, dtype=np.int64)), offset=offset).reshape(shape)
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise ProtocolError("non_finite", f"array {name!r} holds NaN or infinity")
        arrays[name] = a.astype(a.dtype.newbyteorder("="))
        offset += n
    if offset != len(payload):
        raise ProtocolError("size", f"{len(payload) - offset} trailing bytes")
    return Envelope(kind, job, rnd, sender, arrays, meta)


def _descriptor(d: Any) -> tuple[str, str, tuple[int, ...]]:
    if not isinstance(d, dict):
        raise ProtocolError("malformed", "array descriptor is not an object")
    name, dt, shape = d.get("name"), d.get("dtype"), d.get("shape")
    if not isinstance(name, str) or not name or len(name) > 64:
        raise ProtocolError("malformed", f"invalid array name {name!r}")
    if dt not in ALLOWED_DTYPES:
        raise ProtocolError("dtype", f"array {name!r}: dtype {dt!r} not allowed")
    if (not isinstance(shape, list) or len(shape) > 4
            or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**31 for s in shape)):
        raise ProtocolError("shape", f"array {name!r}: invalid shape {shape!r}")
    return name, dt, tuple(shape)


def expect_arrays(arrays: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]],
                  max_norm: float | None = None) -> None:
    """Check that exactly these arrays came, with these shapes, and (optionally) a sane Frobenius norm."""
    if set(arrays) != set(shapes):
        raise ProtocolError("shape", f"expected arrays {sorted(shapes)}, got {sorted(arrays)}")
    for name, shape in shapes.items():
        got = arrays[name].shape
        if got != tuple(shape):
            raise ProtocolError("shape", f"array {name!r} has shape {got}, expected {tuple(shape)}")
        if max_norm is not None:
            a = arrays[name]
            if a.dtype.kind not in "fiu":
                raise ProtocolError("dtype", f"array {name!r} must hold real numbers, not {a.dtype}")
            norm = float(np.linalg.norm(a))
            if not norm <= max_norm:  # NaN and infinity fail too
                raise ProtocolError("norm", f"array {name!r} has norm {norm:.3g}, not a finite number "
                                            f"<= {max_norm:.3g}")


def expect_shapes(what: str, arrays: dict[str, tuple[np.ndarray, tuple[int, ...]]]) -> None:
    """Check each named array of a typed message against the shape the job expects."""
    for name, (a, shape) in arrays.items():
        if a.shape != shape:
            raise ProtocolError("shape", f"{what}: array {name!r} has shape {a.shape}, expected {shape}")


ALERTS_PER_MESSAGE = 100
ALERT_BATCH_BYTES = MAX_HEADER // 2
#: the flagged records one incident update carries whole, and their JSON size: an update leaves as soon as either
#: is reached (the coordinator takes up to 64; store.records)
RECORDS_PER_UPDATE = 48
RECORDS_BYTES = ALERT_BATCH_BYTES // 2


def alert_batches(job: str, version: int, sender: str, alerts: list[dict[str, Any]]) -> list[Envelope]:
    """Alerts of one model version as "alerts" envelopes of at most ALERTS_PER_MESSAGE alerts and about
    ALERT_BATCH_BYTES of JSON each: under a flood, one message (and one acknowledgement) per batch."""
    out: list[Envelope] = []
    batch: list[dict[str, Any]] = []
    size = 0
    for a in alerts:
        n = len(json.dumps(a, separators=(",", ":")))
        if batch and (len(batch) >= ALERTS_PER_MESSAGE or size + n > ALERT_BATCH_BYTES):
            out.append(Envelope("alerts", job, version, sender, {}, {"alerts": batch}))
            batch, size = [], 0
        batch.append(a)
        size += n
    if batch:
        out.append(Envelope("alerts", job, version, sender, {}, {"alerts": batch}))
    return out


"""Syslog messages built from hostile alerts (issue 24, points 4 and 7): every message parses as strict RFC 5424
within its destination's size; an agent's flow keys become safe SD-NAMEs in their own element, never beside
or over the coordinator's fields; values are escaped, and cut (with a marker) between characters."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest

from coordinator import syslog
from coordinator.forward_syslog import Syslog
from tests.forwarding_receivers import parse_rfc5424

KIB64 = 64 * 1024
COORDINATOR = {"id": "a" * 32, "device_id": "dev-1", "job_id": "job-1", "model_version": 3, "score": 7.25,
               "threshold": 1.5, "count": 1, "explanation": [{"feature": "dst_bytes", "share": 1.0}],
               "incident_id": None}
#: keys with '=', ']', '"', spaces, non-ASCII, control and formatting characters, longer than 32, and the
#: coordinator's own parameter names
HOSTILE_KEYS = ['a=b', 'x]y', 'q"q', "two words", "ключ", "été", "nl\nkey", "tab\tkey", "bidi\u202ekey",
                "k" * 40, "k" * 41, "id", "score", "device_id", "truncated", "explanation", "a_b", "a b", ""]


def message(flow: dict, limit: int = syslog.UDP_SIZE, **extra) -> tuple[bytes, dict]:
    alert = {**COORDINATOR, **extra, "flow": flow}
    return syslog.message(alert, datetime(2026, 1, 2, 3, 4, 5), 16, 4, "sensor-1", "77", limit), alert


def unwritten(value: str) -> str:
    """A value as a receiver reads it back, non-printable characters as written (\\uXXXX)."""
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in value)


def test_hostile_keys_get_distinct_safe_names_in_the_flow_element_only():
    flow = {k: f"value of {k!r}" for k in HOSTILE_KEYS}
    raw, alert = message(flow)
    p = parse_rfc5424(raw)
    assert set(p["sd"]) == {"fedsentry@32473", "flow@32473"}
    # the coordinator's element holds its own fields, with its own values, and nothing else
    assert p["sd"]["fedsentry@32473"] == {"id": "a" * 32, "device_id": "dev-1", "job_id": "job-1",
                                          "model_version": "3", "score": "7.25", "threshold": "1.5", "count": "1"}
    names = p["sd"]["flow@32473"]
    assert len(names) == len(HOSTILE_KEYS)  # every key, none dropped, none merged
    assert all(re.fullmatch(r"[A-Za-z0-9_.~-]{1,32}", n) for n in names), names
    assert sorted(names.values()) == sorted(unwritten(v) for v in flow.values())
    for key in ("id", "score", "device_id", "truncated", "explanation", "a_b"):  # safe keys keep their name
        assert names[key] == flow[key]
    assert json.loads(p["msg"]) == alert  # the whole alert, exactly, as MSG


def test_values_are_escaped_and_no_control_character_reaches_the_line():
    flow = {"service": 'a]b"c\\d', "nl": "line1\nline2\r\x00\x1b[31m", "bidi": "abc\u202edcba", "uni": "ключ 🔑"}
    raw, _ = message(flow)
    assert not re.search(rb"[\x00-\x1f\x7f]", raw) and "\u202e".encode() not in raw
    got = parse_rfc5424(raw)["sd"]["flow@32473"]
    assert got == {"service": 'a]b"c\\d', "nl": "line1\\u000aline2\\u000d\\u0000\\u001b[31m",
                   "bidi": "abc\\u202edcba", "uni": "ключ 🔑"}


@pytest.mark.parametrize("limit", [480, 2048, 8192, 65507])
def test_64_kib_flow_fields_fit_the_size_cut_with_a_marker(limit):
    hostile = {"uid": "CmES5u32sYpV7JYN", "id.orig_h": "10.0.0.7", "id.orig_p": 51000,
               "payload": "A" * KIB64, "quoted": ']"\\' * (KIB64 // 3), "wide": "é🔑" * (KIB64 // 6),
               "bad key=]": "x" * KIB64}
    raw, alert = message(hostile, limit)
    whole = len(json.dumps(alert))
    assert len(raw) <= limit
    p = parse_rfc5424(raw)  # strict, and UTF-8 (a cut inside an escape or a character would not parse)
    mine = p["sd"]["fedsentry@32473"]
    assert mine["id"] == "a" * 32 and int(mine["truncated"]) > whole  # the marker: the size of the whole message
    assert p["msg"] == ""  # a cut JSON document would not parse: left out
    flow = p["sd"].get("flow@32473", {})
    if limit >= 2048:  # the short fields whole, the long ones cut to one length, ending in the marker
        assert mine["score"] == "7.25" and mine["device_id"] == "dev-1"
        assert flow["uid"] == "CmES5u32sYpV7JYN" and flow["id.orig_h"] == "10.0.0.7" and flow["id.orig_p"] == "51000"
        for k in ("payload", "quoted", "wide"):
            assert flow[k].endswith("…") and hostile[k].startswith(flow[k][:-1]) and len(flow[k]) > 4, k
        assert len(raw) > limit - 64  # the room is used


def test_every_cut_falls_between_characters():
    """Cut at every possible length: never inside an escape (`\\]`) nor a UTF-8 sequence."""
    flow = {"v": ']"\\é🔑\n' * 2000}
    for limit in range(1000, 1060):
        raw, _ = message(flow, limit)
        assert len(raw) <= limit
        v = parse_rfc5424(raw)["sd"]["flow@32473"]["v"]
        assert v.endswith("…") and unwritten(flow["v"]).startswith(v[:-1])


def test_a_small_size_drops_parameters_from_the_last_keeping_the_id():
    flow = {f"field{i:02d}": "v" * 300 for i in range(16)}
    raw, _ = message(flow, 480, incident={"key": "dst_bytes", "window": 1.7e9, "first": 1.7e9, "last": 1.7e9,
                                          "samples": [flow] * 16})
    p = parse_rfc5424(raw)
    mine = p["sd"]["fedsentry@32473"]
    assert len(raw) <= 480 and mine["id"] == "a" * 32 and "truncated" in mine
    kept = list(p["sd"].get("flow@32473", {}))
    assert kept == [f"field{i:02d}" for i in range(len(kept))]  # the last ones dropped first


def test_an_alert_that_fits_is_sent_whole():
    raw, alert = message({"uid": "C1"}, 2048)
    p = parse_rfc5424(raw)
    assert "truncated" not in p["sd"]["fedsentry@32473"] and json.loads(p["msg"]) == alert


@pytest.mark.parametrize("url, size", [("udp://h", 2048), ("tcp://h:6514", 8192), ("udp://h?max_size=480", 480),
                                       ("udp://h:514/?max_size=65527", 65527), ("tcp://h?max_size=1048576", 1 << 20)])
def test_each_destination_has_its_size(url, size):
    d = Syslog(url)
    assert d.max_size == size and "max_size" not in d.key  # changing the size keeps the destination's cursor


@pytest.mark.parametrize("url", ["udp://h?max_size=479", "udp://h?max_size=65528", "tcp://h?max_size=1048577",
                                 "udp://h?max_size=2k", "udp://h?max_size=", "udp://h?size=2048",
                                 "udp://h?max_size=²"])
def test_a_bad_size_is_refused(url):
    with pytest.raises(ValueError, match="max_size"):
        Syslog(url)

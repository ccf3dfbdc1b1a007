"""Lines of a Zeek conn.log that once crash-looped the agent or held it (issue 24, point 5), built from a good
record of the log they go in, each with the kind of refusal it earns (ZeekFollower.refused). Shared by the
follower's tests and the agents' (tests/edge_agent/test_zeek_hostile.py, tests/integration/test_zeek_sensor.py)."""

from __future__ import annotations

import json

from edge_agent.zeek_input import MAX_LINE

BAD_UID = "CxHostile"  # the uid of every hostile record: none of them may reach a batch
DEEP = 20_000  # nesting levels: within MAX_LINE, far beyond what Python's JSON decoder allows


def _json_with(good: str, field: str, raw: str) -> str:
    """The good JSON record with `field` set to the raw JSON text `raw`."""
    record = {**json.loads(good), "uid": BAD_UID, field: "@@"}
    return json.dumps(record, separators=(",", ":")).replace('"@@"', raw)


def json_lines(good: str) -> list[tuple[str, str, str]]:
    """(id, line, kind) of the hostile records of a JSON log."""
    cases = [
        ("nested-deep", "orig_bytes", "[" * DEEP + "]" * DEEP, "nested"),
        ("nested-in-a-number", "orig_bytes", '{"a":[1,{"b":2}]}', "nested"),
        ("nested-in-text", "proto", '{"a":"tcp"}', "nested"),
        ("nested-list-in-text", "service", '[["dns"],"x"]', "nested"),
        ("huge-integer", "orig_bytes", "9" * 400, "number"),
        ("huge-integer-5000-digits", "orig_bytes", "9" * 5000, "number"),
        ("huge-integer-in-a-port", "id.orig_p", "9" * 400, "number"),
        ("1e400", "orig_bytes", "1e400", "number"),
        ("-1e400-in-ts", "ts", "-1e400", "number"),
        ("1e400-as-text", "duration", '"1e400"', "number"),
        ("NaN", "resp_bytes", "NaN", "number"),
        ("Infinity", "orig_pkts", "Infinity", "number"),
        ("-Infinity", "duration", "-Infinity", "number"),
        ("long-text", "history", '"' + "A" * 257 + '"', "long"),
        ("long-set", "service", '["' + "A" * 200 + '","' + "B" * 200 + '"]', "long"),
    ]
    out = [(name, _json_with(good, field, raw), kind) for name, field, raw, kind in cases]
    return [*out, ("not-an-object", "[1, 2]", "json"), ("not-json", '{"uid": "' + BAD_UID, "json")]


def tsv_lines(good: str, fields: list[str]) -> list[tuple[str, str, str]]:
    """(id, line, kind) of the hostile records of a TSV log whose #fields line names `fields`."""
    out = []
    for name, field, value, kind in (
            ("huge-integer", "orig_bytes", "9" * 5000, "number"), ("1e400", "orig_bytes", "1e400", "number"),
            ("inf", "orig_bytes", "inf", "number"), ("-inf", "orig_bytes", "-inf", "number"),
            ("nan", "orig_bytes", "nan", "number"), ("text", "orig_bytes", "lots", "number"),
            ("long-text", "history", "A" * 257, "long")):
        cells = good.split("\t")
        cells[fields.index("uid")], cells[fields.index(field)] = BAD_UID, value
        out.append((name, "\t".join(cells), kind))
    return out


def long_line(good: str, size: int = MAX_LINE + 1) -> str:
    """The good record (TSV or JSON) grown to `size` characters, its newline excluded, uid hostile."""
    if good.startswith("{"):  # grown in a field the reader does not read
        record = {**json.loads(good), "uid": BAD_UID, "tunnel_parents": ""}
        pad = size - len(json.dumps(record, separators=(",", ":")))
        return json.dumps({**record, "tunnel_parents": "A" * pad}, separators=(",", ":"))
    cells = good.split("\t")
    cells[1] = BAD_UID  # (the uid is the second field of every conn.log header these tests write)
    line = "\t".join(cells)  # grown in its last field (tunnel_parents in a conn.log as Zeek writes it)
    return line + "A" * (size - len(line))


def separator_block(header: str, separator: str = "\\x") -> str:
    """A TSV header block (as `header`) whose #separator line Zeek would not write."""
    first, rest = header.split("\n", 1)
    assert first == "#separator \\x09"
    return f"#separator {separator}\n" + rest

"""One syslog message within a size: the header, the STRUCTURED-DATA and MSG as they are when they fit, else
cut in this order, the first that fits winning:

1. MSG (the alert's JSON) is left out: a JSON document cut short would not parse;
2. the agent's text values (flow values, the incident key) are shortened, the longest first, all to one
   length (the largest that fits, at least MIN_CUT bytes; shorter values stay whole), each cut one ending
   in MARK; a cut falls between characters, never inside a UTF-8 sequence or an escape;
3. parameters are dropped from the last: the flow's, the incident's, then the coordinator's own, never the
   alert id nor the marker.

A cut message has `truncated="<bytes of the whole message>"` in the coordinator's element. The smallest size
(MIN_SIZE, RFC 5424's 480) always holds the header (a host name of at most 255), the id and the marker."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate

from coordinator.syslog_sd import Element, Param, char, escape

MIN_SIZE = 480
MIN_CUT = 16  # bytes: a value is not cut shorter (its parameter is dropped instead)
MARK = "…"
_MARK_BYTES = len(MARK.encode())


def render(head: str, sd: list[Element], msg: str, written: dict[int, str] | None = None) -> bytes:
    """HEADER SP STRUCTURED-DATA [SP MSG]; `written`: values already escaped (and cut), by id of their Param."""
    w = written or {}
    text = head + " " + "".join(
        "[" + sid + "".join(f' {p.name}="{w[id(p)] if id(p) in w else escape(p.value)}"' for p in params) + "]"
        for sid, params in sd)
    return (text + " " + msg if msg else text).encode("utf-8", "surrogatepass")


@dataclass
class _Value:
    """A cuttable value's escaped characters, as the byte count up to each."""

    chars: list[str]
    ends: list[int]

    @classmethod
    def of(cls, value: str) -> _Value:
        chars = [char(c) for c in value]
        return cls(chars, list(accumulate(len(c.encode("utf-8", "surrogatepass")) for c in chars)))

    def size(self, cap: int) -> int:
        """Its bytes when cut to at most cap."""
        whole = self.ends[-1] if self.ends else 0
        if whole <= cap:
            return whole
        n = bisect_right(self.ends, cap - _MARK_BYTES)
        return (self.ends[n - 1] if n else 0) + _MARK_BYTES

    def cut(self, cap: int) -> str:
        """Its escaped text cut to at most cap bytes."""
        if not self.ends or self.ends[-1] <= cap:
            return "".join(self.chars)
        return "".join(self.chars[:bisect_right(self.ends, cap - _MARK_BYTES)]) + MARK


def fit(head: str, sd: list[Element], msg: str, limit: int) -> bytes:
    """The message within limit bytes (limit at least MIN_SIZE), cut in the module's order."""
    whole = render(head, sd, msg)
    if len(whole) <= limit:
        return whole
    first, *rest = sd
    sd = [(first[0], [*first[1], Param("truncated", str(len(whole)))]), *rest]
    every = {id(p): _Value.of(p.value) for _, params in sd for p in params if p.cut}
    while True:
        cut = {id(p): every[id(p)] for _, params in sd for p in params if p.cut}
        values = list(cut.values())
        fixed = len(render(head, sd, "", {i: "" for i in cut}))
        lo, hi = MIN_CUT, max([MIN_CUT] + [v.ends[-1] for v in values if v.ends])
        if fixed + sum(v.size(lo) for v in values) <= limit:
            while lo < hi:  # the largest cap that fits
                mid = (lo + hi + 1) // 2
                if fixed + sum(v.size(mid) for v in values) <= limit:
                    lo = mid
                else:
                    hi = mid - 1
            return render(head, sd, "", {i: v.cut(lo) for i, v in cut.items()})
        sd = _drop_last(sd)


def _drop_last(sd: list[Element]) -> list[Element]:
    """Without its last parameter (an element left empty goes too; the first keeps its id and marker)."""
    *before, (sid, params) = sd
    if not before:
        if len(params) <= 2:
            raise ValueError("a syslog message cannot hold its header and alert id: raise the size")
        return [(sid, [*params[:-2], params[-1]])]
    return [*before, (sid, params[:-1])] if len(params) > 1 else before

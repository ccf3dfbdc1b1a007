"""Charts drawn on the server as SVG: no JavaScript library, no CDN, works offline.

Layout: the title on the first line, the axis label on the second, the plot below both (TOP), axis text under
the plot (BOTTOM), so no two texts share a line. Values on the left axis are short (`compact`: 864k, 9.9M) and
end before the plot; a bar's label is shortened to the bar's width (its end kept: device ids differ there) or,
where even that cannot be read, left to the bar's hover text. The SVG scales to its container's width (viewBox)."""

from __future__ import annotations

import math
from datetime import datetime
from html import escape

W, H, PAD = 560, 220, 44
TOP, BOTTOM = 44, 30  # the plot spans y = TOP .. H - BOTTOM
#: the widest a character of the 11px sans-serif text is drawn, in px (digits and most letters are narrower)
CHAR_PX = 7.0
#: the fewest characters of a bar's label worth showing
MIN_LABEL = 4


def compact(v: float) -> str:
    """A value in at most 6 characters: 950, 12.5k, 864k, 9.9M, 1.2G (an axis label that fits beside the plot)."""
    for unit, n in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= n * 0.9995:  # 999.9 is 1k, not 1e+03
            q = v / n
            return f"{q:.3g}{unit}" if abs(q) < 1000 else f"{v:.1e}"
    return f"{v:.3g}"


def shorten(label: str, chars: int) -> str:
    """The label in at most `chars` characters, its end kept ("…ding-07"): ids of one fleet differ at the end."""
    return label if len(label) <= chars else "…" + label[len(label) - chars + 1:]


def _frame(title: str, body: str, subtitle: str = "") -> str:
    sub = f'<text x="{PAD}" y="32">{escape(subtitle)}</text>' if subtitle else ""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="100%" '
            f'preserveAspectRatio="xMinYMin meet" role="img" aria-label="{escape(title)}">'
            f'<style>text{{font:11px sans-serif;fill:#445}}.t{{font-weight:600;font-size:12px}}</style>'
            f'<rect width="{W}" height="{H}" fill="#fff"/><text class="t" x="{PAD}" y="16">{escape(title)}</text>'
            f'{sub}{body}</svg>')


def _empty(title: str, message: str) -> str:
    return _frame(title, f'<text x="{PAD}" y="{H / 2}">{escape(message)}</text>')


def _y(fraction: float) -> float:
    """The height of a fraction (0 bottom, 1 top) of the plot."""
    return H - BOTTOM - fraction * (H - TOP - BOTTOM)


def _grid(labels: list[str]) -> str:
    """Horizontal lines at 0, 1/4, ..., 1 of the plot with their labels on the left."""
    return "".join(f'<line x1="{PAD}" x2="{W - PAD}" y1="{_y(k / 4):.1f}" y2="{_y(k / 4):.1f}" stroke="#eee"/>'
                   f'<text x="{PAD - 4}" y="{_y(k / 4) + 4:.1f}" text-anchor="end">{escape(lab)}</text>'
                   for k, lab in enumerate(labels))


def line_chart(title: str, xs: list[float], ys: list[float | None], ylabel: str, log: bool = True,
               empty: str = "no rounds yet") -> str:
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None and (y > 0 or not log) and math.isfinite(y)]
    if not pts:
        return _empty(title, empty)
    f = (lambda v: math.log10(v)) if log else (lambda v: v)
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(f(p[1]) for p in pts), max(f(p[1]) for p in pts)
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 1, y1 + 1
    if x1 == x0:
        x1 = x0 + 1
    sx = lambda x: PAD + (x - x0) / (x1 - x0) * (W - 2 * PAD)  # noqa: E731
    path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{_y((f(y) - y0) / (y1 - y0)):.1f}"
                    for i, (x, y) in enumerate(pts))
    level = (lambda k: 10 ** (y0 + k / 4 * (y1 - y0))) if log else (lambda k: y0 + k / 4 * (y1 - y0))
    body = (f'{_grid([compact(level(k)) if not log else f"{level(k):.2g}" for k in range(5)])}'
            f'<path d="{path}" fill="none" stroke="#2c6fbb" stroke-width="2"/>'
            f'<text x="{W / 2 - 20}" y="{H - 4}">round</text>'
            f'<text x="{PAD - 4}" y="{H - BOTTOM + 14}">{x0:g}</text>'
            f'<text x="{W - PAD - 10}" y="{H - BOTTOM + 14}">{x1:g}</text>')
    return _frame(title, body, ylabel + (" (log scale)" if log else ""))


def bar_chart(title: str, labels: list[str], values: list[float]) -> str:
    if not labels:
        return _empty(title, "nothing yet")
    top = max(values) or 1
    n = len(labels)
    bw = (W - 2 * PAD) / n
    fits = int((bw - 2) // CHAR_PX)
    named = fits >= MIN_LABEL
    bars = "".join(
        f'<rect x="{PAD + i * bw + 1:.1f}" y="{_y(v / top):.1f}" width="{max(bw - 2, 1):.1f}" '
        f'height="{_y(0) - _y(v / top):.1f}" fill="#d9534f"><title>{escape(lab)}: {v:g}</title></rect>'
        + (f'<text x="{PAD + i * bw + bw / 2:.1f}" y="{H - BOTTOM + 13}" text-anchor="middle">'
           f'{escape(shorten(lab, fits))}</text>' if named else "")
        for i, (lab, v) in enumerate(zip(labels, values)))
    return _frame(title, f'{_grid(["0", "", "", "", compact(top)])}{bars}',
                  "" if named else f"{n} devices (hover a bar for its name)")


def time_chart(title: str, starts: list[datetime], values: list[int], bucket_seconds: int) -> str:
    """Bars over equal time buckets (UTC), with the first, middle and last bucket's time under the axis."""
    if not starts or not any(values):
        return _empty(title, "nothing flagged in this period")
    top = max(values)
    bw = (W - 2 * PAD) / len(starts)
    fmt = "%H:%M" if bucket_seconds * len(starts) <= 86400 else "%m-%d %H:%M"
    bars = "".join(f'<rect x="{PAD + i * bw:.1f}" y="{_y(v / top):.1f}" width="{max(bw - 1, 1):.1f}" '
                   f'height="{_y(0) - _y(v / top):.1f}" fill="#d9534f"><title>{t:%Y-%m-%d %H:%M:%S} UTC: '
                   f'{v:,}</title></rect>' for i, (t, v) in enumerate(zip(starts, values)) if v)
    ticks = "".join(f'<text x="{PAD + i * bw:.1f}" y="{H - BOTTOM + 14}" text-anchor="{a}">'
                    f'{starts[i]:{fmt}}</text>'
                    for i, a in ((0, "start"), (len(starts) // 2, "middle"), (len(starts) - 1, "end")))
    return _frame(title, f'{_grid(["0", "", "", "", compact(top)])}{bars}{ticks}',
                  f"flagged records per {_span(bucket_seconds)} (UTC)")


def _span(seconds: int) -> str:
    for unit, n in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % n == 0:
            return unit if seconds == n else f"{seconds // n} {unit}s"
    return f"{seconds} s"

"""Charts drawn on the server as SVG: no JavaScript library, no CDN, works offline."""

from __future__ import annotations

import math
from html import escape

W, H, PAD = 560, 220, 44


def _frame(title: str, body: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
            f'role="img" aria-label="{escape(title)}"><style>text{{font:11px sans-serif;fill:#445}}'
            f'.t{{font-weight:600;font-size:12px}}</style><rect width="{W}" height="{H}" fill="#fff"/>'
            f'<text class="t" x="{PAD}" y="16">{escape(title)}</text>{body}</svg>')


def line_chart(title: str, xs: list[float], ys: list[float | None], ylabel: str, log: bool = True) -> str:
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None and (y > 0 or not log) and math.isfinite(y)]
    if not pts:
        return _frame(title, f'<text x="{PAD}" y="{H / 2}">no rounds yet</text>')
    f = (lambda v: math.log10(v)) if log else (lambda v: v)
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(f(p[1]) for p in pts), max(f(p[1]) for p in pts)
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 1, y1 + 1
    if x1 == x0:
        x1 = x0 + 1
    sx = lambda x: PAD + (x - x0) / (x1 - x0) * (W - 2 * PAD)  # noqa: E731
    sy = lambda y: H - 28 - (f(y) - y0) / (y1 - y0) * (H - 56)  # noqa: E731
    path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(pts))
    ticks = "".join(
        f'<line x1="{PAD}" x2="{W - PAD}" y1="{H - 28 - k / 4 * (H - 56):.1f}" y2="{H - 28 - k / 4 * (H - 56):.1f}" '
        f'stroke="#eee"/><text x="4" y="{H - 24 - k / 4 * (H - 56):.1f}">'
        f'{(10 ** (y0 + k / 4 * (y1 - y0)) if log else y0 + k / 4 * (y1 - y0)):.2g}</text>' for k in range(5))
    body = (f'{ticks}<path d="{path}" fill="none" stroke="#2c6fbb" stroke-width="2"/>'
            f'<text x="{W / 2 - 20}" y="{H - 6}">round</text>'
            f'<text x="{PAD}" y="30">{escape(ylabel)}{" (log scale)" if log else ""}</text>'
            f'<text x="{PAD - 4}" y="{H - 14}">{x0:g}</text><text x="{W - PAD - 10}" y="{H - 14}">{x1:g}</text>')
    return _frame(title, body)


def bar_chart(title: str, labels: list[str], values: list[float]) -> str:
    if not labels:
        return _frame(title, f'<text x="{PAD}" y="{H / 2}">nothing yet</text>')
    top = max(values) or 1
    n = len(labels)
    bw = (W - 2 * PAD) / n
    bars = "".join(
        f'<rect x="{PAD + i * bw + 1:.1f}" y="{H - 40 - v / top * (H - 70):.1f}" width="{max(bw - 2, 1):.1f}" '
        f'height="{v / top * (H - 70):.1f}" fill="#d9534f"><title>{escape(lab)}: {v:g}</title></rect>'
        + (f'<text x="{PAD + i * bw + 2:.1f}" y="{H - 26}" transform="rotate(30 {PAD + i * bw + 2:.1f},{H - 26})">'
           f'{escape(lab[-10:])}</text>' if n <= 30 else "")
        for i, (lab, v) in enumerate(zip(labels, values)))
    return _frame(title, f'{bars}<text x="4" y="{H - 40 - (H - 70)}">{top:g}</text>')

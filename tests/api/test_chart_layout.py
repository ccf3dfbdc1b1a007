"""The dashboard's charts, drawn by a real browser: no text leaves the chart, no two texts overlap, and the
values on the left axis end before the plot begins (issue 24, point 8: labels were clipped, ran into the bars and
into each other). Sizes are the browser's own (getBBox), for long device ids, many devices and large counts."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from api.charts import BOTTOM, PAD, H, W, bar_chart, line_chart, time_chart
from tests.api.conftest import chromium, needs_chromium

LONG = [f"sensor-building-north-{i:02d}" for i in range(40)]
DAYS = [datetime(2026, 11, 1) + timedelta(days=i) for i in range(30)]
HOURS = [datetime(2026, 11, 1) + timedelta(hours=i) for i in range(24)]
CHARTS = {
    "3 long ids": bar_chart("Flagged records per device", LONG[:3], [5, 12_345_678, 40]),
    "12 long ids": bar_chart("Flagged records per device", LONG[:12],
                             [1_234_567 * (i + 1) % 9_876_543 for i in range(12)]),
    "40 devices": bar_chart("Flagged records per device", LONG, [float(i) for i in range(40)]),
    "short ids": bar_chart("Flagged records per device", ["a", "b"], [1, 2]),
    "a month of large counts": time_chart("Flagged records over time", DAYS,
                                          [123_456_789 * (i % 7 + 1) for i in range(30)], 86400),
    "a day": time_chart("Flagged records over time", HOURS, [i for i in range(24)], 3600),
    "convergence": line_chart("Convergence", list(range(300)), [10 ** (-i / 30) for i in range(300)],
                              "distance to consensus"),
    "convergence, linear": line_chart("Objective", list(range(50)), [1e7 - i * 1e5 for i in range(50)], "objective",
                                      log=False),
}


@needs_chromium
def test_no_chart_text_is_clipped_or_overlaps():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = chromium(p)
        page = browser.new_page(viewport={"width": W, "height": H})
        try:
            for name, svg in CHARTS.items():
                page.set_content(f"<html><body style='margin:0;width:{W}px'>{svg}</body></html>")
                boxes = page.evaluate("""() => [...document.querySelectorAll('svg > text')].map(t => {
                    const b = t.getBBox(); return [t.textContent, b.x, b.y, b.x + b.width, b.y + b.height]; })""")
                assert boxes, name
                for text, x0, y0, x1, y1 in boxes:
                    assert x0 >= 0 and x1 <= W and y0 >= 0 and y1 <= H, (name, text, (x0, y0, x1, y1))
                    if x0 < PAD - 1 and y0 > 40 and (y0 + y1) / 2 < H - BOTTOM + 5:
                        assert x1 <= PAD, (name, text, x1)  # a value on the left axis ends before the plot
                for i, a in enumerate(boxes):
                    for b in boxes[i + 1:]:
                        apart = a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2]
                        assert apart, (name, a, b)
        finally:
            browser.close()


@pytest.mark.parametrize("n", [3, 12])
def test_a_bars_label_keeps_the_end_of_the_id(n):
    svg = bar_chart("t", LONG[:n], [1.0] * n)
    assert all(f"{i:02d}</text>" in svg for i in range(n))
    assert all(f"<title>{lab}: 1</title>" in svg for lab in LONG[:n])  # the whole id on hover

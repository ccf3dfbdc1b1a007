"""The dashboard's charts, drawn by the server as SVG (api/charts.py): a job's convergence, flagged records
over time and per device, under the same filters as the anomaly list."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.charts import bar_chart, line_chart, time_chart
from api.deps import caller, get_db
from api.filters import alert_filter
from api.jsonsafe import number
from api.schemas import ID_PATTERN
from store.db import Job, Round
from store.triage import AlertFilter, flagged_series, records_per_device

router = APIRouter(prefix="/charts", include_in_schema=False, dependencies=[Depends(caller)])
# a chart opened on its own is an SVG document: its inline <style> may apply, nothing may run
SVG_HEADERS = {"Cache-Control": "no-store",
               "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"}
#: what each job family reports as its round-to-round change: the first a job's rounds carry is drawn
CONVERGENCE = (("subspace_change", "subspace distance between consecutive Z"),
               ("mean_shift", "largest move of a component mean"),
               ("item_change", "relative change of the item factors"))


def _svg(svg: str) -> Response:
    return Response(svg, media_type="image/svg+xml", headers=SVG_HEADERS)


@router.get("/jobs/{job_id}/convergence.svg")
def convergence_chart(job_id: str = Path(..., pattern=ID_PATTERN), db: Session = Depends(get_db)) -> Response:
    if db.get(Job, job_id) is None:
        raise HTTPException(404, f"no job {job_id!r}")
    rows = db.execute(select(Round.round, Round.metrics).where(Round.job_id == job_id, Round.phase == "train")
                      .order_by(Round.round)).all()
    metrics = [m if isinstance(m, dict) else {} for _, m in rows]
    name, label = next(((n, lab) for n, lab in CONVERGENCE if any(n in m for m in metrics)), CONVERGENCE[0])
    return _svg(line_chart(f"Convergence of {job_id}", [r for r, _ in rows],
                           [number(m.get(name)) for m in metrics], label))


@router.get("/alerts-over-time.svg")
def alerts_over_time(f: AlertFilter = Depends(alert_filter), buckets: int = Query(48, ge=2, le=200),
                     db: Session = Depends(get_db)) -> Response:
    span, series = flagged_series(db, f, buckets)  # the totals are not drawn
    return _svg(time_chart("Flagged records over time", [p["start"] for p in series], [p["records"] for p in series],
                           span))


@router.get("/alerts-per-device.svg")
def alerts_per_device(f: AlertFilter = Depends(alert_filter), db: Session = Depends(get_db)) -> Response:
    rows = records_per_device(db, f)
    return _svg(bar_chart("Flagged records per device", [d for d, _ in rows], [n for _, n in rows]))

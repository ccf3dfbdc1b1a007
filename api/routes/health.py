"""/healthz (no key) and Prometheus /metrics (computed from the database, so any worker can answer)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from sqlalchemy import func, select, text

from api.deps import caller
from store.db import Alert, Device, Rejection, Round

router = APIRouter(tags=["health"])
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@router.get("/healthz")
def healthz(request: Request) -> JSONResponse:
    try:
        with request.app.state.sessions() as s:
            s.execute(text("SELECT 1"))
        return JSONResponse({"status": "ok", "database": "ok"})
    except Exception as e:
        return JSONResponse({"status": "error", "database": str(e)[:200]}, status_code=503)


class _DbCollector:
    def __init__(self, sessions):
        self.sessions = sessions

    def collect(self):
        with self.sessions() as s:
            rounds = s.execute(select(Round.seconds).where(Round.phase == "train")).scalars().all()
            # a round's metrics count its answers (its answered column is a list only up to models.core.sampling's
            # switch); rows written without that count are lists
            answers = func.coalesce(Round.metrics["answered"].as_integer(), func.json_array_length(Round.answered))
            accepted = s.execute(select(func.coalesce(func.sum(answers), 0))).scalar()
            rejected = s.execute(select(Rejection.reason, Rejection.count)).all()
            alerts = s.execute(select(func.count()).select_from(Alert)).scalar()
            online = s.execute(select(func.count()).select_from(Device).where(Device.online.is_(True))).scalar()
        c = CounterMetricFamily("fedsentry_rounds", "training rounds completed")
        c.add_metric([], len(rounds))
        yield c
        h = HistogramMetricFamily("fedsentry_round_duration_seconds", "time from broadcast to stored aggregate")
        counts = [sum(1 for r in rounds if r <= b) for b in BUCKETS]
        h.add_metric([], [(str(b), n) for b, n in zip(BUCKETS, counts)] + [("+Inf", len(rounds))], sum(rounds))
        yield h
        u = CounterMetricFamily("fedsentry_uploads", "uploads by outcome", labels=["outcome", "reason"])
        u.add_metric(["accepted", ""], int(accepted or 0))
        for reason, n in rejected:
            u.add_metric(["rejected", reason], n)
        yield u
        a = CounterMetricFamily("fedsentry_alerts_ingested", "anomalies stored")
        a.add_metric([], int(alerts))
        yield a
        g = GaugeMetricFamily("fedsentry_devices_online", "devices whose last status was online")
        g.add_metric([], int(online))
        yield g


@router.get("/metrics", dependencies=[Depends(caller)], response_class=Response)
def metrics(request: Request) -> Response:
    registry = CollectorRegistry()
    registry.register(_DbCollector(request.app.state.sessions))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

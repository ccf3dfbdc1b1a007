"""Requests generated from the OpenAPI schema (schemathesis): no input may produce a server error, on
SQLite or on PostgreSQL (which refuses NUL bytes, integers past 64 bits and non-finite JSON numbers).

schemathesis's pytest plugin does not run under pytest 9, so each operation's strategy is driven by
Hypothesis directly."""

from __future__ import annotations

import numpy as np
import schemathesis
from hypothesis import HealthCheck, given, settings

from api.security import create_key
from store.db import Job, ModelVersion, pack
from tests.api.conftest import populate


def test_no_server_errors_across_the_whole_schema(any_app):
    app = any_app
    populate(app, n_alerts=20)
    with app.state.sessions.begin() as s:
        key = create_key(s, "admin")
        # a promoted recommendation model, so /recommendations gets past its 409
        s.add(Job(id="rs", type="recsys", algorithm="fedmc-admm", params={}, status="finished"))
        s.add(ModelVersion(job_id="rs", version=1, type="recsys", round=5, promoted=True, published=True,
                           arrays=pack({"item_factors": np.ones((4, 2))}),
                           info={"items": [1, 2, 3, 4], "mean": 3.5, "rating_min": 0.5, "rating_max": 5.0, "lam": 1.0}))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    tried, failures = 0, []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path == "/api/v1/anomalies/stream":
            continue  # a stream that never ends by itself: tests/api/test_stored_rows.py and the browser test

        @given(case=operation.as_strategy())
        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case):
            nonlocal tried
            for headers in ({"Authorization": f"Bearer {key}"}, {}):
                response = case.call(headers=headers)
                tried += 1
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: "
                                    f"{response.text[:200]}")

        check()
    print(f"\n{app.state.sessions.kw['bind'].dialect.name}: {tried} requests, {len(failures)} server errors")
    assert tried > 500
    assert not failures, "\n".join(failures[:10])

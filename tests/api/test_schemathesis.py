"""Requests generated from the OpenAPI schema (schemathesis): no input may produce a server error.

schemathesis's pytest plugin does not run under pytest 9, so each operation's strategy is driven by
Hypothesis directly."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from tests.api.conftest import populate


def test_no_server_errors_across_the_whole_schema(tmp_path):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path}/st.db", cookie_secure=False))
    populate(app, n_alerts=20)
    with app.state.sessions.begin() as s:
        key = create_key(s, "admin")
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    tried, failures = 0, []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path == "/api/v1/anomalies/stream":
            continue  # a stream that never ends by itself: the browser test exercises it

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
    assert tried > 500
    assert not failures, "\n".join(failures[:10])

"""FedEM's server state through the coordinator's storage: the table of control variates is written by the
rows in use (never its empty capacity) and by the rows a round changed, and a state rebuilt from the database
goes on exactly as the one that never stopped, retirements included."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import func, select

from models.mixture.fedem import FedEM
from store import row_tables
from store.db import Job, ServerChunk, make_engine, migrate, pack, session_factory, unpack
from tests.models.test_control_variates import fleet


def step(alg, server, bc, data, ids, w):
    sub = {k: [v[i] for i in ids] if k == "X" else np.asarray(v)[ids] for k, v in data.items()}
    _, up = alg.client_update({}, sub, bc)
    return alg.server_update(server, ids, up, w[ids])


def save(sessions, alg, server, touched):
    tables = [k for k in alg.row_tables if k in server]  # as the job runner: mean and mean_sq come with bounds
    lengths = alg.table_lengths(server)
    shapes = row_tables.describe(server, tables, lengths)
    with sessions.begin() as s:
        row_tables.store(s, "j", row_tables.changed(server, tables, touched, lengths))
    small = pack({k: v for k, v in server.items() if k not in tables})
    return small, shapes


@pytest.fixture
def sessions(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path}/c.db")
    migrate(engine)
    sessions = session_factory(engine)
    with sessions.begin() as s:
        s.add(Job(id="j", type="gmm", algorithm="fedem", params={}, status="running", phase="train"))
    yield sessions
    engine.dispose()


def test_the_table_is_stored_by_rows_in_use_and_resumes_exactly(sessions):
    data, w = fleet(), np.linspace(0.5, 2.0, 12)
    alg = FedEM(4, components=3, reg=1e-3, hard_rounds=3, control_rows=6)
    server, bc = alg.init_server(12, np.random.default_rng(0))
    server, bc = step(alg, server, bc, data, np.array([0, 1, 2]), w)  # seeding: 3 of 6 rows in use
    small, shapes = save(sessions, alg, server, None)
    with sessions() as s:
        stored = s.scalar(select(func.sum(func.length(ServerChunk.data))).where(ServerChunk.array == "S2_rows"))
    assert stored == 3 * server["S2_rows"][0].nbytes  # the rows in use, not the capacity
    assert shapes["S2_rows"]["length"] == 3
    schedule = [np.array(s) for s in ([3, 4], [5, 6, 7], [0, 8], [9, 10, 11], [1, 4])]
    server, bc = step(alg, server, bc, data, schedule[0], w)
    small, shapes = save(sessions, alg, server, alg.touched(server, schedule[0]))
    with sessions() as s:
        restored = {**unpack(small), **row_tables.load(s, "j", shapes)}
    assert len(restored["S2_rows"]) == int(server["rows"]) == 5
    bc2 = bc
    for ids in schedule[1:]:  # retirements from the first of these on
        server, bc = step(alg, server, bc, data, ids, w)
        restored, bc2 = step(alg, restored, bc2, data, ids, w)
        np.testing.assert_array_equal(bc["means"], bc2["means"])
        np.testing.assert_array_equal(restored["owner"], server["owner"])
    assert len(restored["S2_rows"]) == 6  # back at its capacity

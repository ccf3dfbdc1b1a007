"""FedEM's table of control variates (models.mixture.control): bounded, exact, no growing.

With room for every device it is incremental EM (the sums are every device's last statistics, weighted); with
less, the devices seen longest ago leave the sums exactly as they came in, and a retired device that answers
again joins afresh. Tables never grow (no copy of the table in any round), and what a round stores is its
devices' rows."""

from __future__ import annotations

import numpy as np

from models.detection.preprocessing import as_device_records
from models.mixture import control
from models.mixture.fedem import FedEM
from models.mixture.gmm import m_step
from models.mixture.simulator import device_data
from tests.models.test_mixture import blobs


def fleet(n=12, seed=0):
    X = as_device_records(blobs(1800, seed=seed))
    return device_data([X[i::n] for i in range(n)], seed=0)


def rounds(alg, data, schedule, w):
    n = len(data["X"])
    server, bc = alg.init_server(n, np.random.default_rng(0))
    _, up = alg.client_update({}, data, bc)
    server, bc = alg.server_update(server, np.arange(n), up, w)
    last = {}
    for ids in schedule:
        sub = {k: [v[i] for i in ids] if k == "X" else np.asarray(v)[ids] for k, v in data.items()}
        _, up = alg.client_update({}, sub, bc)
        for j, i in enumerate(ids):
            last[int(i)] = [np.asarray(up[k][j], float) for k in ("R", "S1", "S2")]
        server, bc = alg.server_update(server, ids, up, w[ids])
    return server, bc, last


def test_a_table_smaller_than_the_fleet_keeps_exactly_the_devices_seen_last():
    data = fleet()
    w = np.linspace(0.5, 2.0, 12)
    schedule = [np.array(s) for s in ([0, 1, 2, 3], [4, 5, 6], [7, 8], [0, 9, 10], [11, 4], [1, 2])]
    alg = FedEM(4, components=3, reg=1e-3, float32=True, hard_rounds=2, control_rows=6)
    server, bc, last = rounds(alg, data, schedule, w)
    # the last six devices seen, most recent first: 1, 2 (round 6), 11, 4 (round 5), 0, 9, 10 (round 4: 0 and 9
    # kept by row order, 10 seen as late; the table holds 6): whoever is in the table, the sums are theirs
    held = server["owner"][: int(server["rows"])]
    assert int(server["rows"]) == 6 and len(set(held.tolist())) == 6
    assert {1, 2, 11, 4} <= set(held.tolist())
    assert (server["owner"][server["slot"][held] - 1] == held).all()
    assert np.count_nonzero(server["slot"]) == 6
    total = [sum(w[i] * last[int(i)][t] for i in held) for t in range(3)]
    for got, want in zip((server["R"], server["S1"], server["S2"]), total):
        np.testing.assert_allclose(got, want, atol=1e-9)
    expected = m_step(*total, reg=1e-3)
    np.testing.assert_allclose(alg.consensus(bc).means, expected.means, atol=1e-7)
    support = sum((last[int(i)][0] >= control.SUPPORT_SHARE).astype(float) for i in held)
    np.testing.assert_array_equal(server["support"], support)
    # the tables were allocated once, at their capacity
    assert len(server["S2_rows"]) == 6


def test_room_for_every_device_is_the_unbounded_table():
    data = fleet()
    w = np.linspace(0.5, 2.0, 12)
    schedule = [np.array(s) for s in ([0, 1, 2, 3], [4, 5, 6], [7, 8], [0, 9, 10], [11, 4])]
    a = rounds(FedEM(4, components=3, reg=1e-3, hard_rounds=2), data, schedule, w)
    b = rounds(FedEM(4, components=3, reg=1e-3, hard_rounds=2, control_rows=12), data, schedule, w)
    np.testing.assert_array_equal(a[1]["means"], b[1]["means"])
    assert len(a[0]["R_rows"]) == 12 and len(a[0]["retired"]) == 0


def test_a_round_touches_its_devices_rows_and_the_retired_devices():
    data = fleet()
    w = np.ones(12)
    alg = FedEM(4, components=3, reg=1e-3, hard_rounds=2, control_rows=4)
    server, _, _ = rounds(alg, data, [np.array([0, 1, 2, 3]), np.array([4, 5])], w)
    t = alg.touched(server, np.array([4, 5]))
    assert set(t["slot"].tolist()) == {4, 5} | set(server["retired"].tolist()) and len(server["retired"]) == 2
    assert set(t["R_rows"].tolist()) == set((server["slot"][[4, 5]] - 1).tolist())
    assert alg.table_lengths(server)["S2_rows"] == 4


def test_a_table_saved_by_the_older_layout_is_read_as_the_same_sums():
    """Rows that held weighted statistics (grown by doubling, support as floats) count with weight 1."""
    rng = np.random.default_rng(3)
    K, d, p = 3, 4, 10
    rows = rng.random((16, K)), rng.random((16, K, d)), rng.random((16, K, p))
    old = {"slot": np.array([0, 1, 2, 0, 3]), "rows": np.array(3), "R_rows": rows[0], "S1_rows": rows[1],
           "S2_rows": rows[2], "H_rows": (rows[0] > 0.5).astype(float)}
    old.update(R=rows[0][:3].sum(0), S1=rows[1][:3].sum(0), S2=rows[2][:3].sum(0))
    new = control.upgrade(dict(old), capacity=8)
    assert list(new["owner"][:3]) == [1, 2, 4] and len(new["R_rows"]) == 16
    np.testing.assert_array_equal(new["support"], (rows[0][:3] > 0.5).sum(0))
    control.subtract(new, np.arange(3))
    np.testing.assert_allclose(new["S2"], 0, atol=1e-12)

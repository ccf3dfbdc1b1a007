"""The support rule's mass share kept by the rows each step writes (models.mixture.heaviest) equals, exactly, the
share read from the whole table, over any sequence of steps: rows rewritten heavier or lighter, devices retired
when the table is full, a step with more devices than the table has rows (seeding), a cleared table, a table
saved before the kept rows existed (`control.upgrade`), and the kept rows' room smaller than the table. Also: the
rows retired are those a stable sort of the table by last round picked, found by a partition."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.mixture import control, heaviest

K = 3
#: few distinct masses: ties between rows, and rows rewritten to the very mass they had
LEVELS = (0.0, 0.125, 0.25, 0.5, 1.0)

step = st.one_of(
    st.tuples(st.just("write"), st.lists(st.integers(0, 23), min_size=1, max_size=24, unique=True),
              st.lists(st.sampled_from(LEVELS), min_size=24 * K, max_size=24 * K),
              st.lists(st.sampled_from((0.5, 1.0, 2.0)), min_size=24, max_size=24)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("upgrade")),
)


def full(server: dict, m: int) -> np.ndarray:
    return heaviest.full_share(server, control.aggregate(server)[0], m)


def run(capacity: int, room: int, dtype: type, steps: list, ms: list[int]) -> None:
    """The steps on a fresh table; after each, the kept share against the full pass for every m."""
    server = {**control.empty_table(24, capacity, K, 1, 1, dtype), **heaviest.empty(K, room)}
    for r, (kind, *args) in enumerate(steps):
        if kind == "write":
            ids, levels, weights = np.array(sorted(args[0])), np.array(args[1]), np.array(args[2])
            R = levels.reshape(24, K)[: len(ids)].astype(dtype)
            zeros = np.zeros((len(ids), K, 1), dtype)
            control.write(server, ids, weights[: len(ids)], (R, zeros, zeros), r + 1)
        elif kind == "clear":
            control.clear(server)
        else:  # a state saved before the kept rows: without them, and the sums as they were
            for key in heaviest.KEYS:
                server.pop(key)
            server = control.upgrade(server, capacity)
        for m in ms:
            np.testing.assert_array_equal(control.heaviest_share(server, m), full(server, m))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity=st.integers(1, 20), room=st.integers(1, 6), dtype=st.sampled_from([np.float32, np.float64]),
       steps=st.lists(step, min_size=1, max_size=25), ms=st.lists(st.integers(1, 5), min_size=1, max_size=3))
def test_the_kept_share_is_the_full_pass_over_the_table(capacity, room, dtype, steps, ms):
    run(capacity, room, dtype, steps, ms)


@pytest.mark.parametrize("rewrite", [2, heaviest.REWRITE])
def test_a_step_rewriting_many_rows_reads_the_table_again(monkeypatch, rewrite):
    monkeypatch.setattr(heaviest, "REWRITE", rewrite)
    rng = np.random.default_rng(0)
    steps = [("write", rng.choice(24, 5, replace=False).tolist(), rng.choice(LEVELS, 24 * K).tolist(),
              rng.choice((0.5, 1.0, 2.0), 24).tolist()) for _ in range(30)]
    run(12, 4, np.float32, steps, [2])


def test_the_share_reads_the_table_rarely(monkeypatch):
    """A table of 200 rows in a fleet of 2,000, ten devices written each step with continuous masses (most of them
    new, retiring the rows seen longest ago), the m = 2 heaviest: the kept rows answer almost every step (a
    component's column read once in many steps, never the whole table every step)."""
    rng = np.random.default_rng(1)
    server = control.empty_table(2000, 200, K, 1, 1, np.float32)
    control.write(server, np.arange(200), np.ones(200), (rng.random((200, K)), np.zeros((200, K, 1)),
                                                          np.zeros((200, K, 1))), 0)
    control.heaviest_share(server, 2)
    reads, read = [0], heaviest.read

    def counting(s: dict, columns: np.ndarray) -> None:
        reads[0] += len(columns)
        read(s, columns)

    monkeypatch.setattr(heaviest, "read", counting)
    for r in range(1, 201):
        ids = np.sort(rng.choice(2000, 10, replace=False))
        control.write(server, ids, np.ones(10), (rng.random((10, K)), np.zeros((10, K, 1)), np.zeros((10, K, 1))), r)
        np.testing.assert_array_equal(control.heaviest_share(server, 2), full(server, 2))
    assert reads[0] <= 0.1 * 200 * K, reads[0]


@settings(max_examples=200, deadline=None)
@given(seen=st.lists(st.integers(0, 6), min_size=1, max_size=40), count=st.integers(1, 45))
def test_the_rows_seen_longest_ago_are_a_stable_sorts_first(seen, count):
    """Retirement picks the rows seen longest ago, ties by row (as a stable sort did), by a partition."""
    seen = np.array(seen, dtype=np.int64)
    np.testing.assert_array_equal(control.oldest_first(seen, count), np.argsort(seen, kind="stable")[:count])

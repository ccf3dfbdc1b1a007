"""The aggregation pipeline (models.core.pipeline): every family's answers pass its stages before the server step, in
the simulators and the coordinator alike."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from models.core.federated import FederatedAlgorithm, State, SupportView
from models.core.pipeline import Answers, close_round, support_mask, validate
from models.detection.screening import DEFAULT_GUARD, Guard, capped_weights, weight_caps


class Recorder(FederatedAlgorithm):
    """A server step that records what reached it; its screen refuses client 1 and halves client 2."""

    name = "recorder"

    def init_server(self, n_clients, rng):
        return {}, {}

    def init_clients(self, data, broadcast):
        return {}

    def client_update(self, state, data, broadcast):
        return state, {}

    def screen(self, server: State, client_ids: np.ndarray, uploads: State) -> np.ndarray | None:
        return np.array([{1: 0.0, 2: 0.5}.get(int(i), 1.0) for i in client_ids])

    def server_update(self, server, client_ids, uploads, weight):
        server["seen"] = (client_ids, uploads, weight)
        return server, {}


def test_validation_refuses_and_shrinks_before_the_server_step_and_counts_per_round():
    alg = Recorder()
    server: State = {}
    uploads = {"x": np.ones((3, 2)), "items": np.array([[7], [8], [9]])}
    close_round(alg, server, np.array([0, 1, 2]), uploads, np.array([1.0, 2.0, 3.0]))
    ids, seen, weight = server["seen"]
    assert list(ids) == [0, 2] and list(weight) == [1.0, 3.0]
    np.testing.assert_array_equal(seen["x"], [[1, 1], [0.5, 0.5]])  # floats scaled, ids of items untouched
    np.testing.assert_array_equal(seen["items"], [[7], [9]])
    assert (int(server["rejected"]), int(server["shrunk"])) == (1, 1)
    assert list(server["rejected_ids"]) == [1] and list(server["shrunk_ids"]) == [2]
    close_round(alg, server, np.array([0]), {"x": np.ones((1, 2)), "items": np.array([[1]])}, np.ones(1))
    assert int(server["rejected"]) == 1 and len(server["rejected_ids"]) == 0  # the ids are this round's


def test_a_stage_list_switches_validation_off():
    alg = Recorder()
    server: State = {}
    close_round(alg, server, np.array([0, 1]), {"x": np.ones((2, 1))}, np.ones(2), stages=())
    assert list(server["seen"][0]) == [0, 1] and "rejected" not in server


class Open(Recorder):
    def screen(self, server, client_ids, uploads):
        return None


def test_no_screen_passes_everything():
    answers = Answers(np.array([3, 4]), {"x": np.zeros((2, 1))}, np.ones(2))
    assert validate(Open(), {}, answers) is answers


def test_the_cap_stage_turns_claimed_records_into_the_statistics_phase_weights():
    """The answers arrive weighted by the records their devices claimed; the server step sees each device's capped
    weight, exactly what the statistics phase gave it (models.detection.screening.capped_weights)."""
    claims = np.array([100.0] * 10 + [1e12])
    server: State = weight_caps(claims, DEFAULT_GUARD).state()
    ids = np.array([0, 3, 10])
    close_round(Open(), server, ids, {"x": np.ones((3, 1))}, claims[ids])
    np.testing.assert_array_equal(server["seen"][2], capped_weights(claims, DEFAULT_GUARD)[ids])
    assert server["seen"][2][-1] < 1.2  # 10^12 claimed records weigh about as much as 100


def test_without_caps_the_weights_pass_unchanged():
    server: State = {}
    close_round(Open(), server, np.array([0, 1]), {"x": np.ones((2, 1))}, np.array([5.0, 1e9]))
    np.testing.assert_array_equal(server["seen"][2], [5.0, 1e9])


def reference_level(counts: np.ndarray, guard: Guard) -> float:
    """The cap level by bisection: the largest L <= count_cap * median at which no device holds more than
    max(max_share, 1/n) of sum(min(c, L))."""
    share = max(guard.max_share, 1 / len(counts))
    lo, hi = 0.0, min(guard.count_cap * float(np.median(counts)), float(counts.max()))
    if hi <= share * np.minimum(counts, hi).sum():
        return hi
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid <= share * np.minimum(counts, mid).sum() * (1 + 1e-12) else (lo, mid)
    return lo


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1, 1e9), min_size=1, max_size=40), st.sampled_from([0.05, 0.1, 0.3, 1.0]),
       st.sampled_from([1.5, 2.0, 10.0]))
def test_weight_caps_match_water_filling(counts, max_share, count_cap):
    c = np.array(counts)
    guard = Guard(max_share=max_share, count_cap=count_cap)
    w = capped_weights(c, guard)
    assert np.isclose(w.mean(), 1.0)
    assert np.all(np.diff(w[np.argsort(c, kind="stable")]) >= -1e-12)  # order kept
    assert w.max() / w.sum() <= max(max_share, 1 / len(c)) * (1 + 1e-9)
    caps = weight_caps(c, guard)
    assert np.isclose(min(caps.level, c.max()), reference_level(c, guard), rtol=1e-6)
    np.testing.assert_array_equal(caps.apply(c), w)


def test_the_support_rule_counts_supporters_and_caps_the_colluders_mass():
    counts = np.array([0, 1, 2, 3, 40])
    assert support_mask(SupportView(counts, 100, 3)).tolist() == [False, False, False, True, True]
    assert support_mask(SupportView(counts, 5, 3)).tolist() == [False, False, True, True, True]  # 5 devices: 2
    assert support_mask(SupportView(counts, 100, 0)).all()  # switched off
    owned = np.array([0.0, 0.0, 0.0, 0.95, 0.1])  # unit 3: its 2 heaviest devices hold 95 % of its mass
    view = SupportView(counts, 100, 3, 0.8, lambda m: owned if m == 2 else np.zeros(5))
    assert support_mask(view).tolist() == [False, False, False, False, True]
    alone = SupportView(np.array([0, 3]), 100, 3, 0.8, lambda m: np.array([0.0, 0.99]))
    assert support_mask(alone).tolist() == [False, True]  # never no unit at all: the count-only model


class Units(Open):
    """A model of 3 units, the last supported by one device only."""

    def support_view(self, server):
        return SupportView(np.array([5, 4, 1]), 10, 3)

    def restrict(self, server, broadcast, shared):
        server["restricted"] = shared
        return {**broadcast, "shared": shared}


def test_close_round_applies_the_support_rule_to_the_broadcast():
    server: State = {}
    _, broadcast = close_round(Units(), server, np.array([0]), {"x": np.ones((1, 1))}, np.ones(1))
    assert broadcast["shared"].tolist() == [True, True, False] and server["restricted"].tolist() == [True, True, False]
    _, broadcast = close_round(Units(), {}, np.array([0]), {"x": np.ones((1, 1))}, np.ones(1), rules=())
    assert "shared" not in broadcast

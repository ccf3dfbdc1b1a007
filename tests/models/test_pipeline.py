"""The aggregation pipeline (models.core.pipeline): every family's answers pass its stages before the server step, in
the simulators and the coordinator alike."""

from __future__ import annotations

import numpy as np

from models.core.federated import FederatedAlgorithm, State
from models.core.pipeline import Answers, close_round, validate


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


def test_no_screen_passes_everything():
    class Open(Recorder):
        def screen(self, server, client_ids, uploads):
            return None

    answers = Answers(np.array([3, 4]), {"x": np.zeros((2, 1))}, np.ones(2))
    assert validate(Open(), {}, answers) is answers

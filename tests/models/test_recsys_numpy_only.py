"""Federated recommendation client steps run on edge agents (numpy and paho-mqtt only): nothing they
import or call may need scipy. Checked in fresh interpreters, since this test session has scipy loaded."""

import subprocess
import sys

CLIENT_MODULES = ("models.recsys", "models.recsys.fedmc_admm", "models.recsys.fedmavg", "models.recsys.altgdmin",
                  "models.recsys.data", "models.recsys.recommend")

# Refuse any import of scipy, then run every federated algorithm's client steps on synthetic clients.
RUN_CLIENT_STEPS = """
import sys


class NoScipy:
    def find_spec(self, name, path=None, target=None):
        if name == "scipy" or name.startswith("scipy."):
            raise ImportError("scipy is not available on an edge agent")


sys.meta_path.insert(0, NoScipy())

import numpy as np

from models.recsys import FEDERATED, make_algorithm
from models.recsys.data import client_data, split_users, stack
from models.recsys.synthetic import generate_ratings

r = generate_ratings(n_users=40, n_items=60, rank=3, mean_ratings=15, min_ratings=4, seed=0)
parts = split_users(r.n_users, 4, "random", np.random.default_rng(0))
data = client_data(r, parts, float(r.rating.mean()))
for name in FEDERATED:
    alg = make_algorithm(name, r.n_items, 3)
    server, broadcast = alg.init_server(len(parts), np.random.default_rng(0))
    for batch in ([data[0]], data):  # one device, and a simulated round's batch
        d = stack(batch)
        state = stack([alg.init_clients(x, broadcast) for x in batch])
        if alg.setup_rounds:
            alg.client_setup(state, d, broadcast)
        state, uploads = alg.client_update(state, d, broadcast)
        alg.client_finish(state, broadcast)
        assert all(np.isfinite(v).all() for v in uploads.values() if v.dtype.kind == "f"), name
print("scipy" in sys.modules)
"""


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_client_step_modules_import_without_scipy():
    assert run(f"import sys; import {', '.join(CLIENT_MODULES)}; print('scipy' in sys.modules)") == "False"


def test_client_steps_run_with_scipy_unavailable():
    assert run(RUN_CLIENT_STEPS) == "False"

"""Seed 003's dictionary-learning experiments (Sec. 6, Figs. 1-2): FedMM against the "naive" algorithm that runs
the same steps in the parameter space, and FedMM with and without control variates, on synthetic Z = theta* h data
(homogeneous: every client holds the same 250 records; heterogeneous: 5,000 records split into equal clusters by a
balanced k-means) and on a ratings matrix (users x the most rated items), split the same way.

Per round: the objective (eq. 28) over every client's records, E_p = ||theta_{t+1} - theta_t||^2 / gamma^2 and
E_s = ||S_{t+1} - S_t||^2 / gamma^2, with S = (S_hat) for FedMM and S = mean_i E_i[S(Z, theta)] for the naive one.

Both are the algorithm of models.dictionary.fedmm (`FedMMDictionary`): the naive one (`NaiveDictionary`) overrides
only what is aggregated (theta_i = T(S_i) instead of S_i) and the server's map (theta itself, no projection)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.core.federated import State
from models.dictionary.codes import lasso_codes, objective_terms, statistics
from models.dictionary.fedmm import FedMMDictionary, dictionary, quantized

SETTINGS = ("homogeneous", "heterogeneous", "ratings")


def synthetic(p: int, K: int, records: int, rng: np.random.Generator) -> np.ndarray:
    """Z = theta* h, theta* entries N(0, 1), h with 20 % of its entries non-zero, N(0, 1) (records x p)."""
    theta = rng.standard_normal((p, K))
    H = rng.standard_normal((records, K)) * (rng.random((records, K)) < 0.2)
    return H @ theta.T


class NaiveDictionary(FedMMDictionary):
    """The paper's naive baseline: each client optimises its own surrogate (theta_i = T(S_i)) and the same steps
    (control variates, 1/p, Quant, step gamma_t) run on theta: the aggregation in the parameter space."""

    name = "naive"

    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        server, _ = super().init_server(n_clients, rng)
        server["theta"] = dictionary(server["S1"], server["S2"], self.eta)
        return server, self.broadcast_of(server)

    def broadcast_of(self, server: State) -> State:
        theta = server.get("theta")
        return super().broadcast_of(server) if theta is None else {**server, "theta": theta}

    def client_update(self, state: State, data: State, broadcast: State) -> tuple[State, State]:
        thetas = [dictionary(*statistics(X, broadcast["theta"], self.lam, self.code_steps, self.tol), self.eta)
                  for X in data["X"]]
        D = quantized(np.stack(thetas) - broadcast["theta"] - state["V2"], self.bits)
        return {**state, "V2": state["V2"] + self.alpha / float(broadcast["p"]) * D}, {"theta": D}

    def screen(self, server: State, client_ids: np.ndarray, uploads: State) -> np.ndarray | None:
        return None

    def server_update(self, server: State, client_ids: np.ndarray, uploads: State,
                      weight: np.ndarray) -> tuple[State, State]:
        server["t"] = np.array(int(server["t"]) + 1)
        p = float(server["p"])
        mu = np.asarray(weight, dtype=float) / float(server["mu_total"])
        sent = np.einsum("b,bij->ij", mu, uploads["theta"]) / p
        gamma = self.step_size(int(server["t"]))
        server["theta"] = server["theta"] + gamma * (server["V2"] + sent)
        server["V2"] = server["V2"] + self.alpha * sent
        return server, self.broadcast_of(server)


@dataclass
class Trace:
    objective: list[float]
    parameter_change: list[float]  # E_p
    surrogate_change: list[float]  # E_s


#: the evaluation's codes (every record of every client, each evaluated round): a looser stop than training's
EVAL_TOL = 1e-5


def evaluate(parts: list[np.ndarray], theta: np.ndarray, lam: float, eta: float
             ) -> tuple[float, tuple[np.ndarray, np.ndarray]]:
    """The objective (eq. 28) at theta and mean_i E_i[S(Z, theta)], clients weighted equally (mu_i = 1/n, as in
    the paper), from one solve of every record's codes."""
    losses, S1, S2 = [], [], []
    for x in parts:
        H = lasso_codes(x, theta, lam, tol=EVAL_TOL)
        losses.append(objective_terms(x, H, theta, lam).mean())
        S1.append(H.T @ H / len(x))
        S2.append(x.T @ H / len(x))
    return float(np.mean(losses) + eta * np.sum(theta**2)), (np.mean(S1, axis=0), np.mean(S2, axis=0))


def run(alg: FedMMDictionary, parts: list[np.ndarray], rounds: int, share: float, batch: int | None,
        seed: int, every: int = 1) -> Trace:
    """`rounds` rounds with `share` of the clients active (a fixed-size sample), each computing its statistics on
    `batch` records drawn afresh (None: all of its records: exact expectations); measured every `every` rounds
    (the changes E_p, E_s over the last round of each stretch)."""
    rng = np.random.default_rng(seed)
    n = len(parts)
    server, _ = alg.init_server(n, rng)
    server, broadcast = alg.attach_fleet(server, np.ones(n), share)
    data = {"X": np.empty(n, dtype=object)}
    for i, x in enumerate(parts):
        data["X"][i] = x
    states = alg.init_clients(data, broadcast)
    naive = isinstance(alg, NaiveDictionary)
    first, pooled = evaluate(parts, broadcast["theta"], alg.lam, alg.eta)
    trace = Trace([first], [], [])
    per_round = max(1, int(round(share * n)))
    for t in range(1, rounds + 1):
        measured = t % every == 0 or t == rounds
        if measured and naive and t > 1:
            pooled = evaluate(parts, broadcast["theta"], alg.lam, alg.eta)[1]
        S_before = pooled if naive else (server["S1"], server["S2"])
        ids = np.sort(rng.choice(n, per_round, replace=False))
        X = np.empty(per_round, dtype=object)
        for j, i in enumerate(ids):
            X[j] = parts[i] if batch is None or batch >= len(parts[i]) else \
                parts[i][rng.choice(len(parts[i]), batch, replace=False)]
        theta_before = broadcast["theta"]
        new, up = alg.client_update({k: v[ids] for k, v in states.items()}, {"X": X}, broadcast)
        for k in states:
            states[k][ids] = new[k]
        server, broadcast = alg.server_update(server, ids, up, np.ones(per_round))
        if not measured:
            continue
        gamma2 = alg.step_size(int(server["t"])) ** 2
        value, pooled = evaluate(parts, broadcast["theta"], alg.lam, alg.eta)
        S_after = pooled if naive else (server["S1"], server["S2"])
        trace.objective.append(value)
        trace.parameter_change.append(float(np.sum((broadcast["theta"] - theta_before) ** 2)) / gamma2)
        trace.surrogate_change.append(float(sum(np.sum((a - b) ** 2) for a, b in zip(S_after, S_before))) / gamma2)
    return trace


def figures(parts_of: dict[str, list[np.ndarray]], atoms: int, rounds: int, seeds: int, beta: float,
            lam: float = 0.1, eta: float = 0.2, share: float = 0.5, batch: int = 50, every: int = 1
            ) -> dict[str, Any]:
    """Fig. 1 (fedmm against naive: 8-bit uploads, alpha 0.01, `batch` records per active client) and Fig. 2
    (fedmm with alpha 0 and 0.01, exact expectations, no quantisation), each averaged over `seeds` runs."""
    out: dict[str, Any] = {}
    for setting, parts in parts_of.items():
        p = parts[0].shape[1]
        runs = {
            "fig1_fedmm": (FedMMDictionary(p, atoms, lam, eta, beta, 0.01, bits=8), batch),
            "fig1_naive": (NaiveDictionary(p, atoms, lam, eta, beta, 0.01, bits=8), batch),
            "fig2_alpha_0": (FedMMDictionary(p, atoms, lam, eta, beta, 0.0), None),
            "fig2_alpha_0.01": (FedMMDictionary(p, atoms, lam, eta, beta, 0.01), None),
        }
        out[setting] = {}
        for name, (alg, b) in runs.items():
            traces = [run(alg, parts, rounds, share, b, seed, every) for seed in range(seeds)]
            out[setting][name] = {k: np.mean([getattr(t, k) for t in traces], axis=0).tolist()
                                  for k in ("objective", "parameter_change", "surrogate_change")}
    return out

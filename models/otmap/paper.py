"""Seed 003's transport-map experiment (Sec. 7.3, Fig. 3) on generated data: FedMM-OT against FedAdam (and the
pseudo-MM averaging), L2-UVP per round.

The benchmark pair follows Korotin et al. (2021b) without their downloads: P_d a mixture of three Gaussians, the
true map the gradient of a random input-convex network (so it is a W2-optimal map, Brenier), Q_d = m*(P_d). P's
records are split among the clients by a balanced k-means (the paper's constrained k-means); the server holds
records of Q. L2-UVP is measured on fresh records of P."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.core.federated import State
from models.otmap.fedmm import ALGORITHMS, FedMMOT
from models.otmap.icnn import Layout, init, project, transport
from models.otmap.objective import l2_uvp
from models.otmap.simulator import train
from models.partition import balanced_split


@dataclass
class Benchmark:
    parts: list[np.ndarray]  # the clients' records of P
    Y: np.ndarray  # the server's records of Q
    X_test: np.ndarray  # fresh records of P
    true_test: np.ndarray  # m*(X_test)


def true_map(d: int, rng: np.random.Generator, hidden: int = 32) -> tuple[Layout, np.ndarray]:
    """A random convex potential: an ICNN with non-negative z-path weights of order one and a random positive
    definite quadratic part, so that its gradient is a non-linear W2-optimal map."""
    layout = Layout(d, hidden)
    v = layout.unpack(init(layout, rng).copy())
    v["W0"][:] = rng.standard_normal((hidden, d)) / np.sqrt(d)
    v["A1"][:] = rng.random((hidden, hidden)) / hidden
    v["W1"][:] = rng.standard_normal((hidden, d)) / np.sqrt(d)
    v["a"][:] = rng.random(hidden) * 8 / hidden
    v["L"][:] = np.eye(d) + 0.8 * rng.standard_normal((d, d)) / np.sqrt(d)
    return layout, project(layout, layout.pack(v))


def mixture(d: int, n: int, rng: np.random.Generator, means: np.ndarray) -> np.ndarray:
    """n records of an equal-weight mixture of Gaussians with these means and unit covariance."""
    which = rng.integers(len(means), size=n)
    return means[which] + rng.standard_normal((n, d))


def benchmark(d: int, clients: int, per_client: int, rng: np.random.Generator) -> Benchmark:
    means = rng.standard_normal((3, d))  # per feature: mean 0, variance 2, as standardised records about
    layout, v = true_map(d, rng)
    n = clients * per_client
    parts = balanced_split(mixture(d, n, rng, means), clients, rng)
    Y = transport(layout, v, mixture(d, n, rng, means))
    X_test = mixture(d, 4000, rng, means)
    return Benchmark(parts, Y, X_test, transport(layout, v, X_test))


def run(alg: FedMMOT, b: Benchmark, rounds: int, share: float, seed: int, every: int = 1) -> list[float]:
    """L2-UVP before the first round and every `every` rounds, `share` of the clients (mu_i = 1/n) per round."""
    curve: list[float] = []

    def measure(t: int, broadcast: State) -> None:
        if t % every == 0 or t == rounds:
            curve.append(uvp(alg, broadcast, b))

    train(alg, b.parts, b.Y, rounds, share, seed, on_round=measure)
    return curve


def uvp(alg: FedMMOT, broadcast: State, b: Benchmark) -> float:
    value = l2_uvp(transport(alg.layout, broadcast["omega"], b.X_test), b.true_test)
    return value if np.isfinite(value) else float("inf")


def figure(d: int, rounds: int, share: float, seeds: int, every: int,
           settings: dict[str, tuple[str, dict[str, Any]]], clients: int = 10, per_client: int = 1000
           ) -> dict[str, list[float]]:
    """Fig. 3 for one dimension: each run's L2-UVP curve (settings[label]: its algorithm and parameters),
    averaged over `seeds` benchmarks and runs."""
    curves: dict[str, list[list[float]]] = {name: [] for name in settings}
    for seed in range(seeds):
        b = benchmark(d, clients, per_client, np.random.default_rng(1000 * d + seed))
        for name in settings:
            algorithm, params = settings[name]
            curves[name].append(run(ALGORITHMS[algorithm](d, **params), b, rounds, share, seed, every))
    return {name: np.mean(c, axis=0).tolist() for name, c in curves.items()}

"""The otmap server step (100 uploads of 1,000 devices, 10 % a round) with the theta steps' gradient taken from
`target_terms` (before) and from `theta_grad` (after), timed in one process and interleaved so that both see the
same load. The figures are in the README's otmap section.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/otmap_theta_steps.py"""

from __future__ import annotations

import timeit

import numpy as np

import models.otmap.fedmm as fedmm
from models.otmap.objective import target_terms, theta_grad


def before(layout, omega, theta, Y, lam):  # type: ignore[no-untyped-def]
    return target_terms(layout, omega, theta, Y, lam)[2]


def server_step(d: int) -> dict[str, float]:
    """The fastest server step (s) of each version at d features."""
    rng = np.random.default_rng(0)
    alg = fedmm.FedMMOT(d)
    server, _ = alg.init_server(1000, rng)
    server, _ = alg.attach_fleet(server, np.ones(1000), 0.1)
    server = alg.attach_target(server, rng.standard_normal((20_000, d)))
    ids, uploads = np.arange(100), {"grad": rng.standard_normal((100, alg.layout.size)) * 0.01}
    best: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(6):
        for name, grad in (("before", before), ("after", theta_grad)):
            fedmm.theta_grad = grad  # type: ignore[assignment]
            best[name].append(min(timeit.repeat(
                lambda: alg.server_update(dict(server), ids, uploads, np.ones(100)), number=1, repeat=3)))
    fedmm.theta_grad = theta_grad
    return {k: min(v) for k, v in best.items()}


def main() -> None:
    for d in (22, 34):  # ton-iot's and nsl-kdd's features
        t = server_step(d)
        print(f"{d} features: server step {1000 * t['before']:.1f} ms before, {1000 * t['after']:.1f} ms after")


if __name__ == "__main__":
    main()

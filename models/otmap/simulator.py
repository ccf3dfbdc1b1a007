"""FedMM-OT (or a baseline) run in process on clients' records: the same client and server steps the agents and the
coordinator take, with a round's sample drawn from the seed."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from models.core.federated import State
from models.otmap.fedmm import FedMMOT


def train(alg: FedMMOT, parts: Sequence[np.ndarray], Y: np.ndarray, rounds: int, share: float, seed: int,
          weight: np.ndarray | None = None, on_round: Callable[[int, State], None] | None = None,
          moments: bool | tuple[np.ndarray, np.ndarray] | None = False) -> State:
    """`rounds` rounds with `share` of the clients (records `parts`, weights `weight`: equal when None) sampled
    each round, Q's records Y at the server; on_round(t, broadcast) after each. `moments`: start from the affine
    map matching the pooled per-feature means and variances (`FedMMOT.start_from_moments`; the clients' counts,
    sums and sums of squares), or from the (mean, variance) given. Returns the last broadcast."""
    rng = np.random.default_rng(seed)
    n = len(parts)
    w = np.ones(n) if weight is None else np.asarray(weight, dtype=float)
    server, _ = alg.init_server(n, rng)
    server, broadcast = alg.attach_fleet(server, w, share)
    server = alg.attach_target(server, Y)
    if isinstance(moments, tuple):
        server, broadcast = alg.start_from_moments(server, *moments)
    elif moments:
        pooled = np.concatenate(list(parts))
        server, broadcast = alg.start_from_moments(server, pooled.mean(axis=0), pooled.var(axis=0))
    per_round = max(1, int(round(share * n)))
    if on_round is not None:
        on_round(0, broadcast)
    for t in range(1, rounds + 1):
        ids = np.sort(rng.choice(n, per_round, replace=False))
        X = np.empty(per_round, dtype=object)
        for j, i in enumerate(ids):
            X[j] = parts[i]
        _, up = alg.client_update({}, {"X": X}, broadcast)
        server, broadcast = alg.server_update(server, ids, up, w[ids])
        if on_round is not None:
            on_round(t, broadcast)
    return broadcast

"""What the recommendation runs share, federated or centralised: the clients' ratings after the statistics phase,
the evaluation (test RMSE/MAE on the original scale, the training objective) and a run's result."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.core.federated import State
from models.recsys.data import Ratings, client_data, global_mean
from models.recsys.factors import predict_pairs
from models.recsys.metrics import mae, rmse


@dataclass
class ClientRatings:
    """What the clients hold after the statistics phase: their (centred) training ratings, batched."""

    train: Ratings
    parts: list[np.ndarray]  # global user indices per client
    mean: float  # global mean rating, from each client's count and sum
    data: list[State]  # each client's arrays as a batch of one (`client_data`)
    weight: np.ndarray  # (N,) each client's share of the training ratings, n_i / mean(n)

    @property
    def n_clients(self) -> int:
        return len(self.parts)


def prepare_clients(train: Ratings, parts: list[np.ndarray]) -> ClientRatings:
    """Statistics phase: every client sends its rating count and sum once; the global mean follows."""
    owner = np.empty(train.n_users, dtype=np.int64)
    for c, users in enumerate(parts):
        owner[users] = c
    rated_by = owner[train.user]
    counts = np.bincount(rated_by, minlength=len(parts)).astype(float)
    sums = np.bincount(rated_by, weights=train.rating, minlength=len(parts))
    del rated_by
    mean = global_mean(counts, sums)
    weight = counts / counts.mean() if counts.mean() > 0 else np.ones(len(parts))
    return ClientRatings(train, parts, mean, client_data(train, parts, mean), weight)


#: ratings evaluated at a time: two (chunk, rank+1) float64 gathers, about 350 MB each at rank 10
EVAL_CHUNK = 1 << 22


class Evaluator:
    """Test RMSE/MAE (original scale, clipped, pooled) and the training objective per training rating.

    Predictions are made `chunk` ratings at a time (gathering every rating's user and item rows at once
    would take 2 x 8 (rank+1) bytes per rating: 17 GB for 100M ratings at rank 10) into one array of
    per-rating values, which is then reduced exactly as before: the figures do not depend on `chunk`."""

    def __init__(self, clients: ClientRatings, test: Ratings, chunk: int = EVAL_CHUNK):
        if chunk < 1:
            raise ValueError("chunk must be at least 1")
        self.clients, self.test, self.chunk = clients, test, int(chunk)

    def predictions(self, P: np.ndarray, Q: np.ndarray, ratings: Ratings, offset: float) -> np.ndarray:
        """predict_pairs(P[user], Q[item]) - (rating - offset) for every rating, chunk by chunk."""
        out = np.empty(len(ratings))
        for s in range(0, len(ratings), self.chunk):
            e = min(s + self.chunk, len(ratings))
            u, i = ratings.user[s:e], ratings.item[s:e]
            out[s:e] = predict_pairs(P[u], Q[i]) - (ratings.rating[s:e] - offset)
        return out

    def __call__(self, P: np.ndarray, Q: np.ndarray, penalty: float) -> dict[str, float]:
        t, tr, mean = self.test, self.clients.train, self.clients.mean
        pred = np.empty(len(t))
        for s in range(0, len(t), self.chunk):
            e = min(s + self.chunk, len(t))
            pred[s:e] = predict_pairs(P[t.user[s:e]], Q[t.item[s:e]])
        pred += mean
        np.clip(pred, t.rating_min, t.rating_max, out=pred)
        test_rmse, test_mae = rmse(pred, t.rating), mae(pred, t.rating)
        del pred
        resid = self.predictions(P, Q, tr, mean)
        half_sq = 0.5 * (resid @ resid)
        np.square(resid, out=resid)
        return {"test_rmse": test_rmse, "test_mae": test_mae,
                "train_rmse": float(np.sqrt(np.mean(resid))),
                "objective": float((half_sq + penalty) / max(len(resid), 1))}


@dataclass
class RecsysRun:
    user_factors: np.ndarray  # (n_users, rank+1), gathered from the clients for evaluation
    item_factors: np.ndarray  # (n_items, rank+1)
    history: list[dict[str, float]]
    seconds_per_round: float
    upload_bytes_per_client_round: float
    setup_seconds: float = 0.0
    states: list[State] | None = None  # each client's final state (federated runs)
    #: mean plaintext upload per device and round, setup rounds included (federated runs)
    upload_bytes_per_device_round: float | None = None

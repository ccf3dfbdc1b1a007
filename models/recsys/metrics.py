"""Rating-prediction metrics on the original scale, pooled over all test ratings."""

from __future__ import annotations

import numpy as np

from models.recsys.factors import predict_pairs


def predict(mean: float, user_factors: np.ndarray, item_factors: np.ndarray, users: np.ndarray,
            items: np.ndarray, rating_min: float = -np.inf, rating_max: float = np.inf) -> np.ndarray:
    """Predicted ratings on the original scale, clipped to the declared range (a rating of 5.4 is a 5)."""
    r = mean + predict_pairs(user_factors[users], item_factors[items])
    return np.clip(r, rating_min, rating_max)


def rmse(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(pred) - np.asarray(truth)) ** 2)))


def mae(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(pred) - np.asarray(truth))))

"""Training on traffic that is not clean: leave the most suspicious records out of the statistics.

Two criteria:

- ``distance`` (default): squared distance of a record from the global mean in the standardised
  space. The cut is the federated (1 - Q) quantile over every client's records (histograms only, no
  pooling), so clients that hold many attacks lose many records and clean clients few.
- ``residual``: reconstruction error under the current consensus Z, re-evaluated every time a client
  is sampled; each client drops its own worst fraction Q. This is the textbook rule, but a coherent
  block of attacks (a flood of near-identical records) becomes a principal direction, is then
  reconstructed *well* and survives the trim: the benchmark shows it failing where ``distance`` works.
"""

from __future__ import annotations

import numpy as np

from models.detection.threshold import federated_quantile

TRIM_CRITERIA = ("distance", "residual")


def squared_norms(X: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", X, X)


def residuals(X: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """Squared reconstruction error of standardised records against an orthonormal Z."""
    P = X @ Z
    return np.maximum(squared_norms(X) - squared_norms(P), 0.0)


def distance_masks(X: list[np.ndarray], trim: float) -> list[np.ndarray]:
    """Per client, the records under the federation-wide (1 - trim) quantile of squared distance."""
    norms = [squared_norms(x) for x in X]
    cut = federated_quantile(norms, 1 - trim)
    return [n <= cut for n in norms]


def residual_mask(X: np.ndarray, Z: np.ndarray, trim: float) -> np.ndarray:
    """The client's records outside its own worst `trim` fraction of reconstruction errors."""
    e = residuals(X, Z)
    return e <= np.quantile(e, 1 - trim)


def second_moment(X: np.ndarray) -> np.ndarray:
    return X.T @ X / max(len(X), 1)

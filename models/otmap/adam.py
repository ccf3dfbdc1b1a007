"""Adam (Kingma and Ba 2015) as a pure step over a flat parameter vector: the server's optimiser for theta
(FedMM-OT's line 16) and FedAdam's (Reddi et al. 2021) server update."""

from __future__ import annotations

import numpy as np


def adam_state(size: int) -> dict[str, np.ndarray]:
    return {"m": np.zeros(size), "v": np.zeros(size), "k": np.zeros(())}


def adam_step(x: np.ndarray, grad: np.ndarray, state: dict[str, np.ndarray], lr: float,
              betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> np.ndarray:
    """x moved one Adam step against `grad`; `state` (moments, step count) updated in place."""
    b1, b2 = betas
    state["k"] = state["k"] + 1
    k = float(state["k"])
    state["m"] = b1 * state["m"] + (1 - b1) * grad
    state["v"] = b2 * state["v"] + (1 - b2) * grad**2
    m_hat, v_hat = state["m"] / (1 - b1**k), state["v"] / (1 - b2**k)
    return x - lr * m_hat / (np.sqrt(v_hat) + eps)

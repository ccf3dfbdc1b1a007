"""What every federated recommendation algorithm adds to the generic contract.

Client data are the arrays of `models.recsys.data.client_data` (a batch of one per device; `data.stack`
pads several), ratings centred on the global mean. Every algorithm keeps the clients' private *user
factors* in their state under ``user_factors`` (packed ``[u_t, b_t]``, see `models.recsys.factors`) and
broadcasts the shared *item factors* under ``item_factors`` (packed ``[v_j, c_j]``) with ``item_seen``
marking the items some client has trained. Uploads carry ``items`` / ``item_mask`` (the global item ids
a client holds) and one row per such item.

One addition to the contract: an optional setup phase of `setup_rounds` rounds in which *every* client
calls `client_setup` and the server `server_setup`, before round 1 (AltGDMin's spectral initialisation).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from models.core.federated import FederatedAlgorithm, State
from models.recsys.factors import regularizer_value

REGULARIZERS = ("l2", "l1")


class RecsysAlgorithm(FederatedAlgorithm):
    #: rounds with every client before round 1 (spectral initialisations); 0 for most algorithms
    setup_rounds: int = 0
    #: the uploads (training and setup) whose server aggregate is a sum over the devices, and the kind of bound
    #: each is clipped to in private mode (models.recsys.private); empty: the algorithm cannot run in private mode
    summed: ClassVar[dict[str, str]] = {}

    def __init__(self, n_items: int, rank: int = 10, lam: float = 10.0, gamma: float = 10.0,
                 regularizer: str = "l2", init_scale: float = 0.1):
        if n_items < 1:
            raise ValueError("n_items must be at least 1")
        if not 1 <= rank < n_items:
            raise ValueError(f"rank must be between 1 and {n_items - 1} (the number of items - 1), got {rank}")
        if lam < 0 or gamma < 0:
            raise ValueError("the regularisation weights lam and gamma must be non-negative")
        if regularizer not in REGULARIZERS:
            raise ValueError(f"unknown regularizer {regularizer!r}; choose from {', '.join(REGULARIZERS)}")
        self.n_items = int(n_items)
        self.rank = int(rank)
        self.lam = float(lam)
        self.gamma = float(gamma)
        self.regularizer = regularizer
        self.init_scale = float(init_scale)

    @property
    def width(self) -> int:
        """Columns of a packed factor row: rank factors and one bias."""
        return self.rank + 1

    def random_items(self, rng: np.random.Generator) -> np.ndarray:
        """Small random item factors with zero biases: the usual symmetric-breaking start."""
        V = self.init_scale * rng.standard_normal((self.n_items, self.width))
        V[:, -1] = 0.0
        return V

    def zero_users(self, data: State) -> np.ndarray:
        b, M = data["user_mask"].shape
        return np.zeros((b, M, self.width))

    def item_factors(self, broadcast: State) -> np.ndarray:
        """The shared item model for predictions: rows of items no client has trained are zero (no
        information: the prediction falls back to the global mean and the user's bias)."""
        return np.where(broadcast["item_seen"][:, None], broadcast["item_factors"], 0.0)

    def describe(self) -> dict:
        """Hyper-parameters, for the run's JSON."""
        return {k: v for k, v in vars(self).items() if k not in ("n_items", "rank")}

    def penalty(self, user_factors: np.ndarray, item_factors: np.ndarray) -> float:
        """Regularisation part of the training objective."""
        return (regularizer_value(user_factors, self.lam, self.regularizer)
                + regularizer_value(item_factors, self.gamma, self.regularizer))

    def payload_bytes(self, uploads: State) -> np.ndarray:
        """Bytes each client of the batch actually sends (without padding): item ids as int32 and one
        float64 row of rank + 1 per item it holds, unless the algorithm says otherwise."""
        n = uploads["item_mask"].sum(axis=1)
        return n * (4 + 8 * self.width)

    def upload_bytes(self) -> int:
        """Upper bound: a row for every item (a client that rated all of them)."""
        return self.n_items * (4 + 8 * self.width)

    def broadcast_bytes(self) -> int:
        """The item factors (and which items were seen)."""
        return self.n_items * (1 + 8 * self.width)

    def client_bytes(self) -> int:
        """The item factors as broadcast, the device's copy and its upload (every item at worst)."""
        return 2 * self.broadcast_bytes() + self.upload_bytes()

    # setup phase (all clients, before round 1); nothing by default
    def client_setup(self, state: State, data: State, broadcast: State) -> State:
        return {}

    def server_setup(self, server: State, uploads: State) -> tuple[State, State]:
        raise NotImplementedError


def held(uploads: State, c: int, *keys: str) -> tuple[np.ndarray, ...]:
    """Client c's item ids and its rows of `keys` in a batch of uploads, without the padding (views when
    the real items come first, as they do from `data.stack`)."""
    mask = uploads["item_mask"][c]
    n = int(mask.sum())
    if mask[:n].all():
        return (uploads["items"][c, :n], *(uploads[k][c, :n] for k in keys))
    return (uploads["items"][c][mask], *(uploads[k][c][mask] for k in keys))

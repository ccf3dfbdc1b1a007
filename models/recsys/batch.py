"""A batch of clients' ratings flattened into one block-diagonal sparse problem.

Client c's local user m becomes row c*M + m, and each real (unpadded) item slot of each client becomes
one column, so a whole round's clients are handled by a few sparse products instead of a Python loop
over clients, and no work is spent on padding. Built once per client step from the padded arrays of
`data.client_arrays`; `gather` and `scatter` move item-side arrays between the padded (b, J, ...) layout
of the client state and the compact (slots, ...) layout used for the arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from models.federated import State
from models.recsys.factors import normal_equations, predict_pairs


@dataclass
class RatingBatch:
    n_clients: int
    M: int  # padded users per client
    J: int  # padded item slots per client
    rows: np.ndarray  # (nnz,) flat user row of each rating, non-decreasing
    cols: np.ndarray  # (nnz,) compact item slot of each rating
    target: np.ndarray  # (nnz,) centred rating
    ptr: np.ndarray  # (n_clients*M + 1,) offsets of each user's ratings
    user_valid: np.ndarray  # (n_clients*M,) real users (not padding)
    slots: np.ndarray  # (n_slots,) flat padded index c*J + j of each real item slot
    slot_client: np.ndarray  # (n_slots,) the client of each slot
    item_ids: np.ndarray  # (n_slots,) global item index of each slot
    slot_counts: np.ndarray  # (n_clients,) real item slots per client
    prefix: bool  # every client's real slots come first (as `data.stack` pads): copies instead of gathers

    @classmethod
    def of(cls, data: State) -> RatingBatch:
        b, M = data["user_mask"].shape
        J = data["items"].shape[1]
        item_mask = data["item_mask"].reshape(-1)
        slots = np.flatnonzero(item_mask)
        compact = np.cumsum(item_mask) - 1
        mask = data["mask"]
        c = np.nonzero(mask)[0]
        rows = c * M + data["user"][mask]
        cols = compact[c * J + data["item"][mask]]
        ptr = np.searchsorted(rows, np.arange(b * M + 1))
        counts = data["item_mask"].sum(axis=1)
        prefix = bool(np.array_equal(slots, np.concatenate([c * J + np.arange(n) for c, n in enumerate(counts)])))
        return cls(b, M, J, rows, cols, data["rating"][mask], ptr, data["user_mask"].reshape(-1), slots,
                   slots // J, data["items"].reshape(-1)[slots], counts, prefix)

    @property
    def nnz(self) -> int:
        return len(self.rows)

    @property
    def n_slots(self) -> int:
        return len(self.slots)

    def gather(self, padded: np.ndarray) -> np.ndarray:
        """(b, J, ...) -> (n_slots, ...)."""
        if self.prefix:
            return np.concatenate([padded[c, :n] for c, n in enumerate(self.slot_counts)])
        return padded.reshape(self.n_clients * self.J, *padded.shape[2:])[self.slots]

    def scatter(self, compact: np.ndarray) -> np.ndarray:
        """(n_slots, ...) -> (b, J, ...) with zeros in the padding."""
        out = np.zeros((self.n_clients, self.J, *compact.shape[1:]))
        if self.prefix:
            start = 0
            for c, n in enumerate(self.slot_counts):
                out[c, :n] = compact[start:start + n]
                start += n
        else:
            out.reshape(self.n_clients * self.J, *compact.shape[1:])[self.slots] = compact
        return out

    def matrix(self, values: np.ndarray) -> sparse.csr_matrix:
        """(users x item slots) sparse matrix with `values` at the rating positions."""
        return sparse.csr_matrix((values, self.cols, self.ptr), shape=(self.n_clients * self.M, self.n_slots))

    def residual(self, P: np.ndarray, Q: np.ndarray) -> np.ndarray:
        """prediction - rating at every rating, for flat packed user rows P and item-slot rows Q."""
        return predict_pairs(P[self.rows], Q[self.cols]) - self.target

    def user_grams(self, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per user: the Gram of its design rows [v_j, 1] and the right-hand side sum [v_j, 1](r - c_j)."""
        return normal_equations(Q[self.cols], self.target, self.ptr)

    def item_gradient(self, resid: np.ndarray, P: np.ndarray) -> np.ndarray:
        """d/dQ of 1/2 sum resid^2 per item slot: sum over its raters of resid [u_t, 1]."""
        E = P.copy()
        E[:, -1] = 1.0
        return np.asarray(self.matrix(resid).T @ E)

    def user_gradient(self, resid: np.ndarray, Q: np.ndarray) -> np.ndarray:
        """d/dP of 1/2 sum resid^2 per user: sum over its items of resid [v_j, 1]."""
        D = Q.copy()
        D[:, -1] = 1.0
        return np.asarray(self.matrix(resid) @ D)

    def item_side(self, P: np.ndarray, scale: np.ndarray | None = None) -> ItemSide:
        """The item-side least squares with the user rows P fixed (reused across local steps)."""
        return ItemSide(self, P, scale)

    def item_curvature(self, P: np.ndarray) -> np.ndarray:
        """A Lipschitz constant of each item slot's gradient: min(sum_t |[u_t, 1]|^2 over its raters,
        lambda_max of the client's whole [U, 1] Gram). Both bound lambda_max(sum_t e_t e_t')."""
        E = P * self.user_valid[:, None]
        E[:, -1] = self.user_valid
        trace = np.bincount(self.cols, weights=np.einsum("ij,ij->i", E, E)[self.rows], minlength=self.n_slots)
        Eb = E.reshape(self.n_clients, self.M, -1)
        small = Eb @ np.swapaxes(Eb, 1, 2) if Eb.shape[2] >= self.M else np.swapaxes(Eb, 1, 2) @ Eb
        lmax = np.linalg.eigvalsh(small)[:, -1]
        return np.minimum(trace, lmax[self.slot_client])

    def item_counts(self) -> np.ndarray:
        """Number of ratings per item slot."""
        return np.bincount(self.cols, minlength=self.n_slots)


class ItemSide:
    """Gradient of 1/2 sum (prediction - rating)^2 in the item-slot rows, for fixed user rows.

    The raters' design rows [u_t, 1] and offsets b_t - r_tj are gathered once, so a local step costs one
    gather of the item rows, one row-wise product and one sparse product. With `scale`, each slot's
    gradient comes multiplied by scale[slot] at no extra cost."""

    def __init__(self, batch: RatingBatch, P: np.ndarray, scale: np.ndarray | None = None):
        E = P.copy()
        E[:, -1] = 1.0
        self.E = E
        self.E_rows = E[batch.rows]
        self.offset = P[batch.rows, -1] - batch.target
        self.cols = batch.cols
        self.At = batch.matrix(np.arange(batch.nnz, dtype=float)).T.tocsr()
        self.order = self.At.data.astype(np.int64)
        self.entry_scale = None if scale is None else scale[self.cols[self.order]]

    def residual(self, Q: np.ndarray) -> np.ndarray:
        return np.einsum("ij,ij->i", self.E_rows, Q[self.cols]) + self.offset

    def gradient(self, Q: np.ndarray) -> np.ndarray:
        data = self.residual(Q)[self.order]
        if self.entry_scale is not None:
            data *= self.entry_scale
        self.At.data = data
        return self.At @ self.E

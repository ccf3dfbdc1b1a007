"""A batch of clients' ratings flattened into one block-diagonal sparse problem.

Client c's local user m becomes row c*M + m and its local item slot j becomes column c*J + j, so a
whole round's clients are handled by a few sparse products instead of a Python loop over clients.
Built once per client step from the padded arrays of `data.client_arrays`.
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
    cols: np.ndarray  # (nnz,) flat item slot of each rating
    target: np.ndarray  # (nnz,) centred rating
    ptr: np.ndarray  # (n_clients*M + 1,) offsets of each user's ratings
    user_valid: np.ndarray  # (n_clients*M,) real users (not padding)

    @classmethod
    def of(cls, data: State) -> RatingBatch:
        b, M = data["user_mask"].shape
        J = data["items"].shape[1]
        mask = data["mask"]
        c = np.nonzero(mask)[0]
        rows = c * M + data["user"][mask]
        cols = c * J + data["item"][mask]
        ptr = np.searchsorted(rows, np.arange(b * M + 1))
        return cls(b, M, J, rows, cols, data["rating"][mask], ptr, data["user_mask"].reshape(-1))

    @property
    def nnz(self) -> int:
        return len(self.rows)

    def matrix(self, values: np.ndarray) -> sparse.csr_matrix:
        """(users x item slots) sparse matrix with `values` at the rating positions."""
        return sparse.csr_matrix((values, self.cols, self.ptr), shape=(self.n_clients * self.M,
                                                                       self.n_clients * self.J))

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

    def item_curvature(self, P: np.ndarray) -> np.ndarray:
        """A Lipschitz constant of each item slot's gradient: min(sum_t |[u_t, 1]|^2 over its raters,
        lambda_max of the client's whole [U, 1] Gram). Both bound lambda_max(sum_t e_t e_t')."""
        E = P * self.user_valid[:, None]
        E[:, -1] = self.user_valid
        trace = np.asarray(self.matrix(np.ones(self.nnz)).T @ np.einsum("ij,ij->i", E, E))
        Eb = E.reshape(self.n_clients, self.M, -1)
        small = Eb @ np.swapaxes(Eb, 1, 2) if Eb.shape[2] >= self.M else np.swapaxes(Eb, 1, 2) @ Eb
        lmax = np.linalg.eigvalsh(small)[:, -1]
        return np.minimum(trace, np.repeat(lmax, self.J))

    def item_counts(self) -> np.ndarray:
        """Number of ratings per flat item slot."""
        return np.bincount(self.cols, minlength=self.n_clients * self.J)

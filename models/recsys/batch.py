"""A batch of clients' ratings flattened into one block-diagonal sparse problem.

Client c's local user m becomes row c*M + m, and each real (unpadded) item slot of each client becomes
one column, so a whole round's clients are handled by a few grouped sums instead of a Python loop over
clients, and no work is spent on padding. Built once per client step from the padded arrays of
`data.client_arrays`; `gather` and `scatter` move item-side arrays between the padded (b, J, ...) layout
of the client state and the compact (slots, ...) layout used for the arithmetic.

numpy only (no scipy): client steps run on edge agents. The sparse products A @ F and A' @ F are sums
of rows over groups of ratings (`Groups`: per user or per item slot) in a few vectorised steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from models.core.federated import State
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

    @cached_property
    def by_slot(self) -> Groups:
        """The ratings grouped by item slot (each slot's raters)."""
        return Groups(self.cols, self.n_slots)

    @cached_property
    def by_user(self) -> Groups:
        """The ratings grouped by flat user row (each user's items)."""
        return Groups(self.rows, self.n_clients * self.M)

    def user_sums(self, values: np.ndarray, F: np.ndarray) -> np.ndarray:
        """A @ F for the (users x item slots) matrix A with `values` at the rating positions:
        per user row, the sum over its ratings of values * F[slot]."""
        g = self.by_user
        return g.sum(F[self.cols[g.order]], values[g.order])

    def item_sums(self, values: np.ndarray, F: np.ndarray) -> np.ndarray:
        """A' @ F: per item slot, the sum over its ratings of values * F[user row]."""
        g = self.by_slot
        return g.sum(F[self.rows[g.order]], values[g.order])

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
        return self.item_sums(resid, E)

    def user_gradient(self, resid: np.ndarray, Q: np.ndarray) -> np.ndarray:
        """d/dP of 1/2 sum resid^2 per user: sum over its items of resid [v_j, 1]."""
        D = Q.copy()
        D[:, -1] = 1.0
        return self.user_sums(resid, D)

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


class Groups:
    """Sums of rows over groups of entries (the ratings of each item slot, or of each user), numpy only.

    Two layouts; levels when there are no more levels than non-empty groups, segments otherwise:

    - *levels* (the groups are many and small, as item slots: a client's users rate an item a few times
      at most): level l holds the l-th entry of every group with more than l entries. Level 0 (one
      entry per non-empty group, in group order) gives the sums' first terms in one product. Levels
      1, 2, ... list their groups by decreasing size, so level l is always the first width[l] of the
      groups with two or more entries and adds to them as one in-place slice addition. Each group is
      summed in its entries' original order, as a CSR product does, so the results are the same to the
      last bit.
    - *segments* (few long groups, as a batch's users): the entries sorted by group and one
      `np.add.reduceat` over the contiguous runs (on the transposed rows: one call per group and column,
      not per entry). reduceat sums pairwise, so results can differ from a CSR product by rounding.

    Call `sum` with per-entry arrays taken in `order`."""

    def __init__(self, group: np.ndarray, n_groups: int):
        size = np.bincount(group, minlength=n_groups)
        self.n_groups = n_groups
        self.nonempty = np.flatnonzero(size)
        #: width[l]: the number of groups with more than l entries (the length of level l)
        self.width = n_groups - np.cumsum(np.bincount(size))[:-1]
        self.levels = len(self.width) <= len(self.nonempty)
        self._buffers: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        by_group = np.argsort(group, kind="stable")
        first = np.cumsum(size) - size  # where each group starts in by_group order
        if not self.levels:
            self.order = by_group  # the entries in the order `sum` takes them
            self.starts = first[self.nonempty]
            return
        multi = np.flatnonzero(size > 1)
        #: the groups with two or more entries, largest first (the groups of levels 1, 2, ...)
        self.multi = multi[np.argsort(-size[multi], kind="stable")]
        rank = np.zeros(n_groups, dtype=np.int64)  # a group's place in `multi`
        rank[self.multi] = np.arange(len(multi))
        level = np.arange(len(group)) - np.repeat(first, size)  # of each entry of by_group, in its group
        start = np.cumsum(self.width) - self.width  # where each level starts
        later = level > 0
        self.order = np.empty(len(group), dtype=np.int64)  # the entries in the order `sum` takes them
        self.order[:len(self.nonempty)] = by_group[first[self.nonempty]]  # level 0: each group's first entry
        self.order[start[level[later]] + rank[group[by_group[later]]]] = by_group[later]  # levels 1, 2, ...

    def sum(self, X: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Per group, the sum of weights[e] * X[e] over its entries ((n, k) and (n,), both in `order`)
        -> a new (n_groups, k) array, zeros for empty groups."""
        k = X.shape[1]
        if not len(X):
            return np.zeros((self.n_groups, k))
        if not self.levels:
            out = np.zeros((self.n_groups, k))
            T = np.multiply(X.T, 1.0 if weights is None else weights, order="C")  # (k, n) contiguous rows
            out[self.nonempty] = np.add.reduceat(T, self.starts, axis=1).T
            return out
        w = self.width[0]
        first = X[:w].copy() if weights is None else X[:w] * weights[:w, None]  # level 0
        if w == self.n_groups:
            out = first
        else:
            out = np.zeros((self.n_groups, k))
            out[self.nonempty] = first
        if len(self.width) == 1:
            return out
        acc, scratch = self._work(k)
        np.take(out, self.multi, axis=0, out=acc)
        start = w
        for w in self.width[1:]:
            rows = X[start:start + w]
            if weights is not None:
                rows = np.multiply(rows, weights[start:start + w, None], out=scratch[:w])
            acc[:w] += rows
            start += w
        out[self.multi] = acc
        return out

    def _work(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The sums of the groups with two or more entries and the scratch for one level, kept across
        calls: a local step sums with the same shapes several times, and fresh multi-megabyte
        temporaries each time cost more in page faults than the additions."""
        if k not in self._buffers:
            self._buffers[k] = (np.empty((self.width[1], k)), np.empty((self.width[1], k)))
        return self._buffers[k]


class ItemSide:
    """Gradient of 1/2 sum (prediction - rating)^2 in the item-slot rows, for fixed user rows.

    The raters' design rows [u_t, 1] and offsets b_t - r_tj are gathered once, in the order of the slot
    `Groups`, so a local step costs one gather of the item rows, one row-wise dot product and one
    weighted group sum. With `scale`, each slot's gradient comes multiplied by scale[slot] at no extra
    cost."""

    def __init__(self, batch: RatingBatch, P: np.ndarray, scale: np.ndarray | None = None):
        self.groups = batch.by_slot
        order = self.groups.order
        rows = batch.rows[order]
        E = P.copy()
        E[:, -1] = 1.0
        self.E_rows = E[rows]
        self.offset = P[rows, -1] - batch.target[order]
        self.cols = batch.cols[order]
        self.entry_scale = None if scale is None else scale[self.cols]

    def residual(self, Q: np.ndarray) -> np.ndarray:
        """prediction - rating at every rating, in the order of the slot groups."""
        return np.einsum("ij,ij->i", self.E_rows, Q[self.cols]) + self.offset

    def gradient(self, Q: np.ndarray) -> np.ndarray:
        data = self.residual(Q)
        if self.entry_scale is not None:
            data *= self.entry_scale
        return self.groups.sum(self.E_rows, data)

"""The support rule's mass share (models.mixture.fedem: FedEM.shared) kept up to date by the rows a step writes.

Per component k, the share of its weighted mass (the aggregate's R_k) that its `m` heaviest devices hold, a
device's mass being W_i R_ik of its row in the table of control variates (models.mixture.control). A pass over
the whole table every step was the largest part of the server step (7,590 rows at K = 128: m passes of argmax
over a float32 copy of the table); the share needs only the few heaviest rows of each component, which a step
changes rarely.

Kept per component (small arrays of the server state, K x (m + SLACK)): the masses of that many rows ("top_rows",
"top_mass", -1 and -inf in free places) and a bound on the mass of every row in use not among them ("top_bound").
A step that writes rows updates those kept and takes in a row heavier than the bound (pushing out the lightest,
whose mass then raises the bound). The `m` heaviest kept are the `m` heaviest of the table as long as the m-th of
them is at least the bound; a component where they are not (its heaviest rows shrank or left) is read from the
table again, that column alone. A bound of +inf asks for that (a table saved before this module, a step that
rewrote the whole table). Masses are computed the same way here and in the full pass (`full_share`, which tests
compare with), and the m heaviest summed in the same order, so the two agree exactly.
"""

from __future__ import annotations

import numpy as np

from models.core.federated import State

#: rows kept per component beyond the m heaviest: how many of them may shrink or leave before the component's
#: column is read again
SLACK = 6
#: a step writing more rows than this (a seeding step) has every component's column read again at the next share
REWRITE = 64
KEYS = ("top_rows", "top_mass", "top_bound")


def empty(K: int, kept: int | None = None, bound: float = -np.inf) -> State:
    """Nothing kept (room for `kept` rows a component, by default 2 colluders and SLACK); every row in use at
    most `bound` (-inf: no row in use, +inf: read the table again)."""
    kept = 2 + SLACK if kept is None else kept
    return {"top_rows": np.full((K, kept), -1, dtype=np.int64), "top_mass": np.full((K, kept), -np.inf),
            "top_bound": np.full(K, float(bound))}


def masses(server: State, rows: np.ndarray | slice, columns: np.ndarray | slice = slice(None)) -> np.ndarray:
    """W_i R_ik of these rows (rows x components), float64 whatever the table's precision."""
    R = np.asarray(server["R_rows"][rows][:, columns], dtype=float)  # the columns first: no copy of the table
    return np.asarray(server["W_rows"][rows], dtype=float)[:, None] * R


def invalidate(server: State) -> None:
    """Every component to be read from the table again at the next share (e.g. after the whole table changed)."""
    server.update(empty(len(server["R"]), room(server), np.inf))


def room(server: State) -> int | None:
    """Rows kept a component (None: the default, for a state without them)."""
    return server["top_rows"].shape[1] if "top_rows" in server else None


def refresh(server: State, rows: np.ndarray) -> None:
    """These rows (distinct) were just written: update their kept masses, take in those heavier than the bound."""
    if "top_rows" not in server or len(rows) > REWRITE:
        invalidate(server)
        return
    top, mass, bound = server["top_rows"], server["top_mass"], server["top_bound"]
    new = masses(server, rows)
    for j, row in enumerate(np.asarray(rows, dtype=np.int64)):
        k, t = np.nonzero(top == row)
        mass[k, t] = new[j, k]
        held = np.zeros(len(bound), bool)
        held[k] = True
        comes = np.flatnonzero(~held & (new[j] > bound))
        if len(comes):
            out = mass[comes].argmin(axis=1)  # the lightest kept (a free place first) leaves the kept rows
            bound[comes] = np.maximum(bound[comes], mass[comes, out])
            top[comes, out] = row
            mass[comes, out] = new[j, comes]


def read(server: State, columns: np.ndarray) -> None:
    """Keep these components' heaviest rows from the table itself (the rows in use), and the bound below them."""
    n, room = int(server["rows"]), server["top_rows"].shape[1]
    M = np.ascontiguousarray(masses(server, slice(0, n), columns).T)  # a component's rows side by side
    top, mass = np.full((len(columns), room), -1, np.int64), np.full((len(columns), room), -np.inf)
    if n <= room:
        top[:, :n], mass[:, :n], bound = np.arange(n), M, np.full(len(columns), -np.inf)
    else:
        order = np.argpartition(-M, room, axis=1)  # the first `room` the heaviest, the next the heaviest left
        top[:] = order[:, :room]
        mass[:] = np.take_along_axis(M, top, axis=1)
        bound = np.take_along_axis(M, order[:, room: room + 1], axis=1)[:, 0]
    server["top_rows"][columns], server["top_mass"][columns], server["top_bound"][columns] = top, mass, bound


def heaviest_sum(desc: np.ndarray, m: int) -> np.ndarray:
    """The sum of the first m of masses sorted heaviest first (K x ...), added in that order."""
    total = np.zeros(len(desc))
    for i in range(m):
        total = total + desc[:, i]
    return total


def share(server: State, total: np.ndarray, m: int) -> np.ndarray:
    """Per component, the share of `total` (its weighted mass) held by its m heaviest rows; 0 without mass."""
    n = int(server["rows"])
    if n == 0:
        return np.zeros(len(total))
    m = min(m, n)
    if "top_rows" not in server or server["top_rows"].shape[1] < m + 1:
        server.update(empty(len(total), m + SLACK, np.inf))
    desc = -np.sort(-server["top_mass"], axis=1)
    stale = np.flatnonzero(~(desc[:, m - 1] >= server["top_bound"]))
    if len(stale):
        read(server, stale)
        desc[stale] = -np.sort(-server["top_mass"][stale], axis=1)
    return ratio(heaviest_sum(desc, m), total)


def full_share(server: State, total: np.ndarray, m: int) -> np.ndarray:
    """The same share from a pass over every row in use (what `share` must equal)."""
    n = int(server["rows"])
    if n == 0:
        return np.zeros(len(total))
    return ratio(heaviest_sum(-np.sort(-masses(server, slice(0, n)), axis=0).T, min(m, n)), total)


def ratio(top: np.ndarray, total: np.ndarray) -> np.ndarray:
    return np.where(total > 0, top / np.maximum(total, 1e-300), 0.0)


def mass_shares(R: np.ndarray, Q: np.ndarray, m: int) -> np.ndarray:
    """Per component, a bound on the share of its mass its m heaviest devices hold, from the sums of the devices'
    masses (R) and squared masses (Q) alone: by Cauchy-Schwarz, m heaviest shares s_1..s_m add up to at most
    sqrt(m sum_i s_i^2) = sqrt(m Q) / R. The mass share (models.core.pipeline.support_mask) keeps a component out
    when it exceeds mass_cap: every component the exact share keeps out, and some it shares (a bound, not the
    share). Private mode's (models.mixture.summed: it sees only sums), and plaintext FedEM's with
    ``mass_share="bound"`` (to run private mode's rule)."""
    R, Q = np.asarray(R, dtype=float), np.maximum(np.asarray(Q, dtype=float), 0.0)
    return np.where(R > 0, np.minimum(np.sqrt(m * Q) / np.where(R > 0, R, 1.0), 1.0), 0.0)

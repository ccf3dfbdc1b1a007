"""FedMC-ADMM (seed 000, Alg. 1) with the closed forms (66)-(68) for l2 and (71)-(73) for l1: an instance of the
general-form consensus ADMM of `models.core.consensus` (x_i = the item copy W_i, z = the item factors V, g = the
item regulariser), whose local solver is (a) and (b) below.

Roles: a client's private *user factors* U_i (here packed with the user biases), its local *item copy*
W_i and *item dual* Y_i, and the server's shared *item factors* V. With rho the paper's penalty beta:

    client  (a) U_i  <- N proximal steps (66)/(71) on its ratings against V     (or an exact ridge solve;
                                                 the paper: against W_i, ``user_items="copy"``)
            (b) W_i  <- N linearised steps (67):  W <- (L W + rho V - grad - Y) / (L + rho)
            (c) Y_i  <- Y_i + rho (W_i - V)          (the paper's order: the dual uses the V it received)
    upload  the change of rho W_i + Y_i since the client's last upload
    server  S <- S + sum of the changes;  V_j = S_j / (n_j rho + gamma)          (68)
                                       or V_j = soft(S_j / (n_j rho), gamma / (n_j rho))   (73)

S_j = sum_i (rho W_ij + Y_ij) over the clients holding item j is a running sum: clients that were not
sampled contribute their last values (stale), exactly as (16) prescribes, but the server keeps only S
(items x (rank+1)) and the counts n_j, never a copy per client.

Differences from the paper, and why:
- General-form consensus (Boyd et al. 2011, sec. 7.2): a client's copy W_i and dual Y_i cover the items
  it holds ratings for, and n_j (the number of clients holding item j) replaces p in (68)/(73). Its
  ratings do not depend on the other columns, so their consensus constraints only slow V down (every
  non-rater's stale copy anchors V_j); dropping them leaves the minimisers unchanged, makes uploads sparse
  and the client step independent of the catalogue size. A sparse upload names the items a client
  holds; the paper's dense copies reveal them as well (off those columns the update has no data term,
  which the server can check), as DESIGN.md says.
- The objective is written as a sum over clients (the paper's average times p): the closed forms are the
  paper's with p = 1 and rho, Y scaled by p.
- Per-row curvature: (66)/(71) use each user's own Lipschitz constant lambda_max(sum_j d_j d_j') and (67)
  a bound of each item column's (the smaller of sum_t |[u_t, 1]|^2 over its raters and lambda_max of the
  client's whole [U, 1] Gram), instead of the global |W W'|_F and |U'U|_F. The sub-problems separate by rows
  and columns, so these are valid majorisers, and far tighter (a user rates dozens, not thousands of
  items).
- Biases: packed factor rows (see factors.py); the global mean comes from a one-off count and sum.
- A client joins with W_i = V (the V it first receives) and Y_i = 0, and its first upload is its whole
  rho W_i + Y_i; the server counts it in n_j from then on. The paper initialises Y_i^0 = -grad/p, which
  the server could not know without a round with every client.
- ``user_solver="exact"`` (l2 only, the default) solves the private user block exactly: a ridge regression
  per user, the fixed point the N steps of (66) converge to, for the cost of one small solve per user.
  ``user_solver="prox"`` runs the paper's N steps (66) (always used for l1, eq. 71).
- ``user_items="consensus"`` (the default): step (a) fits the user rows against the V the client has just
  received, not against its own copy W_i^k as (14)/(66) write. With 10 % of the clients a round, a
  client's copy is the one it left when last sampled, about ten rounds earlier, so its users were
  fitted to item factors the other clients have moved since; against V they start from the latest
  consensus, as an ALS user half-sweep would. At a fixed point W_i = V, so the fixed points are
  the paper's; only the route changes. (b) and (c) are unchanged and still start from W_i^k.
  ``user_items="copy"`` runs (a) as written.
- N = 3 local steps by default (the paper: 10; its sec. 5.3 finds small N faster). On a validation split
  of movielens-small's training ratings N = 3, 5, 10 and 20 gave the same RMSE to 1e-4; lam = gamma =
  10 (l2) or 1 (l1) were the best of a small grid there.
- rho = 0.5 by default. Validation splits (20 % of the training ratings, seed 123; the test ratings
  unused) of movielens-small and synthetic-longtail, 100 clients, 10 % a round, 100 rounds, rank 10:
  with (a) against V, rho = 0.25, 0.5, 1, 2, 3, 5, 10 gave 0.8690, 0.8686, 0.8692, 0.8700, 0.8701,
  0.8703, 0.8724 and 0.7004, 0.6961, 0.6963, 0.7004, 0.7036, 0.7067, 0.7097 (0.5 also best or within
  3e-4 over split seeds 1 and 2, with 10 clients at 30 % and at full participation). Against W_i the
  small penalties oscillate (rho = 1, 2, 3 ended at 0.901, 0.900, 0.898 on movielens-small): why rho
  was 10 before.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from models.core.consensus import ConsensusSum, consensus, dual_step, message
from models.core.federated import State, step_count
from models.recsys.base import RecsysAlgorithm, held
from models.recsys.batch import RatingBatch
from models.recsys.factors import largest_eigenvalue, prox_step, ridge_solve

USER_SOLVERS = ("exact", "prox")
#: what step (a) fits the user rows against: the V received this round, or the client's copy W_i (the paper)
USER_ITEMS = ("consensus", "copy")
#: default lam = gamma per regularizer, from a validation split of movielens-small's training ratings
DEFAULT_WEIGHT = {"l2": 10.0, "l1": 1.0}


class FedMCADMM(RecsysAlgorithm):
    name = "fedmc-admm"
    summed: ClassVar[dict[str, str]] = {"delta": "raters", "new": "flag"}

    def __init__(self, n_items: int, rank: int = 10, rho: float = 0.5, lam: float | None = None,
                 gamma: float | None = None, local_steps: int = 3, regularizer: str = "l2",
                 user_solver: str = "exact", init_scale: float = 0.1, user_items: str = "consensus"):
        default = DEFAULT_WEIGHT.get(regularizer, 1.0)
        super().__init__(n_items, rank, default if lam is None else lam, default if gamma is None else gamma,
                         regularizer, init_scale)
        if rho <= 0:
            raise ValueError("rho must be positive")
        step_count("local_steps", local_steps)
        if user_solver not in USER_SOLVERS:
            raise ValueError(f"unknown user_solver {user_solver!r}; choose from {', '.join(USER_SOLVERS)}")
        if user_items not in USER_ITEMS:
            raise ValueError(f"unknown user_items {user_items!r}; choose from {', '.join(USER_ITEMS)}")
        if user_solver == "exact" and regularizer == "l1":
            user_solver = "prox"  # the l1 sub-problem has no closed form: proximal steps (71)
        self.rho = float(rho)
        self.local_steps = int(local_steps)
        self.user_solver = user_solver
        self.user_items = user_items

    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        V = self.random_items(rng)
        server = {"item_factors": V, "item_sum": np.zeros_like(V), "item_count": np.zeros(self.n_items)}
        return server, {"item_factors": V, "item_seen": np.zeros(self.n_items, dtype=bool)}

    def init_clients(self, data: State, broadcast: State) -> State:
        b, J = data["items"].shape
        return {
            "user_factors": self.zero_users(data),
            "item_copy": np.zeros((b, J, self.width)),
            "item_dual": np.zeros((b, J, self.width)),
            "joined": np.zeros(b, dtype=bool),
        }

    def client_update(self, state: State, data: State, broadcast: State) -> tuple[State, State]:
        batch = RatingBatch.of(data)
        b, k = batch.n_clients, self.width
        V = broadcast["item_factors"][batch.item_ids]  # the consensus on each client's items
        W = batch.gather(state["item_copy"])
        Y = batch.gather(state["item_dual"])
        before = message(W, Y, self.rho)
        fresh = ~state["joined"][batch.slot_client]
        if fresh.any():  # joining: start the copy at the consensus, no dual, nothing in the server's sum yet
            W[fresh], Y[fresh], before[fresh] = V[fresh], 0.0, 0.0
        against = V if self.user_items == "consensus" else W
        P = self.user_step(batch, state["user_factors"].reshape(b * batch.M, k), against)
        W, Y = self.item_step(batch, P, W, Y, V)
        item_copy, item_dual, delta = (batch.scatter(a) for a in (W, Y, message(W, Y, self.rho) - before))
        new_state = {"user_factors": P.reshape(b, batch.M, k), "item_copy": item_copy, "item_dual": item_dual,
                     "joined": np.ones(b, dtype=bool)}
        uploads = {"items": data["items"], "item_mask": data["item_mask"], "delta": delta,
                   "new": ~state["joined"]}
        return new_state, uploads

    def user_step(self, batch: RatingBatch, P: np.ndarray, W: np.ndarray) -> np.ndarray:
        """(a): the private user factors against item rows W (fixed): the V received, or the client's copy."""
        G, rhs = batch.user_grams(W)
        if self.user_solver == "exact":
            return ridge_solve(G, rhs, self.lam)
        L = np.maximum(largest_eigenvalue(G), 1e-12)
        for _ in range(self.local_steps):
            grad = np.einsum("nij,nj->ni", G, P) - rhs
            P = prox_step(P, grad, L, self.lam, self.regularizer)
        return P

    def item_step(self, batch: RatingBatch, P: np.ndarray, W: np.ndarray, Y: np.ndarray,
                  V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(b) and (c): N linearised steps (67) on the item copy, then the dual step with the received V.

        (67) is W <- (L W + rho V - grad - Y) / (L + rho), written as W <- a W + c (rho V - Y - grad)."""
        L = batch.item_curvature(P)[:, None]
        c = 1.0 / (L + self.rho)
        a = L * c
        target = c * (self.rho * V - Y)
        raters = batch.item_side(P, scale=c[:, 0])
        for _ in range(self.local_steps):
            step = raters.gradient(W)  # c * grad
            W = a * W
            W += target
            W -= step
        return W, dual_step(Y, W, V, self.rho)  # (c), with the V the client received

    def server_update(
        self, server: State, client_ids: np.ndarray, uploads: State, weight: np.ndarray
    ) -> tuple[State, State]:
        sums = ConsensusSum(server["item_sum"].copy(), server["item_count"].copy())
        V = server["item_factors"].copy()
        touched = []
        for c, new in enumerate(uploads["new"]):
            if np.ndim(new):  # a summed upload (models.recsys.private): how many devices join each item
                items, delta, joined = held(uploads, c, "delta", "new")
                sums.add(items, delta, joined)
            else:
                items, delta = held(uploads, c, "delta")
                sums.add(items, delta, bool(new))
            touched.append(items)
        rows = np.unique(np.concatenate(touched)) if touched else np.zeros(0, dtype=np.int64)
        V[rows] = sums.z(rows, self.rho, self.regularizer, self.gamma)  # (68) / (73)
        server = {"item_factors": V, "item_sum": sums.total, "item_count": sums.count}
        return server, {"item_factors": V, "item_seen": sums.count > 0}

    def consensus_rows(self, S: np.ndarray, count: np.ndarray) -> np.ndarray:
        """The V-update (68) / (73) for rows with running sum S held by `count` clients."""
        return consensus(S, count, self.rho, self.regularizer, self.gamma)

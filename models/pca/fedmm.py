"""FedMM for PCA (seed 003 applied to seed 004): aggregate the surrogate statistic, not the parameter.

The majoriser of -tr(U'CU) at the current basis Q is linear in S = C Q, so a sampled client uploads
S_i = C_i Q (d x m, the same size as a FedPG upload when m = k) and the server rebuilds the basis.

Partial participation is the hard case: the server keeps the last S_i of every client (control
variates), but a stale S_i was computed at an older basis Q_i. Summing statistics taken at different
bases is what makes the plain scheme stall. The server therefore *transports* each stored statistic:
from S_i = C_i Q_i it knows C_i exactly on span(Q_i) and across it, and uses the symmetric completion

    C_i ~ S_i Q_i' + Q_i S_i' - Q_i (Q_i' S_i) Q_i'

which is exact on everything but the block orthogonal to Q_i. The next basis is the top-m eigenspace of
the weighted sum of these completions (a Rayleigh-Ritz step), kept as a running sum. Its fixed points
are invariant subspaces of the pooled covariance, and only the dominant one is stable. A block wider
than k (m = k + oversample) speeds convergence; the detector uses the top k columns.

Aggregation: ``aggregator="mean"`` (the default) is the paper's weighted mean (a running sum, O(sampled)
per round); ``aggregator="trimmed"`` combines the clients' transported statistics by a coordinate-wise
trimmed mean (models.detection.screening), so one client, whatever statistic it invents within the plausibility
checks, moves each entry only as far as the spread of the honest ones allows, at O(clients) per round and
at the price of no longer converging to the pooled covariance's subspace on non-i.i.d. data;
``aggregator="capped"`` (issue 22, opt-in) sums them as `models.core.aggregation.direction_capped_mean` does: along
each eigen-direction of their weighted mean no device weighs more than the (`colluders` + 1)-th heaviest device, so that
`colluders` devices honestly reporting poisoned traffic (a compliant rogue) cannot tilt the basis further than an
honest device does, also O(clients) per round; it needs each device's statistic (not under secure aggregation).

Options: ``transport=False`` gives the plain scheme of DESIGN.md (Z = orth(sum_i w_i S_i) with
Rayleigh-Ritz ordering); ``bits`` quantises uploads with error feedback; ``sa_step`` < 1 is the
stochastic-approximation step of seed 003 Alg. 2 on the aggregated statistic. ``support_trim`` (issue 22,
opt-in, the simulator only so far): after half the rounds each device keeps out of its statistic the records the
other devices' statistics, which the server holds here, do not explain (models.pca.support).
"""

from __future__ import annotations

import numpy as np

from models.core.aggregation import direction_capped_mean, trimmed_weighted_mean
from models.core.federated import State, client_rows
from models.core.linalg import orth, top_eigvecs
from models.core.quantize import quantize_with_feedback, quantized_bytes
from models.detection.screening import Guard
from models.pca.base import PCAAlgorithm

#: "mean": seed 003's weighted mean of the clients' statistics; "trimmed": FedSentry's hardening, a
#: coordinate-wise trimmed weighted mean over clients, so that one client cannot steer the basis; "capped": no
#: device's energy along a direction above the (colluders + 1)-th heaviest device's (`direction_capped_mean`)
AGGREGATORS = ("mean", "trimmed", "capped")


def completion(S: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """S Q' + Q S' - Q (Q'S) Q', batched: the symmetric matrix that agrees with C on span(Q)."""
    Qt = np.swapaxes(Q, -1, -2)
    SQt = S @ Qt
    QtS = Qt @ S
    QtS = (QtS + np.swapaxes(QtS, -1, -2)) / 2
    return SQt + np.swapaxes(SQt, -1, -2) - Q @ QtS @ Qt


def _parts(S: np.ndarray, Q: np.ndarray) -> tuple[np.ndarray, ...]:
    Qt = np.swapaxes(Q, -1, -2)
    B = Qt @ S
    X = S - Q @ B
    lam = np.linalg.eigvalsh((B + np.swapaxes(B, -1, -2)) / 2)
    asym = np.linalg.norm(B - np.swapaxes(B, -1, -2), axis=(-2, -1))
    return (B, lam, asym, np.trace(B, axis1=-2, axis2=-1), np.linalg.norm(X, axis=(-2, -1)) ** 2,
            np.einsum("...jl,...jl->...j", S, S), np.linalg.norm(S, axis=(-2, -1)))


def admissible_scale(S: np.ndarray, Q: np.ndarray, trace: np.ndarray, diag: np.ndarray,
                     tol: float = 1e-8) -> np.ndarray:
    """Per upload S_i = C_i Q, the largest f in [0, 1] such that f S_i could come from a positive
    semi-definite C_i with trace at most tr(C_i) and diagonal at most diag(C_i) (both from the statistics
    phase); 0 when no f can (the upload is not even the product of a symmetric PSD matrix with Q).

    In the basis [Q, Q_perp], C_i = [[B, X'], [X, D]] with B = Q'S_i and X = (I - QQ')S_i, so an honest
    statistic has B symmetric and PSD, tr B <= tr C_i, and ||X||_F^2 <= tr(B) ||D|| <= tr(B)(tr C_i - tr B).
    Writing C_i = G G', row j of S_i is g_j' (G'Q), so ||S_i[j]||^2 <= C_i[j, j] lambda_max(B): a client
    cannot put more weight on a feature than the variance it reported for it. Scaling S by f scales B,
    X and lambda_max by f, so each bound gives a largest f: trace / tr B, tr B trace / (||X||^2 + tr B^2),
    and C[j, j] lambda_max / ||S[j]||^2. Noise fails the symmetry (refused); a scaled-up statistic, one
    rotated away from Q or one invented on features the client reported little variance for is shrunk
    to what the client's own claims allow. No data is needed to check."""
    _, lam, asym, tb, cross, rows, size = _parts(S, Q)
    slack = 10 * tol * size
    structure = (asym <= slack) & (lam[..., 0] >= -slack)
    tb_pos = np.maximum(tb, 1e-300)
    lmax = np.maximum(lam[..., -1], 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.minimum.reduce([
            np.ones_like(tb),
            trace * (1 + 10 * tol) / tb_pos,
            tb_pos * trace * (1 + 10 * tol) / np.maximum(cross + tb_pos**2, 1e-300),
            # (quantised uploads carry an absolute error of about tol * ||S|| on every entry: allowed for)
            np.min(np.where(rows > 0, (diag * lmax[..., None] * (1 + 10 * tol) + ((10 * tol * size) ** 2)[..., None])
                            / np.maximum(rows, 1e-300), np.inf), axis=-1),
        ])
    f = np.where(tb <= slack, np.where(size <= slack, 1.0, 0.0), f)  # a statistic with nothing on span(Q)
    return np.where(structure & np.isfinite(f), np.clip(f, 0.0, 1.0), 0.0)


def plausible(S: np.ndarray, Q: np.ndarray, trace: np.ndarray, diag: np.ndarray, tol: float = 1e-8) -> np.ndarray:
    """Which uploads could come, as they are, from a PSD C_i with these trace and diagonal bounds."""
    return admissible_scale(S, Q, trace, diag, tol) >= 1.0


class FedMM(PCAAlgorithm):
    name = "fedmm"

    def __init__(self, n_features: int, rank: int = 3, oversample: int = 6, transport: bool = True,
                 bits: int | None = None, sa_step: float = 1.0, aggregator: str = "mean", trim: float = 0.1,
                 colluders: int = Guard.colluders, support_trim: bool = False):
        super().__init__(n_features, rank)
        if aggregator not in AGGREGATORS:
            raise ValueError(f"aggregator must be one of {', '.join(AGGREGATORS)}")
        if not 0 <= trim < 0.5:
            raise ValueError("trim must be in [0, 0.5)")
        if colluders < 0:
            raise ValueError(f"colluders must be at least 0 (devices that may act together), got {colluders}")
        if aggregator == "capped" and not transport:
            raise ValueError("aggregator 'capped' caps the devices' transported statistics: it needs transport=True")
        if support_trim and not transport:
            raise ValueError("support_trim reads the devices' transported statistics: it needs transport=True")
        self.aggregator, self.trim, self.colluders = aggregator, float(trim), int(colluders)
        #: issue 22 (opt-in, simulator only so far): after half the rounds each device keeps out of its statistic the
        #: records the other devices' subspace does not explain (models.pca.support)
        self.support_trim = bool(support_trim)
        if bits is not None and not 2 <= bits <= 16:
            raise ValueError("bits must be between 2 and 16")
        if not 0 < sa_step <= 1:
            raise ValueError("sa_step must be in (0, 1]")
        self.oversample = max(0, int(oversample))
        self.transport = transport
        self.bits = bits
        self.sa_step = float(sa_step)

    @property
    def block(self) -> int:
        return min(self.n_features, self.rank + self.oversample)

    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        d, m = self.n_features, self.block
        Q = orth(rng.standard_normal((d, m)))
        server = {
            "Q": Q,
            # control variates, one row per client that has answered (rows are handed out in order of first
            # answer and the table grows by doubling: memory and work follow the clients seen, not N)
            "slot": np.zeros(n_clients, dtype=np.int64),  # the client's row + 1; 0 before its first answer
            "S_rows": np.zeros((0, d, m)),
            "Q_rows": np.zeros((0, d, m)),
            "w_rows": np.zeros(0),
            "rows": np.zeros((), dtype=np.int64),
            "M": np.zeros((d, d)),
            "M_used": np.zeros((d, d)),
            "total": np.zeros(()),  # the sum of the answered clients' weights
        }
        return server, {"Q": Q}

    def init_clients(self, data: State, broadcast: State) -> State:
        b = data["C"].shape[0]
        return {"error": np.zeros((b, *broadcast["Q"].shape))}

    def client_update(self, state: State, data: State, broadcast: State) -> tuple[State, State]:
        S = data["C"] @ broadcast["Q"]
        if self.bits is None:
            return state, {"S": S}
        sent, error = quantize_with_feedback(S, state["error"], self.bits)
        return {**state, "error": error}, {"S": sent}

    def screen(self, server: State, client_ids: np.ndarray, uploads: State) -> np.ndarray | None:
        """Refuse what no honest client could send, shrink what is too big (`admissible_scale`, against each
        client's statistics-phase diagonal and trace); None before those are known."""
        if "trace" not in server or not len(client_ids):
            return None
        ids = np.asarray(client_ids)
        return admissible_scale(uploads["S"], server["Q"], server["trace"][ids], server["diag"][ids], self.tolerance)

    def server_update(
        self, server: State, client_ids: np.ndarray, uploads: State, weight: np.ndarray
    ) -> tuple[State, State]:
        """Updates `server` in place: its tables have a row per client of the federation, so a round
        touches only the sampled clients' rows and the running sums (O(sampled), not O(clients))."""
        if len(client_ids) == 0:
            return server, {"Q": server["Q"]}
        S = uploads["S"]
        Q = server["Q"]
        ids = np.asarray(client_ids)
        weight = np.asarray(weight, dtype=float)
        slot = server["slot"][ids]
        old = slot > 0
        rows = client_rows(server, ids, ("S_rows", "Q_rows", "w_rows"))
        w_old = server["w_rows"][rows[old]]
        if self.transport:
            if old.any():
                server["M"] -= np.einsum("b,bij->ij", w_old,
                                         completion(server["S_rows"][rows[old]], server["Q_rows"][rows[old]]))
            server["M"] += np.einsum("b,bij->ij", weight, completion(S, np.broadcast_to(Q, S.shape)))
        server["total"] = server["total"] + weight.sum() - w_old.sum()
        server["S_rows"][rows] = S
        server["Q_rows"][rows] = Q
        server["w_rows"][rows] = weight
        total = float(server["total"])
        if self.transport:
            M = server["M"] / total if self.aggregator == "mean" else self._robust(server)
            if self.sa_step < 1 and np.any(server["M_used"]):
                M = self.sa_step * M + (1 - self.sa_step) * server["M_used"]
            server["M_used"] = M
            _, Q_new = top_eigvecs(M, Q.shape[1])
        else:
            n = int(server["rows"])
            S_all, w_all = server["S_rows"][:n], server["w_rows"][:n]
            if self.aggregator == "mean":
                A = np.einsum("b,bij->ij", w_all, S_all) / total
            else:
                A = trimmed_weighted_mean(S_all.reshape(n, -1), w_all, self.trim).reshape(S_all.shape[1:])
            B = Q.T @ A
            _, V = top_eigvecs(B, B.shape[0])
            Q_new = orth(A @ V)
        server["Q"] = Q_new
        return server, {"Q": Q_new}

    def _robust(self, server: State) -> np.ndarray:
        """Every answered client's transported statistic combined robustly. "trimmed": per entry, the weighted mean
        after leaving out the most extreme clients on either side: one client moves each entry by at most the
        spread of the others. "capped": `direction_capped_mean`. O(clients d^2 m) per round (capped: O(clients
        d^3)), against O(sampled d^2 m) for the mean."""
        n = int(server["rows"])
        C = completion(server["S_rows"][:n], server["Q_rows"][:n])
        if self.aggregator == "capped":
            return direction_capped_mean(C, server["w_rows"][:n], self.colluders)
        d = C.shape[-1]
        return trimmed_weighted_mean(C.reshape(n, d * d), server["w_rows"][:n], self.trim).reshape(d, d)

    @property
    def tolerance(self) -> float:
        """Relative slack of the plausibility checks: float rounding, or the quantisation step."""
        return 1e-8 if self.bits is None else 2.0 / (2 ** (self.bits - 1) - 1)

    def attach_bounds(self, server: State, diag: np.ndarray, trace: np.ndarray) -> State:
        """Each client's diag(C_i) and bound on tr(C_i), known from the statistics phase: what makes uploads
        checkable."""
        return {**server, "diag": np.asarray(diag, dtype=float), "trace": np.asarray(trace, dtype=float),
                "rejected": np.zeros(()), "shrunk": np.zeros(())}

    row_tables = ("slot", "trace", "diag", "S_rows", "Q_rows", "w_rows")

    def touched(self, server: State, client_ids: np.ndarray) -> dict[str, np.ndarray]:
        """The rows of each row table a server step with these clients may have changed."""
        ids = np.asarray(client_ids, dtype=np.int64)
        rows = server["slot"][ids]
        rows = rows[rows > 0] - 1
        return {"slot": ids, "trace": ids[:0], "diag": ids[:0], "S_rows": rows, "Q_rows": rows, "w_rows": rows}

    def refresh(self, server: State) -> State:
        """Recompute the running sum from the table (removes accumulated rounding)."""
        n = int(server["rows"])
        server = dict(server)
        server["M"] = np.einsum("b,bij->ij", server["w_rows"][:n],
                                completion(server["S_rows"][:n], server["Q_rows"][:n]))
        return server

    def held(self, server: State) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The clients the server holds a statistic of, in order of their ids: (ids, their transported statistics,
        their weights)."""
        ids = np.flatnonzero(server["slot"] > 0)
        rows = server["slot"][ids] - 1
        return ids, completion(server["S_rows"][rows], server["Q_rows"][rows]), server["w_rows"][rows]

    def consensus(self, broadcast: State) -> np.ndarray:
        return broadcast["Q"][:, : self.rank]

    def upload_bytes(self) -> int:
        d, m = self.n_features, self.block
        return d * m * 8 if self.bits is None else quantized_bytes(d, m, self.bits)

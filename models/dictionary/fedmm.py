"""FedMM for dictionary learning (seed 003, Alg. 2 specialised by Sec. 6, eqs. 14-18 and 28).

    min_theta sum_i mu_i E_i[min_h 1/2 ||Z - theta h||^2 + lambda ||h||_1] + eta ||theta||^2   (theta: p x K)

The surrogate is linear in S = (S1, S2) = (E[h h'], E[Z h']), the codes h taken under the current theta. A sampled
client i computes its S_i (`codes.statistics`), sends Quant(Delta_i) with Delta_i = S_i - S_hat - V_i and moves its
control variate V_i += (alpha/p) Quant(Delta_i). The server forms H = V + (1/p) sum_i mu_i Quant(Delta_i), steps
S_hat <- Proj(S_hat + gamma_t H) (Proj clips S1's eigenvalues at 0: the surrogate space M_K^+ x R^{p x K}), moves
V += (alpha/p) sum_i mu_i Quant(Delta_i) and broadcasts S_hat with its minimiser T(S_hat) = S2 (S1 + 2 eta I)^-1.

The server also keeps each client's V_i (it follows from what the client sent), so it can rebuild the statistic
S_i = Quant(Delta_i) + S_hat + V_i and refuse what no honest client could send (`screen`): an S1 that is not
positive semi-definite, or an S2 entry beyond Cauchy-Schwarz, S2_jk^2 <= E[Z_j^2] S1_kk, E[Z_j^2] being the
client's diag(C_i) from the statistics phase. Its table of V_i follows the clients seen (models.core.federated
.client_rows), as FedMM for PCA's does.

mu_i is the client's capped weight over the fleet's total (`attach_fleet`), p the share sampled each round.
"""

from __future__ import annotations

import numpy as np

from models.core.federated import FederatedAlgorithm, State, client_rows, step_count
from models.core.quantize import dequantize, quantize, quantized_bytes
from models.core.sampling import per_round
from models.dictionary.codes import TRAIN_STEPS, TRAIN_TOL, statistics

STATS = ("S1", "S2")


#: atoms unless told: as many as the pooled reference of issue 26 uses, but always at least RESIDUAL_ROOM fewer than
#: the features: a dictionary that spans every direction rebuilds any record, and its residual says nothing
MAX_DEFAULT_ATOMS, RESIDUAL_ROOM = 16, 6


def default_atoms(n_features: int) -> int:
    return max(1, min(MAX_DEFAULT_ATOMS, n_features - RESIDUAL_ROOM))


def project(S1: np.ndarray) -> np.ndarray:
    """S1 symmetrised with its negative eigenvalues clipped at 0 (Alg. 2 line 16 with B_t = I)."""
    w, U = np.linalg.eigh((S1 + S1.T) / 2)
    return (U * np.maximum(w, 0.0)) @ U.T


def dictionary(S1: np.ndarray, S2: np.ndarray, eta: float) -> np.ndarray:
    """T(S) = S2 (S1 + 2 eta I)^-1 (eq. 17 with g = eta ||theta||^2)."""
    A = S1 + 2 * eta * np.eye(len(S1))
    return np.linalg.solve(A, S2.T).T  # A is symmetric


def quantized(D: np.ndarray, bits: int | None) -> np.ndarray:
    """Quant(D): b-bit symmetric per-column quantisation (models.core.quantize), batched; D itself without bits."""
    return D if bits is None else dequantize(*quantize(D, bits), bits)


class FedMMDictionary(FederatedAlgorithm):
    name = "fedmm-dl"
    row_tables = ("slot", "diag", "V1_rows", "V2_rows")

    def __init__(self, n_features: int, atoms: int | None = None, lam: float = 0.1, eta: float = 0.01,
                 beta: float = 1.0, alpha: float = 0.05, gamma: float | None = None, bits: int | None = None,
                 code_steps: int = TRAIN_STEPS, tol: float = TRAIN_TOL):
        if atoms is None:
            atoms = default_atoms(n_features)
        if not 1 <= atoms <= 256:
            raise ValueError(f"atoms (the dictionary's size K) must be between 1 and 256, got {atoms}")
        if not 0 < lam <= 100:
            raise ValueError(f"lam must be in (0, 100] (the codes' l1 penalty), got {lam}")
        if not 0 < eta <= 100:
            raise ValueError(f"eta must be in (0, 100] (the dictionary's ridge), got {eta}")
        if not 0 < beta <= 100:
            raise ValueError(f"beta must be in (0, 100] (step sizes gamma_t = beta / sqrt(beta + t)), got {beta}")
        if not 0 <= alpha <= 1:
            raise ValueError(f"alpha must be in [0, 1] (the control variates' step), got {alpha}")
        if gamma is not None and not 0 < gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1] (a constant step size), got {gamma}")
        if bits is not None and not 2 <= bits <= 16:
            raise ValueError(f"bits must be between 2 and 16, got {bits}")
        if not 0 < tol < 1:
            raise ValueError(f"tol must be in (0, 1), got {tol}")
        self.n_features, self.atoms = int(n_features), int(atoms)
        self.lam, self.eta, self.beta, self.alpha = float(lam), float(eta), float(beta), float(alpha)
        self.gamma, self.bits, self.tol = gamma, bits, float(tol)
        self.code_steps = step_count("code_steps", code_steps)

    def step_size(self, t: int) -> float:
        """gamma_t: the constant `gamma`, else beta / sqrt(beta + t) (seed 003 Sec. 6)."""
        return self.gamma if self.gamma is not None else self.beta / np.sqrt(self.beta + t)

    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        """S_hat_0 = (I, theta_0 (1 + 2 eta)), so that T(S_hat_0) = theta_0, random atoms of unit norm."""
        p, K = self.n_features, self.atoms
        theta = rng.standard_normal((p, K))
        theta /= np.linalg.norm(theta, axis=0)
        S1, S2 = np.eye(K), theta * (1 + 2 * self.eta)
        server = {"S1": S1, "S2": S2, "V1": np.zeros((K, K)), "V2": np.zeros((p, K)), "t": np.zeros((), np.int64),
                  "slot": np.zeros(n_clients, np.int64), "rows": np.zeros((), np.int64),
                  "V1_rows": np.zeros((0, K, K)), "V2_rows": np.zeros((0, p, K)),
                  "mu_total": np.array(float(n_clients)), "p": np.array(1.0)}
        return server, self.broadcast_of(server)

    def broadcast_of(self, server: State) -> State:
        """S_hat, its minimiser T(S_hat) and the share p sampled (the clients' control-variate step is alpha/p)."""
        return {"S1": server["S1"], "S2": server["S2"], "theta": dictionary(server["S1"], server["S2"], self.eta),
                "p": server["p"]}

    def attach_fleet(self, server: State, weight: np.ndarray, fraction: float,
                     diag: np.ndarray | None = None) -> tuple[State, State]:
        """What the statistics phase fixed: every client's capped weight (mu_i = weight / their sum), the share p
        sampled each round, and each client's diag(C_i) = E[Z_j^2] (the bound uploads are checked against)."""
        n = len(weight)
        out = {**server, "mu_total": np.array(float(np.sum(weight))), "p": np.array(per_round(n, fraction) / n),
               "rejected": np.zeros(())}
        if diag is not None:
            out["diag"] = np.asarray(diag, dtype=float)
        return out, self.broadcast_of(out)

    def init_clients(self, data: State, broadcast: State) -> State:
        b, (p, K) = len(data["X"]), broadcast["S2"].shape
        return {"V1": np.zeros((b, K, K)), "V2": np.zeros((b, p, K))}

    def client_update(self, state: State, data: State, broadcast: State) -> tuple[State, State]:
        """Each sampled client: S_i under T(S_hat), Quant(S_i - S_hat - V_i) sent, V_i += (alpha/p) of it."""
        stats = [statistics(X, broadcast["theta"], self.lam, self.code_steps, self.tol) for X in data["X"]]
        S1 = np.stack([s[0] for s in stats]) - broadcast["S1"] - state["V1"]
        S2 = np.stack([s[1] for s in stats]) - broadcast["S2"] - state["V2"]
        D1, D2 = quantized(S1, self.bits), quantized(S2, self.bits)
        step = self.alpha / float(broadcast["p"])
        return {"V1": state["V1"] + step * D1, "V2": state["V2"] + step * D2}, {"S1": D1, "S2": D2}

    def screen(self, server: State, client_ids: np.ndarray, uploads: State) -> np.ndarray | None:
        """Refuse (0) an upload whose statistic S_i = Quant(Delta_i) + S_hat + V_i has an S1 that is not positive
        semi-definite or an S2 beyond Cauchy-Schwarz against the client's E[Z_j^2]; keep (1) the others. Slack:
        rounding, or the quantisation step (half a level of each column's largest entry)."""
        if not len(client_ids):
            return None
        ids = np.asarray(client_ids, dtype=np.int64)
        V1, V2 = self._variates(server, ids)
        S1 = uploads["S1"] + server["S1"] + V1
        S2 = uploads["S2"] + server["S2"] + V2
        e1, e2 = self._slack(uploads["S1"]), self._slack(uploads["S2"])
        size = np.abs(S1).max(axis=(1, 2)) + 1.0
        sym = np.abs(S1 - np.swapaxes(S1, 1, 2)).max(axis=(1, 2)) <= 2 * e1.max(axis=(1, 2)) + 1e-9 * size
        lowest = np.linalg.eigvalsh((S1 + np.swapaxes(S1, 1, 2)) / 2)[:, 0]
        psd = lowest >= -(np.linalg.norm(e1, axis=(1, 2)) + 1e-9 * size)
        ok = sym & psd & np.isfinite(S1).all(axis=(1, 2)) & np.isfinite(S2).all(axis=(1, 2))
        if "diag" in server:
            s11 = np.maximum(np.diagonal(S1, axis1=1, axis2=2) + np.diagonal(e1, axis1=1, axis2=2), 0)  # (b, K)
            bound = np.sqrt(server["diag"][ids][:, :, None] * s11[:, None, :]) * (1 + 1e-9) + e2 + 1e-12
            ok &= (np.abs(S2) <= bound).all(axis=(1, 2))
        return ok.astype(float)

    def _slack(self, D: np.ndarray) -> np.ndarray:
        if self.bits is None:
            return np.zeros_like(D)
        levels = 2 ** (self.bits - 1) - 1
        return np.broadcast_to(np.abs(D).max(axis=-2, keepdims=True) / levels, D.shape)

    def _variates(self, server: State, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each client's V_i as the server follows it (zeros before its first answer)."""
        slot = server["slot"][ids]
        K, p = self.atoms, self.n_features
        V1, V2 = np.zeros((len(ids), K, K)), np.zeros((len(ids), p, K))
        seen = slot > 0
        V1[seen], V2[seen] = server["V1_rows"][slot[seen] - 1], server["V2_rows"][slot[seen] - 1]
        return V1, V2

    def server_update(self, server: State, client_ids: np.ndarray, uploads: State,
                      weight: np.ndarray) -> tuple[State, State]:
        """Alg. 2 lines 13-17 (updates `server` in place; O(sampled) per round)."""
        server["t"] = np.array(int(server["t"]) + 1)
        if not len(client_ids):
            return server, self.broadcast_of(server)
        ids = np.asarray(client_ids, dtype=np.int64)
        p = float(server["p"])
        mu = np.asarray(weight, dtype=float) / float(server["mu_total"])
        sent1 = np.einsum("b,bij->ij", mu, uploads["S1"]) / p
        sent2 = np.einsum("b,bij->ij", mu, uploads["S2"]) / p
        gamma = self.step_size(int(server["t"]))
        S1 = project(server["S1"] + gamma * (server["V1"] + sent1))
        S2 = server["S2"] + gamma * (server["V2"] + sent2)
        step = self.alpha / p
        server["V1"] = server["V1"] + self.alpha * sent1
        server["V2"] = server["V2"] + self.alpha * sent2
        rows = client_rows(server, ids, ("V1_rows", "V2_rows"))
        server["V1_rows"][rows] += step * uploads["S1"]
        server["V2_rows"][rows] += step * uploads["S2"]
        server["S1"], server["S2"] = S1, S2
        return server, self.broadcast_of(server)

    def touched(self, server: State, client_ids: np.ndarray) -> dict[str, np.ndarray]:
        ids = np.asarray(client_ids, dtype=np.int64)
        rows = server["slot"][ids]
        rows = rows[rows > 0] - 1
        return {"slot": ids, "diag": ids[:0], "V1_rows": rows, "V2_rows": rows}

    def consensus(self, broadcast: State) -> np.ndarray:
        """The dictionary theta (features x atoms)."""
        return broadcast["theta"]

    def upload_bytes(self) -> int:
        p, K = self.n_features, self.atoms
        if self.bits is None:
            return 8 * K * (K + p)
        return quantized_bytes(K, K, self.bits) + quantized_bytes(p, K, self.bits)

    def broadcast_bytes(self) -> int:
        return 8 * self.atoms * (self.atoms + 2 * self.n_features)

    def client_bytes(self) -> int:
        return 8 * self.atoms * (self.atoms + self.n_features) * 4


__all__ = ["FedMMDictionary", "dictionary", "project", "quantized", "statistics"]

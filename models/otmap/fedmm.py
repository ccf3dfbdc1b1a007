"""FedMM-OT (seed 003, Alg. 3) and its baselines, as client and server steps over numpy arrays.

A sampled client i takes one gradient step on its W_i(., theta) from the broadcast omega (Sec. 7.3's relaxation of
line 6): omega_i - omega = -lr (E_i[grad_omega f_omega(X)] + G_Q), G_Q the gradient of the Q part of W, common to
all. So the agent uploads only the mean parameter gradient of f_omega over its records (`source_grad`: numpy
only, no sample of Q on the device); the server adds G_Q, forms Delta_i = omega_i - omega - V_i and keeps the
control variates V_i (they follow from what was sent). Server: H = V + (1/p) sum_i mu_i Delta_i,
omega <- Proj(omega + gamma H), V += (alpha/p) sum_i mu_i Delta_i, then theta <- argmin W(omega, .) on Q alone,
relaxed to `server_steps` Adam steps on fresh batches of Q (Sec. 7.3: ten).

Baselines: `PseudoMM` averages the sampled clients' best responses omega_i (no control variates, no 1/p, no
step: the alternating scheme the paper starts from), and `FedAdam` (Reddi et al. 2021) applies Adam at the server
to the averaged gradient of W_i in (omega, theta) together, one local step per client, as in the paper's Fig. 3.

mu_i is the client's weight over the fleet's total (`attach_fleet`), p the share sampled each round."""

from __future__ import annotations

import numpy as np

from models.core.federated import FederatedAlgorithm, State
from models.core.sampling import per_round
from models.otmap.adam import adam_state, adam_step
from models.otmap.icnn import Layout, init, project
from models.otmap.objective import source_grad, target_terms, theta_grad

#: the clients' step unless told: lr = this / n_features. The curvature of W in the quadratic part of f_omega grows
#: with E||x||^2, about the number of features on standardised records, and a plain gradient step diverges past
#: 2 / curvature (measured on `simulate otmap --paper`'s benchmark: 0.5 / 16 drifts up after 40 rounds, 0.25 / 8
#: diverges, 0.1 / 8 converges)
DEFAULT_LR_TIMES_FEATURES = 0.1


class FedMMOT(FederatedAlgorithm):
    name = "fedmm-ot"
    row_tables = ("V_rows",)

    def __init__(self, n_features: int, hidden: int = 64, lam: float = 1.0, lr: float | None = None, gamma: float = 1.0,
                 alpha: float = 0.01, server_steps: int = 10, server_lr: float = 0.01, batch: int = 1024,
                 seed: int = 0) -> None:
        if n_features < 1 or hidden < 1:
            raise ValueError(f"otmap: n_features and hidden must be >= 1, got {n_features} and {hidden}")
        lr = DEFAULT_LR_TIMES_FEATURES / n_features if lr is None else lr
        for name, value in (("lam", lam), ("lr", lr), ("gamma", gamma), ("server_lr", server_lr)):
            if not value > 0:
                raise ValueError(f"otmap: {name} must be > 0, got {value}")
        if not 0 <= alpha <= 1:
            raise ValueError(f"otmap: alpha must be in [0, 1], got {alpha}")
        self.layout = Layout(n_features, hidden)
        self.lam, self.lr, self.gamma, self.alpha = lam, lr, gamma, alpha
        self.server_steps, self.server_lr, self.batch, self.seed = server_steps, server_lr, batch, seed

    # -- set-up ------------------------------------------------------------------------------------------------
    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        P = self.layout.size
        server: State = {"omega": init(self.layout, rng), "theta": init(self.layout, rng), "t": np.array(0),
                         "V_rows": np.zeros((n_clients, P)), "V": np.zeros(P), "p": np.array(1.0),
                         "mu_total": np.array(float(n_clients)), "Y": np.zeros((0, self.layout.d))}
        server.update({f"theta_{k}": v for k, v in adam_state(P).items()})
        return server, self.broadcast_of(server)

    def attach_fleet(self, server: State, weight: np.ndarray, fraction: float) -> tuple[State, State]:
        """Every client's weight (mu_i = weight / their sum) and the share p sampled each round."""
        n = len(weight)
        out = {**server, "mu_total": np.array(float(np.sum(weight))), "p": np.array(per_round(n, fraction) / n)}
        return out, self.broadcast_of(out)

    def attach_target(self, server: State, Y: np.ndarray) -> State:
        """The server's records of Q (the target every client can sample)."""
        Y = np.asarray(Y, dtype=float)
        if Y.ndim != 2 or Y.shape[1] != self.layout.d or len(Y) == 0:
            raise ValueError(f"otmap: Q's records must be n x {self.layout.d}, got shape {Y.shape}")
        return {**server, "Y": Y}

    def start_from_moments(self, server: State, mean: np.ndarray, var: np.ndarray) -> tuple[State, State]:
        """Start both maps at the per-feature affine maps that match P's means and variances (the fleet's, from its
        counts, sums and sums of squares) with those of the server's records of Q: x -> D x + b, D diagonal
        positive, the gradient of a convex quadratic, so a fleet shifted as a whole starts near its map."""
        Y = server["Y"]
        mean, var = np.asarray(mean, dtype=float), np.asarray(var, dtype=float)
        if mean.shape != (self.layout.d,) or var.shape != (self.layout.d,) or np.any(var < 0) or len(Y) == 0:
            raise ValueError(f"otmap: P's means and variances must be {self.layout.d} numbers (variances >= 0), and "
                             "the server needs Q's records first")
        # a feature constant on P (variance 0, or rounding's) is mapped by a shift alone: any scale fits it, and the
        # ratio of variances would be Q's over 1e-12 (measured on nsl-kdd: a scale of 10^4, and the map diverged)
        constant = var <= 1e-10 * (1.0 + mean**2)
        D = np.where(constant, 1.0, np.sqrt((Y.var(axis=0) + 1e-12) / np.where(constant, 1.0, var)))
        for key, scale, shift in (("omega", D, Y.mean(axis=0) - D * mean), ("theta", 1 / D, mean - Y.mean(axis=0) / D)):
            parts = self.layout.unpack(server[key].copy())
            parts["L"][:] = np.diag(np.sqrt(scale))
            parts["w"][:] = shift
            server[key] = self.layout.pack(parts)
        return server, self.broadcast_of(server)

    def broadcast_of(self, server: State) -> State:
        return {"omega": server["omega"], "theta": server["theta"]}

    def init_clients(self, data: State, broadcast: State) -> State:
        return {}

    # -- the round ---------------------------------------------------------------------------------------------
    def client_update(self, state: State, data: State, broadcast: State) -> tuple[State, State]:
        grads = np.stack([source_grad(self.layout, broadcast["omega"], X) for X in data["X"]])
        return state, {"grad": grads}

    def q_batch(self, server: State, step: int) -> np.ndarray:
        """A batch of the server's records of Q, drawn from (seed, round, step): reproducible, as a resumed
        coordinator needs."""
        Y = server["Y"]
        if len(Y) == 0:
            raise ValueError("otmap: the server has no records of Q (attach_target)")
        if len(Y) <= self.batch:
            return Y
        rng = np.random.default_rng((self.seed, int(server["t"]), step))
        return Y[rng.choice(len(Y), self.batch, replace=False)]

    def mu(self, server: State, weight: np.ndarray) -> np.ndarray:
        return np.asarray(weight, dtype=float) / float(server["mu_total"])

    def server_update(self, server: State, client_ids: np.ndarray, uploads: State,
                      weight: np.ndarray) -> tuple[State, State]:
        server["t"] = np.array(int(server["t"]) + 1)
        p, mu = float(server["p"]), self.mu(server, weight)
        _, G_Q, _ = target_terms(self.layout, server["omega"], server["theta"], self.q_batch(server, 0), self.lam)
        D = -self.lr * (self.grads(uploads) + G_Q) - server["V_rows"][client_ids]  # Delta_i (none: V alone moves)
        server["V_rows"][client_ids] += self.alpha / p * D
        sent = mu @ D / p
        server["omega"] = project(self.layout, server["omega"] + self.gamma * (server["V"] + sent))
        server["V"] = server["V"] + self.alpha * sent
        self.fit_theta(server)
        return server, self.broadcast_of(server)

    def grads(self, uploads: State) -> np.ndarray:
        """The uploaded gradients, one row per answer (none when every answer of a round was refused)."""
        return np.asarray(uploads.get("grad", np.zeros((0, self.layout.size))), dtype=float)

    def fit_theta(self, server: State) -> None:
        """theta <- argmin W(omega, .) on Q, relaxed to `server_steps` Adam steps (in place)."""
        opt = {k: server[f"theta_{k}"] for k in ("m", "v", "k")}
        theta = server["theta"]
        for step in range(1, self.server_steps + 1):
            G = theta_grad(self.layout, server["omega"], theta, self.q_batch(server, step), self.lam)
            theta = project(self.layout, adam_step(theta, G, opt, self.server_lr))
        server["theta"] = theta
        server.update({f"theta_{k}": v for k, v in opt.items()})

    def touched(self, server: State, client_ids: np.ndarray) -> dict[str, np.ndarray]:
        return {"V_rows": np.asarray(client_ids)}

    def upload_bytes(self) -> int:
        return 8 * self.layout.size

    def broadcast_bytes(self) -> int:
        return 2 * 8 * self.layout.size


class PseudoMM(FedMMOT):
    """The alternating scheme without FedMM's aggregation: omega <- the mean of the sampled clients' one-step best
    responses (weighted by mu_i among them), then theta <- argmin W(omega, .) on Q."""

    name = "pseudo-mm"

    def server_update(self, server: State, client_ids: np.ndarray, uploads: State,
                      weight: np.ndarray) -> tuple[State, State]:
        server["t"] = np.array(int(server["t"]) + 1)
        mu = np.asarray(weight, dtype=float)
        if len(mu):  # no answer: no best response to average, omega stays
            _, G_Q, _ = target_terms(self.layout, server["omega"], server["theta"], self.q_batch(server, 0), self.lam)
            step = -self.lr * (mu @ self.grads(uploads) / mu.sum() + G_Q)
            server["omega"] = project(self.layout, server["omega"] + step)
        self.fit_theta(server)
        return server, self.broadcast_of(server)


class FedAdam(FedMMOT):
    """FedAdam (Reddi et al. 2021) on W in (omega, theta) together: each sampled client's one local gradient
    step, averaged (mu_i among them), is the pseudo-gradient of a server Adam step (`server_lr`). The Q part of a
    client's gradient is common to all and computed once at the server."""

    name = "fedadam"

    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        server, broadcast = super().init_server(n_clients, rng)
        server.update({f"both_{k}": v for k, v in adam_state(2 * self.layout.size).items()})
        return server, broadcast

    def server_update(self, server: State, client_ids: np.ndarray, uploads: State,
                      weight: np.ndarray) -> tuple[State, State]:
        server["t"] = np.array(int(server["t"]) + 1)
        mu = np.asarray(weight, dtype=float)
        if not len(mu):  # no answer: no pseudo-gradient, no step
            return server, self.broadcast_of(server)
        _, G_Q, G_theta = target_terms(self.layout, server["omega"], server["theta"], self.q_batch(server, 0),
                                       self.lam)
        G = np.concatenate([mu @ self.grads(uploads) / mu.sum() + G_Q, G_theta])
        opt = {k: server[f"both_{k}"] for k in ("m", "v", "k")}
        x = adam_step(np.concatenate([server["omega"], server["theta"]]), G, opt, self.server_lr)
        P = self.layout.size
        server["omega"], server["theta"] = project(self.layout, x[:P]), project(self.layout, x[P:])
        server.update({f"both_{k}": v for k, v in opt.items()})
        return server, self.broadcast_of(server)


ALGORITHMS: dict[str, type[FedMMOT]] = {c.name: c for c in (FedMMOT, PseudoMM, FedAdam)}

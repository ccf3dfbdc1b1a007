"""A dense input-convex neural network (Amos et al. 2017; the dense ICNN of Korotin et al. 2021a) in numpy, with its
input gradient (the transport map x -> grad_x f(x)) and that map's derivatives written by hand.

    h1 = W0 x + b0,             z1 = s(h1)
    h2 = A1 z1 + W1 x + b1,     z2 = s(h2)
    f(x) = a . z2 + w . x + 1/2 ||L' x||^2

s is the softplus (convex, increasing), A1 >= 0 and a >= 0 (the z-path: `project` clips them), so f is convex in x;
the quadratic term makes an affine map (the Gaussian case) exactly representable. Three dense layers: (W0, b0),
(A1, W1, b1), (a, w, L). Parameters travel as one flat vector (`Layout` names its pieces), as they are uploaded.

Only numpy: agents compute the parameter gradient of f on their records (`potential_grad`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Params = dict[str, np.ndarray]


@dataclass(frozen=True)
class Layout:
    """The shapes of an ICNN on `d` features with `hidden` units in each of its two hidden layers."""

    d: int
    hidden: int

    def shapes(self) -> dict[str, tuple[int, ...]]:
        d, m = self.d, self.hidden
        return {"W0": (m, d), "b0": (m,), "A1": (m, m), "W1": (m, d), "b1": (m,), "a": (m,), "w": (d,), "L": (d, d)}

    @property
    def size(self) -> int:
        return sum(int(np.prod(s)) for s in self.shapes().values())

    def unpack(self, vec: np.ndarray) -> Params:
        """Views of the flat vector, one per named piece."""
        if vec.shape != (self.size,):
            raise ValueError(f"ICNN parameters: expected a vector of {self.size} numbers, got shape {vec.shape}")
        out, at = {}, 0
        for name, shape in self.shapes().items():
            n = int(np.prod(shape))
            out[name] = vec[at:at + n].reshape(shape)
            at += n
        return out

    def pack(self, parts: Params) -> np.ndarray:
        return np.concatenate([np.asarray(parts[name], dtype=float).ravel() for name in self.shapes()])


#: the z-path weights kept non-negative (convexity in x)
NON_NEGATIVE = ("A1", "a")


def init(layout: Layout, rng: np.random.Generator, scale: float = 0.1) -> np.ndarray:
    """Near the identity map: L = I, w = 0, small hidden weights (non-negative on the z-path)."""
    d, m = layout.d, layout.hidden
    return layout.pack({
        "W0": rng.standard_normal((m, d)) / np.sqrt(d), "b0": np.zeros(m),
        "A1": rng.random((m, m)) * scale / m, "W1": rng.standard_normal((m, d)) * scale / np.sqrt(d),
        "b1": np.zeros(m), "a": rng.random(m) * scale / m, "w": np.zeros(d), "L": np.eye(d)})


def project(layout: Layout, vec: np.ndarray) -> np.ndarray:
    """Proj onto Theta: a copy with the z-path weights clipped at 0."""
    out = vec.copy()
    p = layout.unpack(out)
    for name in NON_NEGATIVE:
        np.maximum(p[name], 0.0, out=p[name])
    return out


def _softplus(h: np.ndarray) -> np.ndarray:
    return np.maximum(h, 0.0) + np.log1p(np.exp(-np.abs(h)))


def _activation(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """softplus(h) and its derivative, the logistic sigmoid, from one exponential (stable for any h)."""
    e = np.exp(-np.abs(h))
    inv = 1.0 / (1.0 + e)
    return np.maximum(h, 0.0) + np.log1p(e), np.where(h >= 0, inv, e * inv)


@dataclass
class _Pass:
    p: Params
    h1: np.ndarray
    z1: np.ndarray
    u1: np.ndarray  # s'(h1)
    h2: np.ndarray
    u2: np.ndarray  # s'(h2)


def _forward(layout: Layout, vec: np.ndarray, X: np.ndarray) -> _Pass:
    if X.ndim != 2 or X.shape[1] != layout.d:
        raise ValueError(f"ICNN input: expected records x {layout.d} features, got shape {X.shape}")
    p = layout.unpack(vec)
    h1 = X @ p["W0"].T + p["b0"]
    z1, u1 = _activation(h1)
    h2 = z1 @ p["A1"].T + X @ p["W1"].T + p["b1"]
    return _Pass(p, h1, z1, u1, h2, _activation(h2)[1])


def potential(layout: Layout, vec: np.ndarray, X: np.ndarray) -> np.ndarray:
    """f(x) for each record (n,)."""
    q = _forward(layout, vec, X)
    XL = X @ q.p["L"]
    return _softplus(q.h2) @ q.p["a"] + X @ q.p["w"] + 0.5 * np.einsum("ij,ij->i", XL, XL)


def potential_grad(layout: Layout, vec: np.ndarray, X: np.ndarray, rho: np.ndarray | float) -> np.ndarray:
    """The parameter gradient of sum_n rho_n f(x_n) (rho: a weight per record, or one for all)."""
    q = _forward(layout, vec, X)
    p = q.p
    r = np.broadcast_to(np.asarray(rho, dtype=float), (len(X),))
    d2 = r[:, None] * p["a"] * q.u2
    d1 = (d2 @ p["A1"]) * q.u1
    g = {"a": r @ _softplus(q.h2), "w": r @ X, "L": (X.T * r) @ X @ p["L"],
         "A1": d2.T @ q.z1, "W1": d2.T @ X, "b1": d2.sum(axis=0), "W0": d1.T @ X, "b0": d1.sum(axis=0)}
    return layout.pack(g)


def transport(layout: Layout, vec: np.ndarray, X: np.ndarray) -> np.ndarray:
    """The map grad_x f(x) for each record (n x d)."""
    q = _forward(layout, vec, X)
    p = q.p
    d2 = p["a"] * q.u2
    d1 = (d2 @ p["A1"]) * q.u1
    return d2 @ p["W1"] + d1 @ p["W0"] + p["w"] + X @ (p["L"] @ p["L"].T)


def transport_vjp(layout: Layout, vec: np.ndarray, X: np.ndarray, C: np.ndarray,
                  params: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Derivatives of Phi = sum_n <c_n, grad_x f(x_n)>: its parameter gradient (empty when not `params`: the
    server's theta steps need only the input gradient in omega), and its input gradient (the Hessian-vector
    products H(x_n) c_n, n x d)."""
    q = _forward(layout, vec, X)
    p = q.p
    a, A1, W0, W1, L = p["a"], p["A1"], p["W0"], p["W1"], p["L"]
    s2 = q.u2 * (1 - q.u2)  # s''(h2)
    s1 = q.u1 * (1 - q.u1)
    d2 = a * q.u2
    e1 = d2 @ A1
    d1 = e1 * q.u1
    p1, p2 = C @ W0.T, C @ W1.T
    q1 = p1 * q.u1
    D2 = p2 + q1 @ A1.T  # dPhi/d(d2)
    k2 = D2 * a * s2  # dPhi/dh2
    k1 = p1 * e1 * s1 + (k2 @ A1) * q.u1  # dPhi/dh1
    H = k2 @ W1 + k1 @ W0 + C @ (L @ L.T)
    if not params:
        return np.zeros(0), H
    G = X.T @ C
    g = {"a": np.einsum("ij,ij->j", D2, q.u2), "w": C.sum(axis=0), "L": (G + G.T) @ L,
         "A1": d2.T @ q1 + k2.T @ q.z1, "W1": d2.T @ C + k2.T @ X, "b1": k2.sum(axis=0),
         "W0": d1.T @ C + k1.T @ X, "b0": k1.sum(axis=0)}
    return layout.pack(g), H

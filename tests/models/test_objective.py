import numpy as np

from models.pca.fedpe import surrogate, surrogate_gradient
from models.pca.objective import reconstruction_gradient, reconstruction_objective


def numeric_grad(f, U, eps=1e-6):
    G = np.zeros_like(U)
    for idx in np.ndindex(U.shape):
        E = np.zeros_like(U)
        E[idx] = eps
        G[idx] = (f(U + E) - f(U - E)) / (2 * eps)
    return G


def test_objective_equals_reconstruction_error_of_the_records(rng):
    X = rng.standard_normal((200, 6))
    U = rng.standard_normal((6, 2))
    C = X.T @ X / len(X)
    direct = np.mean(np.sum((X - X @ U @ U.T) ** 2, axis=1))
    assert np.isclose(reconstruction_objective(C, U), direct)


def test_gradient_matches_finite_differences_for_non_orthonormal_u(rng):
    A = rng.standard_normal((7, 7))
    C = A @ A.T
    U = rng.standard_normal((7, 3))
    G = reconstruction_gradient(C, U)
    assert np.allclose(G, numeric_grad(lambda V: reconstruction_objective(C, V), U), rtol=1e-5, atol=1e-5)


def test_batched_gradient_matches_per_client(rng):
    C = np.stack([(lambda A: A @ A.T)(rng.standard_normal((5, 5))) for _ in range(4)])
    U = rng.standard_normal((4, 5, 2))
    G = reconstruction_gradient(C, U)
    for i in range(4):
        assert np.allclose(G[i], reconstruction_gradient(C[i], U[i]))


def test_fedpe_surrogate_gradient_matches_finite_differences(rng):
    U = rng.standard_normal((6, 3)) * 0.9
    T = np.abs(rng.standard_normal((3, 3)))
    rho = 2.5

    def penalty(V):
        h, _ = surrogate(V)
        return np.sum(T * h) + rho / 2 * np.sum(h * h)

    assert np.allclose(surrogate_gradient(U, T, rho), numeric_grad(penalty, U), rtol=1e-4, atol=1e-6)


def test_surrogate_is_zero_on_orthonormal_matrices(rng):
    Q, _ = np.linalg.qr(rng.standard_normal((8, 3)))
    h, _ = surrogate(Q)
    assert np.abs(h).max() < 1e-20

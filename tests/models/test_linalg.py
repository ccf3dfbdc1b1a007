import numpy as np

from models.core.linalg import orth, procrustes_align, subspace_distance, top_eigvecs


def test_subspace_distance_bounds_and_rotation_invariance(rng):
    U, _ = np.linalg.qr(rng.standard_normal((10, 3)))
    R, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    assert subspace_distance(U @ R, U) < 1e-12
    assert subspace_distance(2.0 * U, U) < 1e-12  # only the span counts
    E = np.eye(10)
    assert np.isclose(subspace_distance(E[:, :3], E[:, 3:6]), np.sqrt(3))


def test_orth_is_batched_and_orthonormal(rng):
    A = rng.standard_normal((4, 9, 3))
    Q = orth(A)
    assert np.allclose(np.swapaxes(Q, 1, 2) @ Q, np.eye(3))
    for i in range(4):
        assert subspace_distance(Q[i], A[i]) < 1e-10


def test_top_eigvecs_are_sorted(rng):
    A = rng.standard_normal((6, 6))
    w, V = top_eigvecs(A @ A.T, 3)
    assert np.all(np.diff(w) <= 0)
    assert np.allclose((A @ A.T) @ V, V * w)


def test_procrustes_recovers_rotation(rng):
    Z, _ = np.linalg.qr(rng.standard_normal((8, 3)))
    R, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    assert np.allclose(procrustes_align(Z @ R, Z), Z)

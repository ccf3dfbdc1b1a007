import itertools

import numpy as np
import pytest

from models.partition import partition
from models.synthetic import ATTACKS, FEATURES, generate_traffic


def _check_cover(parts, n):
    allidx = np.concatenate(parts)
    assert len(allidx) == n and len(np.unique(allidx)) == n
    assert all(len(p) > 0 for p in parts)


@pytest.mark.parametrize("how", ["iid", "noniid", "dirichlet"])
def test_partitions_are_disjoint_and_cover_every_record(rng, how):
    X = rng.standard_normal((500, 4))
    parts = partition(X, 20, how, np.random.default_rng(0))
    _check_cover(parts, 500)


def test_noniid_sorts_clients_along_the_feature(rng):
    X = rng.standard_normal((300, 3))
    parts = partition(X, 10, "noniid", np.random.default_rng(0), feature=1)
    for a, b in itertools.pairwise(parts):
        assert X[a, 1].max() <= X[b, 1].min()


def test_dirichlet_with_small_alpha_is_skewed(rng):
    X = np.r_[rng.normal(0, 1, (300, 2)), rng.normal(8, 1, (300, 2))]
    parts = partition(X, 10, "dirichlet", np.random.default_rng(0), alpha=0.05, n_clusters=2)
    _check_cover(parts, 600)
    mixed = [min((X[p, 0] < 4).mean(), (X[p, 0] >= 4).mean()) for p in parts]
    assert np.median(mixed) < 0.1  # most clients hold mostly one cluster


def test_partition_errors(rng):
    X = rng.standard_normal((5, 2))
    with pytest.raises(ValueError, match="6 clients but only 5"):
        partition(X, 6)
    with pytest.raises(ValueError, match="unknown partition"):
        partition(X, 2, "zipf")


def test_synthetic_traffic_is_seeded_and_labelled():
    a = generate_traffic(n_devices=6, records_per_device=50, seed=1)
    b = generate_traffic(n_devices=6, records_per_device=50, seed=1)
    c = generate_traffic(n_devices=6, records_per_device=50, seed=2)
    assert np.array_equal(a.X_normal, b.X_normal)
    assert not np.allclose(a.X_normal[:10], c.X_normal[:10])
    assert a.feature_names == FEATURES and a.X_normal.shape[1] == len(FEATURES)
    assert set(a.attack_names) <= set(ATTACKS) and len(a.X_attack) == len(a.attack_names)
    assert set(np.unique(a.device_normal)) == set(range(6))
    assert (a.X_normal >= 0).all() and np.isfinite(a.X_attack).all()

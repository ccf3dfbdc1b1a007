import numpy as np
import pytest

from models.detection.preprocessing import Moments, Preprocessor, global_standardisation, signed_log1p


def test_signed_log1p_is_odd_and_inverted(rng):
    X = rng.standard_normal((50, 4)) * 1e4
    T = signed_log1p(X)
    assert np.allclose(signed_log1p(-X), -T)
    pre = Preprocessor(["a", "b", "c", "d"], np.ones(4, bool), np.zeros(4), np.ones(4))
    assert np.allclose(pre.inverse_transform(pre.transform(X)), X, rtol=1e-9)


def test_federated_statistics_equal_pooled_ones(rng):
    parts = [rng.standard_normal((n, 5)) * [1, 2, 3, 4, 5] + 7 for n in (10, 40, 3)]
    moments = [Moments.of(p) for p in parts]
    mean, scale, zero = global_standardisation([m.summary() for m in moments])
    pooled = np.vstack(parts)
    assert np.allclose(mean, pooled.mean(0))
    assert np.allclose(scale, pooled.std(0))
    assert not zero.any()
    # sum_i n_i C_i / n is the pooled covariance of the standardised data
    C = sum(m.count * m.second_moment(mean, scale) for m in moments) / len(pooled)
    Xs = (pooled - mean) / scale
    assert np.allclose(C, Xs.T @ Xs / len(pooled))


def test_streaming_update_equals_batch(rng):
    X = rng.standard_normal((30, 3))
    m = Moments.empty(3)
    for chunk in np.array_split(X, 4):
        m.update(chunk)
    b = Moments.of(X)
    assert m.count == b.count and np.allclose(m.outer, b.outer) and np.allclose(m.total, b.total)


def test_zero_variance_features_get_unit_scale():
    X = np.c_[np.ones(10), np.arange(10.0)]
    _mean, scale, zero = global_standardisation([Moments.of(X).summary()])
    assert zero.tolist() == [True, False] and scale[0] == 1.0


def test_preprocessor_round_trips_through_dict(rng):
    pre = Preprocessor(["x", "y"], np.array([True, False]), np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    again = Preprocessor.from_dict(pre.to_dict())
    X = rng.standard_normal((5, 2))
    assert np.allclose(again.transform(X), pre.transform(X))
    with pytest.raises(ValueError, match="version"):
        Preprocessor.from_dict({**pre.to_dict(), "version": 99})


def test_trace_from_the_statistics_summary_equals_the_second_moments_trace(rng):
    """What the server bounds a client's uploads with (models.detection.screening), from its summary alone."""
    from models.detection.screening import Guard, federation_statistics, stack_summaries

    parts = [rng.standard_normal((n, 4)) * [1, 5, 2, 3] + 2 for n in (20, 7)]
    moments = [Moments.of(p) for p in parts]
    fed = federation_statistics(*stack_summaries([m.summary() for m in moments]), Guard(max_share=1.0))
    for i, m in enumerate(moments):
        assert np.isclose(fed.trace[i], np.trace(m.second_moment(fed.mean, fed.scale)))

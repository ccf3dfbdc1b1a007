"""Secure aggregation (models.private): the coordinator's view of an upload is uniform, the sum survives a third
of the devices dropping after upload, too few devices fail cleanly, and an altered share never yields a sum."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.private import shamir
from models.private.fixedpoint import Ring
from models.private.secagg import (
    Client,
    SecAggError,
    Server,
    Setup,
    default_degree,
    default_threshold,
    secure_sum,
)

pytest.importorskip("cryptography", reason="private mode needs the cryptography package (the dev extra has it)")


def setup_of(n: int, length: int, clip: float = 100.0, seed: int = 1) -> Setup:
    return Setup(b"job/1/round/3", tuple(range(n)), length, Ring.for_sum(clip, n), seed)


def chi_square_p(data: bytes) -> float:
    """p-value of the bytes' counts against the uniform distribution over 256 values (Wilson-Hilferty)."""
    counts = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256)
    expected = len(data) / 256
    x2 = float(((counts - expected) ** 2 / expected).sum())
    k = 255
    z = ((x2 / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_the_coordinators_view_of_one_upload_is_uniform():
    """A device whose values are all zero (the most structured input) uploads bytes the coordinator cannot tell
    from uniform ones: a chi-square test over 60,000 bytes of its stored masked vector."""
    setup = setup_of(6, 10_000)
    values = {i: np.zeros(10_000) for i in range(6)}
    total, _, log = secure_sum(setup, values)
    assert np.array_equal(total, np.zeros(10_000))
    for i in (0, 5):
        assert chi_square_p(log.uploads[i]) > 1e-6
    assert chi_square_p(setup.ring.pack(setup.ring.encode(np.zeros(10_000)))) < 1e-6


def test_a_third_of_the_devices_dropping_after_upload_leaves_the_exact_sum():
    n, length = 30, 50
    setup = setup_of(n, length)
    rng = np.random.default_rng(3)
    values = {i: rng.integers(-50, 50, length).astype(float) for i in range(n)}  # exact in fixed point
    gone = frozenset(rng.choice(n, n // 3, replace=False).tolist())
    total, survivors, _ = secure_sum(setup, values, gone_after_upload=gone)
    assert survivors == set(range(n))  # they uploaded: their values count, their unmasking help is not needed
    np.testing.assert_array_equal(total, sum(values[i] for i in range(n)))


def test_devices_that_vanish_before_uploading_are_left_out_and_their_masks_removed():
    n, length = 30, 20
    setup = setup_of(n, length)
    rng = np.random.default_rng(4)
    values = {i: rng.integers(-9, 9, length).astype(float) for i in range(n)}
    before = frozenset(range(0, n, 3))  # a third: shared their keys, never uploaded
    total, survivors, _ = secure_sum(setup, values, gone_before_upload=before)
    assert survivors == set(range(n)) - before
    np.testing.assert_array_equal(total, sum(values[i] for i in survivors))


@pytest.mark.parametrize("n", [100])
def test_a_sparse_graph_survives_random_thirds(n):
    """Above the full graph's size each device has k = default_degree(n) < n - 1 neighbours; random dropouts of
    a third (before and after upload) still leave every secret enough holders."""
    setup = setup_of(n, 3)
    assert setup.degree < n - 1
    rng = np.random.default_rng(5)
    for trial in range(2):
        values = {i: rng.integers(-9, 9, 3).astype(float) for i in range(n)}
        gone = rng.choice(n, n // 3, replace=False)
        before, after = frozenset(gone[: n // 6].tolist()), frozenset(gone[n // 6:].tolist())
        total, survivors, _ = secure_sum(Setup(setup.label + bytes([trial]), setup.members, 3, setup.ring, trial),
                                         values, before, after)
        np.testing.assert_array_equal(total, sum(values[i] for i in survivors))


def test_too_few_uploads_fail_the_sum_cleanly():
    n = 9
    setup = setup_of(n, 4)
    values = {i: np.ones(4) for i in range(n)}
    with pytest.raises(SecAggError, match="devices uploaded; a secure sum needs at least"):
        secure_sum(setup, values, gone_before_upload=frozenset(range(n - 2)))


def run_to_reveals(n: int = 7, length: int = 5):
    setup = setup_of(n, length)
    server, clients = Server(setup), {i: Client(setup, i) for i in range(n)}
    handed = server.hand_keys({i: c.advertise() for i, c in clients.items()})
    for i, incoming in server.route({i: clients[i].share(handed[i]) for i in handed}).items():
        clients[i].receive(incoming)
    values = {i: np.full(length, float(i)) for i in range(n)}
    uploads = {i: clients[i].upload(values[i]) for i in range(n - 1)}  # the last one drops
    survivors, dropped = server.collect(uploads)
    return server, clients, survivors, dropped, values


def test_an_altered_share_in_transit_is_refused():
    setup = setup_of(5, 3)
    server, clients = Server(setup), {i: Client(setup, i) for i in range(5)}
    handed = server.hand_keys({i: c.advertise() for i, c in clients.items()})
    routed = server.route({i: clients[i].share(handed[i]) for i in handed})
    ct = bytearray(routed[2][1])
    ct[20] ^= 1
    with pytest.raises(ValueError, match="failed authentication"):
        clients[2].receive({1: bytes(ct)})


@pytest.mark.parametrize("kind", ["b", "s"])
def test_an_altered_revealed_share_fails_the_sum_never_a_wrong_one(kind):
    server, clients, survivors, dropped, _ = run_to_reveals()
    reveals = {i: clients[i].unmask(survivors, dropped) for i in survivors}
    target = next(j for j, s in reveals[0].items() if s[:1] == kind.encode())
    share = bytearray(reveals[0][target])
    share[-1] ^= 1
    reveals[0][target] = bytes(share)
    with pytest.raises(SecAggError, match=r"altered|do not combine"):
        server.finish(reveals)


def test_the_unmasking_sum_is_the_survivors():
    server, clients, survivors, dropped, values = run_to_reveals()
    assert dropped == {6}
    total = server.finish({i: clients[i].unmask(survivors, dropped) for i in survivors})
    np.testing.assert_allclose(total, sum(values[i] for i in survivors), atol=1e-9)


def test_a_device_reveals_once_and_never_both_kinds():
    _, clients, survivors, dropped, _ = run_to_reveals()
    out = clients[0].unmask(survivors, dropped)
    assert {s[:1] for j, s in out.items() if j in dropped} <= {b"s"}
    assert {s[:1] for j, s in out.items() if j in survivors} <= {b"b"}
    with pytest.raises(SecAggError, match="already answered"):
        clients[0].unmask(survivors, dropped)
    with pytest.raises(SecAggError, match="both"):
        clients[1].unmask(survivors, survivors)


def test_the_degree_and_threshold_defaults():
    assert default_degree(10) == 9 and default_degree(30) == 29  # small rounds: every other device
    for n in (200, 1000, 10_000):
        k = default_degree(n)
        assert 2 * math.log2(n) <= k < n - 1 and k % 2 == 0
        assert (k + 1) / 3 < default_threshold(k) <= (k + 1) / 3 + 1
    with pytest.raises(SecAggError, match="at least 2"):
        Setup(b"x", (1,), 3, Ring.for_sum(1.0, 1), 0)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 10), st.data())
def test_shamir_any_threshold_shares_rebuild_and_fewer_do_not(threshold, data):
    secret = data.draw(st.binary(min_size=32, max_size=32))
    points = list(range(1, threshold + data.draw(st.integers(0, 5)) + 1))
    shares = shamir.split(secret, points, threshold)
    chosen = data.draw(st.permutations(points))[:threshold]
    assert shamir.combine({x: shares[x] for x in chosen}) == secret
    if threshold > 1:
        fewer = {x: shares[x] for x in chosen[: threshold - 1]}
        try:  # a random field element: below 2^256 with probability about 1/2, and then another secret
            rebuilt: bytes | None = shamir.combine(fewer)
        except ValueError:
            rebuilt = None
        assert rebuilt != secret


def test_shamir_shares_are_33_bytes_of_a_prime_field_above_every_secret():
    """The field is prime (else Lagrange interpolation has no inverses and shares rebuild nothing) and holds every
    256-bit secret, in the 33 bytes a share takes on the wire."""
    p = shamir.PRIME
    assert p > 2**256 and p.bit_length() <= 8 * shamir.SHARE_BYTES == 264
    d, s = p - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41):  # Miller-Rabin: a composite fails some base
        x = pow(a, d, p)
        assert x in (1, p - 1) or any(pow(x, 2**r, p) == p - 1 for r in range(1, s)), f"{p} is not prime"
    top = b"\xff" * shamir.SECRET_BYTES
    assert shamir.combine(dict(list(shamir.split(top, [1, 2, 3], 2).items())[:2])) == top


def test_fixed_point_sums_do_not_wrap_at_the_bound():
    n = 1000
    ring = Ring.for_sum(50.0, n)
    encoded = [ring.encode(np.array([50.0, -50.0, 1e9, -np.inf])) for _ in range(n)]
    total = encoded[0]
    for e in encoded[1:]:
        total = ring.add(total, e)
    np.testing.assert_array_equal(ring.decode(total), [50.0 * n, -50.0 * n, 50.0 * n, -50.0 * n])
    assert ring.unpack(ring.pack(total), 4).tolist() == total.tolist()
    with pytest.raises(ValueError, match="expected 4 ring elements"):
        ring.unpack(ring.pack(total)[:-1], 4)
    with pytest.raises(ValueError, match="fewer than 8 fractional bits"):
        Ring.for_sum(1e12, 10**6)


def test_rounding_is_to_the_nearest_grain_and_the_same_every_time():
    """Encoding rounds to the nearest multiple of 2^-frac (no generator): the same values always encode to the same
    ring elements, within half a grain."""
    ring = Ring(40, 4, 10.0)  # a coarse grid: 1/16
    x = np.random.default_rng(0).uniform(-10.0, 10.0, 10_000)
    decoded = ring.decode(ring.encode(x))
    assert np.abs(decoded - x).max() <= 1 / 32
    np.testing.assert_array_equal(ring.encode(x), ring.encode(x.copy()))
    assert ring.decode(ring.encode(np.array([0.01, 1 / 16, -0.04]))).tolist() == [0.0, 1 / 16, -1 / 16]


def test_the_cost_bench_measures_an_exact_sum(tmp_path):
    """`fedsentry bench secagg`'s measurement: the sum is exact, a third dropped, every upload within 2x a float32
    one at a gmm upload's size."""
    from fedsentry.bench.secagg import measure

    r = measure(12, 4000, 1 / 3)
    assert r["dropped_before_upload"] == 4 and r["max_abs_error"] <= 8 * 2.0 ** -(r["fraction_bits"] + 1)  # 8 rounded
    assert r["ratio"] < 2.0 and r["device_cpu_s_max"] < 1.0


def test_the_cost_bench_refuses_what_it_cannot_measure(capsys):
    from fedsentry.cli import main

    assert main(["bench", "secagg", "--devices", "1"]) == 2
    assert main(["bench", "secagg", "--values", "99999999"]) == 2
    err = capsys.readouterr().err
    assert "--devices: a secure sum needs at least 2 devices" in err and "--values: at most" in err

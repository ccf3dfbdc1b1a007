import contextlib
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.protocol import (
    Envelope,
    ProtocolError,
    agent_topic,
    decode,
    encode,
    expect_arrays,
    parse_agent_topic,
)


def sample(**arrays):
    return Envelope("upload", "job-1", 7, "dev-3", arrays or {"U": np.arange(6.0).reshape(3, 2)}, {"n": 5})


def test_round_trip_keeps_everything():
    env = sample(U=np.random.default_rng(0).standard_normal((34, 3)), c=np.array([3], dtype=np.int64))
    got = decode(encode(env))
    assert (got.kind, got.job, got.round, got.sender, got.meta) == ("upload", "job-1", 7, "dev-3", {"n": 5})
    assert np.array_equal(got.arrays["U"], env.arrays["U"]) and got.arrays["c"].dtype == np.int64


def test_big_endian_input_is_sent_little_endian():
    a = np.arange(4, dtype=">f8")
    assert np.array_equal(decode(encode(sample(U=a))).arrays["U"], np.arange(4.0))


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda p: p[:-1], "size"),
        (lambda p: p + b"x", "size"),
        (lambda p: b"XXXX" + p[4:], "malformed"),
        (lambda p: p[:4] + struct.pack("<H", 9) + p[6:], "version"),
        (lambda p: p[:6] + struct.pack("<I", 10**6) + p[10:], "malformed"),
        (lambda p: p[:3], "malformed"),
    ],
)
def test_corrupted_payloads_are_rejected_with_a_reason(mutate, reason):
    with pytest.raises(ProtocolError) as e:
        decode(mutate(encode(sample())))
    assert e.value.reason == reason


def test_nan_oversize_and_bad_dtype_are_rejected():
    with pytest.raises(ProtocolError, match="NaN") as e:
        decode(encode(sample(U=np.array([1.0, np.nan]))))
    assert e.value.reason == "non_finite"
    with pytest.raises(ProtocolError) as e:
        decode(encode(sample(U=np.zeros(1000))), max_size=100)
    assert e.value.reason == "oversized"
    with pytest.raises(ValueError, match="not allowed"):
        encode(sample(U=np.array(["a"])))


def test_expected_shapes_and_norms():
    env = decode(encode(sample(U=np.ones((4, 3)))))
    expect_arrays(env.arrays, {"U": (4, 3)}, max_norm=10)
    with pytest.raises(ProtocolError, match="shape"):
        expect_arrays(env.arrays, {"U": (3, 4)})
    with pytest.raises(ProtocolError, match="expected arrays"):
        expect_arrays(env.arrays, {"S": (4, 3)})
    with pytest.raises(ProtocolError) as e:
        expect_arrays(env.arrays, {"U": (4, 3)}, max_norm=1)
    assert e.value.reason == "norm"


def test_topics():
    assert parse_agent_topic(agent_topic("dev-1", "upload")) == ("dev-1", "upload")
    for bad in ("fedsentry/v1/agents/../upload", "other/v1/agents/a/upload", "fedsentry/v1/agents/a"):
        with pytest.raises(ProtocolError):
            parse_agent_topic(bad)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_crash_the_decoder(blob):
    with contextlib.suppress(ProtocolError):
        decode(blob)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 200), st.binary(min_size=1, max_size=8))
def test_spliced_valid_payloads_are_rejected_or_decoded_cleanly(pos, junk):
    p = encode(sample())
    mutated = p[:pos] + junk + p[pos + len(junk):]
    try:
        env = decode(mutated)
    except ProtocolError:
        return
    assert all(np.isfinite(a).all() for a in env.arrays.values() if a.dtype.kind == "f")

"""One secure sum as four network steps (models.private.relay): every message through a real envelope, the
coordinator's and the devices' sides saved and restored between steps as a restarted process would; the sum
survives devices dropping after their upload, too few uploads fail, and what the coordinator saves rebuilds no
device's secret."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from models.private import shamir
from models.private.messages import Advertised, Masked, Revealed, Routed, Shares
from models.private.relay import Announced, Member, Relay
from store.db import pack, unpack
from wire.messages import envelope, read
from wire.protocol import decode

pytest.importorskip("cryptography", reason="private mode needs the cryptography package (the dev extra has it)")

N = 7


def wire(msg, cls):
    """A message as the other side reads it: encoded, decoded, read as its class."""
    return read(cls, decode(envelope(msg, "job", 3, "dev").encode()))


def announced(n: int = N) -> Announced:
    return Announced("job/mean/1", tuple(f"dev-{i}" for i in range(n)), {"m": (2, 3), "w": ()},
                     {"m": 8.0, "w": 1.0}, 5.0, 48, 11)


def values(n: int = N) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"m": rng.normal(size=(2, 3)), "w": np.array(rng.uniform(0.5, 2.0))} for _ in range(n)]


def saved(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return unpack(pack(arrays))


def payload(msg) -> int:
    """The bytes of a message's arrays: what its envelope carries besides its header."""
    return sum(v.nbytes for f in dataclasses.fields(msg) if isinstance(v := getattr(msg, f.name), np.ndarray))


def run(a: Announced, vals, gone_after_upload=(), uploading=None, tamper=None, sent=None):
    """The four steps; both sides restored from their saved arrays before each step. Returns the decoded sum and
    the coordinator's saved state after each step (`sent`, if given, adds up the arrays each device's replies
    carried)."""
    states, kept = {}, []
    sent = {} if sent is None else sent

    def counted(i, msg):
        sent[i] = sent.get(i, 0) + payload(msg)
        return msg
    advertised = {}
    for i, name in enumerate(a.names):
        member, msg = Member.advertise(a, name, vals[i])
        states[i] = saved(member.state())
        advertised[i] = counted(i, wire(msg, Advertised))
    relay = Relay(a)
    keys = relay.advertised(advertised)
    kept.append(saved(relay.state()))
    shares = {}
    for i in states:
        member = Member.restore(a, states[i])
        shares[i] = counted(i, wire(member.share(keys["ids"], keys["keys"]), Shares))
        states[i] = saved(member.state())
    relay = Relay.restore(a, kept[-1])
    for i, m in shares.items():
        relay.check_shares(i, m)
    routed = relay.shared(shares)
    kept.append(saved(relay.state()))
    relay = Relay.restore(a, kept[-1])
    assert {i: (m.sender.tolist(), m.data.tobytes()) for i, m in relay.routed_messages().items()} == \
        {i: (m.sender.tolist(), m.data.tobytes()) for i, m in routed.items()}  # re-sent the same after a restart
    uploads = {}
    for i in states if uploading is None else uploading:
        member = Member.restore(a, states[i])
        uploads[i] = counted(i, wire(member.upload(wire(routed[i], Routed)), Masked))
        states[i] = saved(member.state())
    for m in uploads.values():
        relay.check_upload(m)
    who = relay.uploaded(uploads)
    kept.append(saved(relay.state()))
    relay = Relay.restore(a, kept[-1])
    reveals = {}
    for i in who["survivors"]:
        if int(i) in gone_after_upload:
            continue
        member = Member.restore(a, states[int(i)])
        reveals[int(i)] = counted(int(i), wire(member.unmask(who["survivors"], who["dropped"]), Revealed))
    if tamper is not None:
        tamper(reveals)
    return relay.finish(reveals), kept, states


def test_the_sum_over_the_wire_survives_a_third_dropping_after_upload_and_restarts():
    a, vals = announced(), values()
    total, _, _ = run(a, vals, gone_after_upload={1, 4})
    assert total["m"].shape == (1, 2, 3) and total["w"].shape == (1,)
    np.testing.assert_allclose(total["m"][0], sum(v["m"] for v in vals), atol=1e-6)
    np.testing.assert_allclose(total["w"][0], sum(float(v["w"]) for v in vals), atol=1e-6)


def test_the_simulators_byte_count_is_what_the_agents_replies_carry():
    """models.private.secagg.secure_sum (the simulator's secure sums) counts, per device, the arrays of the four
    replies a job's agent sends: keys, shares, masked upload, revealed shares (their envelopes' headers aside)."""
    from models.private.relay import flatten
    from models.private.secagg import secure_sum

    a, vals = announced(), values()
    sent: dict[int, int] = {}
    run(a, vals, gone_after_upload={1, 4}, sent=sent)
    flat = {i: flatten(v, a.scales) for i, v in enumerate(vals)}
    _, _, log = secure_sum(a.setup(), flat, gone_after_upload=frozenset({1, 4}))
    assert log.sent == sent and sum(log.steps.values()) == sum(sent.values())
    assert log.steps["masked"] == N * a.length * 6  # a 48-bit ring: 6 bytes a value


def test_the_agents_sum_is_the_simulators_bit_for_bit_in_a_coarse_ring():
    """A job's agents (Member, over the wire) and the simulator (models.private.transport.SecureTransport) encode
    the same values to the same ring elements: in a 16-bit ring (9 fractional bits, a grain of 2^-9 of each
    value's scale) the two decoded sums are equal, not merely close. Each side rounding on its own (stochastic
    rounding from its own generator) makes them differ by grains."""
    from models.private.transport import SecureTransport

    a = dataclasses.replace(announced(), bits=16)
    assert a.setup().ring.frac == 9
    vals = values()
    total, _, _ = run(a, vals, gone_after_upload={1, 4})
    sim = SecureTransport(a.scales, a.clip, dropout=2 / N, bits=16)(
        np.arange(N), {k: np.stack([v[k] for v in vals]) for k in a.shapes})
    for k in a.shapes:
        np.testing.assert_array_equal(total[k], sim[k])
    exact = sum(v["m"] for v in vals)  # the grain shows: equal sums are not a matter of course
    assert 1e-6 < np.abs(total["m"][0] - exact).max() <= N * a.scales["m"] * 2.0**-10


def test_devices_that_drop_before_upload_leave_the_others_sum():
    a, vals = announced(), values()
    total, _, _ = run(a, vals, uploading=[0, 1, 2, 3, 5])
    np.testing.assert_allclose(total["m"][0], sum(vals[i]["m"] for i in (0, 1, 2, 3, 5)), atol=1e-6)


def test_too_few_uploads_fail_the_sum_naming_why():
    from models.private.secagg import SecAggError

    with pytest.raises(SecAggError, match="devices uploaded; a secure sum needs at least"):
        run(announced(), values(), uploading=[0, 1])


def test_an_altered_revealed_share_fails_the_sum():
    from models.private.secagg import SecAggError

    def tamper(reveals):
        m = reveals[0]
        m.share[0, 5] ^= 1

    with pytest.raises(SecAggError, match="altered"):
        run(announced(), values(), tamper=tamper)


def test_revealed_shares_of_the_wrong_layout_are_refused_naming_it():
    from models.private.secagg import SecAggError

    relay = Relay(announced())
    bad = Revealed(of=np.array([1, 2]), what=np.array([0, 2], np.uint8),
                   share=np.zeros((2, shamir.SHARE_BYTES), np.uint8))
    with pytest.raises(SecAggError, match="what must be 0"):
        relay.check_reveal(bad)
    with pytest.raises(SecAggError, match=f"one row of {shamir.SHARE_BYTES} bytes"):
        relay.check_reveal(Revealed(of=np.array([1]), what=np.array([0], np.uint8), share=np.zeros((1, 5), np.uint8)))


def test_what_the_coordinator_saves_holds_no_device_secret():
    a, vals = announced(), values()
    _, kept, states = run(a, vals, gone_after_upload={2})
    coordinator = b"".join(np.ascontiguousarray(v).tobytes() for k in kept for v in k.values())
    for s in states.values():
        for secret in ("c_private", "s_private", "b"):
            assert bytes(s[secret]) not in coordinator
        for share in s["held.shares"]:  # the plaintext shares a device holds never reach the coordinator's store
            half = shamir.SHARE_BYTES
            assert bytes(share[:half]) not in coordinator and bytes(share[half:]) not in coordinator
    # of the uploads it keeps their masked sum only (one vector), which is not the sum of the devices' encodings
    assert kept[-1]["masked"].shape == (a.length,) and not [k for k in kept[-1] if k.startswith("uploads")]
    setup = Member.restore(a, states[0]).client.setup
    plain = np.zeros(a.length, np.uint64)
    for i in states:
        plain = setup.ring.add(plain, setup.ring.encode(Member.restore(a, states[i]).x))
    assert not np.array_equal(kept[-1]["masked"], plain)


def test_a_device_with_other_statistics_than_announced_is_refused_by_name():
    a = announced()
    with pytest.raises(ValueError, match="announces statistics"):
        Member.advertise(a, "dev-0", {"m": np.zeros((3, 2)), "w": np.array(1.0)})
    with pytest.raises(ValueError, match="not among the devices"):
        Member.advertise(a, "stranger", values()[0])


def test_an_announcement_missing_a_field_is_refused_by_name():
    meta = announced().to_meta()
    assert Announced.from_meta(meta) == announced()
    del meta["clip"]
    with pytest.raises(ValueError, match="clip"):
        Announced.from_meta(meta)

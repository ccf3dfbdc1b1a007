"""Typed, versioned messages (models.core.messages, wire.messages): what a phase sends is declared once and read
the same way on both sides; anything missing, surplus, of the wrong kind or of another version is refused with a
reason the coordinator counts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from models.core.messages import Decline, Upload
from models.detection.messages import Histogram
from models.mixture.messages import MixtureStatistics
from models.recsys.messages import Evaluation
from wire.messages import envelope, read
from wire.protocol import Envelope, ProtocolError, decode


def stats(**over):
    values = dict(count=np.array([3]), total=np.ones(2), sumsq=np.ones(2), present=np.array([3, 3]),
                  counts={"n": 3}, held=np.array([1]))
    return MixtureStatistics(**{**values, **over})


def test_a_message_survives_the_wire_field_by_field():
    sent = stats()
    env = decode(envelope(sent, "job-1", 0, "dev-1").encode())
    assert env.kind == "stats" and env.meta["v"] == 1
    got = read(MixtureStatistics, env)
    for f in dataclasses.fields(sent):
        assert np.array_equal(getattr(got, f.name), getattr(sent, f.name)), f.name
    up = read(Upload, decode(envelope(Upload(arrays={"R": np.ones(4), "S1": np.ones((4, 2))}), "j", 2, "d").encode()))
    assert set(up.arrays) == {"R", "S1"}
    assert read(Decline, envelope(Decline(reason="no such feature"), "j", 1, "d")).reason == "no such feature"


def refusal(cls, env: Envelope) -> tuple[str, str]:
    with pytest.raises(ProtocolError) as e:
        read(cls, env)
    return e.value.reason, e.value.detail


def test_what_a_message_lacks_or_does_not_declare_is_refused_naming_it():
    arrays, meta = stats().parts()
    without = {k: v for k, v in arrays.items() if k != "held"}
    assert refusal(MixtureStatistics, Envelope("stats", "j", 0, "d", without, meta)) == (
        "shape", "a stats message needs the array 'held'")
    def stats_with(**changed):
        return Envelope("stats", "j", 0, "d", {**arrays, **changed}, meta)

    assert refusal(MixtureStatistics, stats_with(extra=np.ones(1)))[0] == "shape"
    assert refusal(MixtureStatistics, stats_with(total=np.ones((2, 2))))[0] == "shape"
    floats = Envelope("histogram", "j", 0, "d", {"bins": np.ones(2), "counts": np.ones(2)}, {})
    assert refusal(Histogram, floats)[0] == "dtype"  # bin indices are integers
    assert refusal(Evaluation, Envelope("upload", "j", 0, "d", {}, {}))[0] == "kind"
    assert refusal(Decline, Envelope("decline", "j", 0, "d", {}, {"reason": 5})) == (
        "malformed", "'reason' of a decline message must be a str, got 5")


def test_a_message_of_another_version_is_refused_and_one_without_is_version_one():
    arrays, meta = stats().parts()
    assert refusal(MixtureStatistics, Envelope("stats", "j", 0, "d", arrays, {**meta, "v": 2}))[0] == "version"
    del meta["v"]
    assert read(MixtureStatistics, Envelope("stats", "j", 0, "d", arrays, meta)).held[0] == 1

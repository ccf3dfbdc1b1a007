"""Who a round asks (models.core.sampling): listed and drawn as before up to the switch, by salted hash above it."""

from __future__ import annotations

import numpy as np
import pytest

from models.core import sampling
from models.core.messages import MessageError, RoundMessage
from models.core.rounds import Rounds
from models.core.sampling import ALL, Draw, fleet_names, sample


def test_up_to_the_switch_a_round_is_drawn_exactly_as_before():
    """The README's figures were measured with this draw: the same indices, and the generator left in the same
    state (the rounds after draw the same too)."""
    for n, fraction in ((4, 0.5), (12, 0.3), (1000, 0.1)):
        a, b = np.random.default_rng(3), np.random.default_rng(3)
        idx, draw = sample(a, fleet_names(n), fraction)
        assert draw is None
        np.testing.assert_array_equal(idx, np.sort(b.choice(n, max(1, int(round(fraction * n))), replace=False)))
        assert a.bit_generator.state == b.bit_generator.state


@pytest.mark.parametrize(("n", "fraction"), [(1001, 0.1), (5000, 0.01), (3000, 0.5), (2000, 0.0001)])
def test_above_the_switch_exactly_m_are_drawn_and_each_device_decides_the_same(n, fraction):
    names = fleet_names(n)
    idx, draw = sample(np.random.default_rng(1), names, fraction)
    assert draw is not None and len(idx) == max(1, int(round(fraction * n)))
    msg = RoundMessage(phase="train", salt=draw.salt, bound=draw.bound)
    assert [i for i, name in enumerate(names) if msg.asks(name)] == idx.tolist()
    # another salt, another share of the fleet
    again, other = sample(np.random.default_rng(2), names, fraction)
    assert other is not None and other.salt != draw.salt and (len(idx) == 1 or set(again) != set(idx))


def test_the_simulator_draws_what_the_coordinator_draws_for_the_same_fleet():
    n, fraction = 1500, 0.2
    loop = Rounds(None, {}, {}, np.random.default_rng(9), n, fraction)  # type: ignore[arg-type]
    coordinator = np.random.default_rng(9)
    for _ in range(3):
        np.testing.assert_array_equal(loop.sample(), sample(coordinator, fleet_names(n), fraction)[0])


def test_the_switch_is_the_constant_every_side_reads(monkeypatch):
    monkeypatch.setattr(sampling, "LIST_MAX", 3)
    assert sample(np.random.default_rng(0), ["a", "b", "c", "d"], 0.5)[1] is not None
    assert sample(np.random.default_rng(0), ["a", "b", "c"], 0.5)[1] is None


def test_a_draw_that_asks_everyone_and_one_that_is_malformed():
    assert sampling.EVERYONE.asks("any-device") and sampling.EVERYONE.asked(["x", "y"]).tolist() == [0, 1]
    with pytest.raises(ValueError, match="salt must be an integer between 0 and 2\\*\\*64 - 1, got -1"):
        Draw(-1, 5)
    with pytest.raises(ValueError, match="bound must be an integer"):
        Draw(1, ALL + 1)
    with pytest.raises(MessageError, match="malformed: a round message's draw: a round's bound must be an integer"):
        RoundMessage.from_parts({}, {"phase": "train", "salt": 7})  # as an agent reads it: refused, saying why
    arrays, meta = RoundMessage(phase="train", salt=7, bound=ALL).parts()
    assert RoundMessage.from_parts(arrays, meta).asks("dev-1")
    # a listed round is read as before (and its message carries no salt)
    listed = RoundMessage(phase="train", sampled=["dev-1"])
    assert "salt" not in listed.parts()[1] and listed.asks("dev-1") and not listed.asks("dev-2")

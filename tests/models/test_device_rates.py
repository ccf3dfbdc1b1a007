"""Per-device false-positive rates (issue 21, point 5): with a few dozen normal test records per device, a device
is seen above 3 % after two false positives, whatever its true rate. The simulation output says how many devices
would be seen above 3 % by chance at the fleet's own rate, and how many a binomial test shows above 3 %."""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

from models.mixture.simulator import device_rates


def fleet(rates: list[float], records: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normal test records of len(rates) devices, `records` each, flagged at each device's true rate."""
    rng = np.random.default_rng(seed)
    where = np.repeat(np.arange(len(rates)), records)
    flagged = rng.random(len(where)) < np.repeat(rates, records)
    return flagged, where, np.zeros(len(where), dtype=int)


def test_devices_seen_above_3_percent_at_a_true_1_percent_are_chance_and_none_is_shown_above():
    flagged, where, y = fleet([0.01] * 200, 30)
    out = device_rates(flagged, where, y, 200)
    assert out["above_3_percent"] > 0  # some devices are seen above 3 %, though none is
    expected = 200 * binom.sf(0, 30, flagged.mean())  # one false positive of 30 is already 3.3 %
    assert abs(out["above_3_percent_by_chance"] - expected) < 1e-9
    assert abs(out["above_3_percent"] - out["above_3_percent_by_chance"]) < 4 * np.sqrt(expected)
    assert out["significantly_above_3_percent"] == 0


def test_a_device_truly_far_above_3_percent_is_shown_above():
    flagged, where, y = fleet([0.01] * 99 + [0.25], 60)
    out = device_rates(flagged, where, y, 100)
    assert out["significantly_above_3_percent"] == 1
    # attacks and records no device sees do not count
    y2 = y.copy()
    y2[where == 99] = 1
    assert device_rates(flagged, where, y2, 100)["significantly_above_3_percent"] == 0

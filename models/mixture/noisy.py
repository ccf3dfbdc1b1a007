"""Differential privacy of a mixture job (issue 23, point 4): what its noisy sums are, for the simulator
(models.mixture.simulator) and the coordinator (coordinator.mixture_job) alike.

The summed FedEM (models.mixture.summed) with noisy sums makes no swaps (their decisions on noisy sums are not
measured) and seeds in fewer rounds (each costs budget). The budget is calibrated for the statistics phase's 2 sums,
the seeding's most rounds, the threshold's 2 (every device) and the job's sampled rounds (`plan`). Each round's
upload is clipped per name (`models.mixture.summed.dp_clips`), and a component or seeding centre needs a summed
weight of 3 noise standard deviations of a round's shares (`noisy_rounds`: the mass floor).
"""

from __future__ import annotations

import numpy as np

from models.core.sampling import per_round
from models.mixture.growing import REFINE
from models.mixture.summed import SummedFedEM, dp_clips, summed_scales
from models.private.dp import Ledger, Noise


def plan(alg: SummedFedEM, fleet: int, fraction: float, rounds: int) -> tuple[dict[float, int], float]:
    """The noisy sums of a mixture job of `fleet` devices (how many at each sampling rate) and its rounds' sampling
    rate; `alg` set to make no swaps and at most the seeding rounds planned."""
    q = per_round(fleet, fraction) / fleet
    alg.splits = 0
    alg.max_splits = int(np.ceil(np.log2(alg.components * alg.split_factor))) + 2  # the doublings, and 2 to spare
    seeding = alg.max_splits + REFINE + 1
    return ({1.0: 2 + seeding + 2, q: rounds} if q < 1 else {1.0: 2 + seeding + 2 + rounds}), q


def noisy_rounds(alg: SummedFedEM, ledger: Ledger) -> Noise:
    """The Gaussian mechanism of the job's seeding and EM rounds; `alg` set to announce its clips (the broadcast's
    `dp.clip`) and to keep the mass floor."""
    noise = ledger.noise(dp_clips(alg.n_features, alg.least_records))
    alg.dp_clips = dict(noise.clips)
    alg.mass_floor = 3.0 * noise.std("dR", len(noise.clips) - 1)
    return noise


def noisy_scales(alg: SummedFedEM) -> dict[str, float]:
    """What a noisy round's secure sum divides each upload name by: `summed_scales` with a seeding round's records
    per centre over their clip (the devices' record counts are not released, so their largest is not known)."""
    return summed_scales(float(alg.least_records))

"""The privacy budget of a job's noisy sums, accounted by `dp-accounting` (Google's library; its RDP accountant):
each sum is a Gaussian mechanism of noise multiplier sigma (models.private.dp), a round's over a sampled share of
the fleet a Poisson-sampled one at that rate, the phases with every device (statistics, seeding, threshold)
unsampled; all composed over the job.

`calibrate` finds the smallest sigma at which a job's planned sums spend at most the target epsilon (binary search
on the accountant's answer); `spent` is what the sums actually released cost. The accountant runs on the server
side only (the coordinator or the simulator): the package is imported here, when asked (the `private` extra).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from models.private.dp import Ledger

#: the Renyi orders the accountant evaluates (dp-accounting's defaults, extended for small noise)
ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024])
#: the widest noise multiplier the search tries (a budget that needs more is refused)
MOST = 1e4


def _accountant(multiplier: float, releases: Iterable[float]) -> Any:
    try:
        import dp_accounting
        from dp_accounting import rdp
        logging.getLogger("absl").setLevel(logging.ERROR)  # orders it cannot evaluate are left out, said each time
    except ImportError:
        raise ValueError("differential privacy needs dp-accounting: pip install 'fedsentry[private]'") from None
    acc = rdp.RdpAccountant(list(ORDERS))
    gauss = dp_accounting.GaussianDpEvent(multiplier)
    for q, count in sorted(Counter(releases).items()):
        event = gauss if q >= 1 else dp_accounting.PoissonSampledDpEvent(q, gauss)
        acc.compose(event, count)
    return acc


def spent(multiplier: float, releases: Iterable[float], delta: float) -> float:
    """The epsilon at `delta` of these sums (each its sampling rate) at noise multiplier `multiplier`."""
    releases = list(releases)
    if not releases:
        return 0.0
    if multiplier <= 0:
        return float("inf")
    return float(_accountant(multiplier, releases).get_epsilon(delta))


def calibrate(epsilon: float, delta: float, releases: Iterable[float], tolerance: float = 1e-3) -> float:
    """The smallest noise multiplier (to `tolerance`, relative) at which the planned sums spend at most `epsilon`
    at `delta`. ValueError when even MOST does not."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"a privacy budget needs epsilon > 0 and delta in (0, 1), got {epsilon:g} and {delta:g}")
    plan = list(releases)
    if spent(MOST, plan, delta) > epsilon:
        raise ValueError(f"epsilon {epsilon:g} at delta {delta:g} is out of reach for {len(plan)} sums")
    lo, hi = 0.0, 1.0
    while spent(hi, plan, delta) > epsilon:
        lo, hi = hi, hi * 2
    while hi - lo > tolerance * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if spent(mid, plan, delta) > epsilon else (lo, mid)
    return hi


@dataclass(frozen=True)
class Budget:
    """A job's privacy budget: (epsilon, delta)-differential privacy for each device's whole contribution."""

    epsilon: float
    delta: float = 1e-5

    def __post_init__(self) -> None:
        if not (isinstance(self.epsilon, (int, float)) and 0 < self.epsilon <= 100):
            raise ValueError(f"dp_epsilon must be a number in (0, 100], got {self.epsilon!r}")
        if not (isinstance(self.delta, (int, float)) and 0 < self.delta < 1e-2):
            raise ValueError(f"dp_delta must be a number in (0, 0.01), got {self.delta!r} (below 1 / the records "
                             "of a fleet, as 1e-5)")


def planned(plan: Mapping[float, int]) -> list[float]:
    """A plan (how many sums at each sampling rate) as the accountant's list of rates."""
    return [q for q, count in sorted(plan.items()) for _ in range(int(count))]


def ledger_for(budget: Budget, plan: Mapping[float, int], fleet: int, fraction: float, distributed: bool,
               seed: int = 0) -> Ledger:
    """The noise of a job that releases the sums of `plan` (count per sampling rate), calibrated to the budget."""
    return Ledger(calibrate(budget.epsilon, budget.delta, planned(plan)), distributed, fleet, fraction, dict(plan),
                  seed)


def report(ledger: Ledger, budget: Budget) -> dict[str, Any]:
    """What a job's differential privacy spent and how: for the JSON result. `epsilon_spent` is the released
    model's (sampled rounds amplified); `epsilon_device_worst_unsampled` the device that answered most rounds',
    against whoever knows which rounds it answered (the coordinator), without the amplification."""
    full = ledger.released.count(1.0)
    most = max(ledger.taken.values(), default=0)
    return {"epsilon": budget.epsilon, "delta": budget.delta, "noise_multiplier": ledger.multiplier,
            "epsilon_spent": spent(ledger.multiplier, ledger.released, budget.delta),
            "epsilon_device_worst_unsampled": spent(ledger.multiplier, [1.0] * (full + most), budget.delta),
            "sums": {"all_devices": full, "sampled": len(ledger.released) - full},
            "noise": "distributed" if ledger.distributed else "central", "clip_norms": dict(ledger.clips),
            "clipped_uploads": ledger.clipped}

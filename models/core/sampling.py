"""Who a round asks, decided the same way by the coordinator, each device and the simulator.

Up to LIST_MAX participants a sampled round draws `max(1, round(fraction * N))` of them with the job's generator
(`sample_clients`) and the round message lists them by id: the way every figure in the README was measured.
Above it a list would grow with the fleet (about 1.5 MB at 10^6 participants and 10 % sampled), so the round
draws a 64-bit salt from the same generator instead, and its bound: the m-th smallest of `draw_hash(salt, id)`
over the participants. A device is asked iff its hash is at most the bound (`Draw.asks`): exactly m participants
(barring a 64-bit collision at the bound), each deciding for itself from two numbers. A device that is not a
participant may find its hash under the bound too; the coordinator refuses its answer (`not_sampled`).

The switch is on the fleet, not on the round: the selection, not only the message, changes above it (the
simulator draws the same way for a fleet of that size, so `simulate` and a real job still agree).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

try:  # hashlib's own BLAKE2b, without the OpenSSL library `import hashlib` loads (3.4 MiB of an agent's memory)
    from _blake2 import blake2b
except ImportError:  # an interpreter built without it
    from hashlib import blake2b

#: participants above which a round is drawn by salted hash instead of listed. 1,000 is the largest fleet any
#: README figure was measured on (those stay exactly reproducible), and where a list of typical ids (10-20
#: characters) in a phase that asks everyone passes 15-25 KB of the round message's JSON header (64 KB at most,
#: wire.protocol.MAX_HEADER; 64-character ids would fill it at about 980). Read at each call: a test may lower it.
LIST_MAX = 1000
#: the largest hash: a bound that asks every device (a phase that asks all participants, above the switch)
ALL = 2**64 - 1


def per_round(n_clients: int, fraction: float) -> int:
    """How many clients a sampled round asks: max(1, round(fraction * N))."""
    return max(1, int(round(fraction * n_clients)))


def sample_clients(rng: np.random.Generator, n_clients: int, fraction: float) -> np.ndarray:
    """The sorted indices of the clients sampled for one round, drawn from the job's generator (list mode)."""
    return np.sort(rng.choice(n_clients, per_round(n_clients, fraction), replace=False))


def draw_hash(salt: int, device: str) -> int:
    """A device's 64-bit hash under a round's salt (BLAKE2b keyed by the salt): what it is sampled by."""
    digest = blake2b(device.encode(), digest_size=8, key=int(salt).to_bytes(8, "little")).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class Draw:
    """A round's salt and bound: the devices it asks are those whose hash is at most the bound."""

    salt: int
    bound: int

    def __post_init__(self) -> None:
        for name in ("salt", "bound"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= ALL:
                raise ValueError(f"a round's {name} must be an integer between 0 and 2**64 - 1, got {value!r}")

    def asks(self, device: str) -> bool:
        """Whether this round asks the device (the one test of membership, on both sides)."""
        return self.bound == ALL or draw_hash(self.salt, device) <= self.bound

    def asked(self, devices: Sequence[str]) -> np.ndarray:
        """The indices of the devices this round asks, in their order."""
        if self.bound == ALL:
            return np.arange(len(devices))
        return np.flatnonzero(hashes(self.salt, devices) <= np.uint64(self.bound))


#: the draw of a phase that asks every participant
EVERYONE = Draw(0, ALL)


def hashes(salt: int, devices: Sequence[str]) -> np.ndarray:
    """Every device's hash under the salt, as uint64."""
    return np.fromiter((draw_hash(salt, d) for d in devices), dtype=np.uint64, count=len(devices))


def listed(n_participants: int) -> bool:
    """Whether rounds of a fleet this size list the devices they ask (at most LIST_MAX participants)."""
    return n_participants <= LIST_MAX


def sample(rng: np.random.Generator, names: Sequence[str], fraction: float) -> tuple[np.ndarray, Draw | None]:
    """The sorted indices of the participants (`names`, in the coordinator's order) one sampled round asks, and its
    draw above the switch (None: listed, drawn by `sample_clients` as always)."""
    n = len(names)
    if listed(n):
        return sample_clients(rng, n, fraction), None
    salt = int(rng.integers(0, ALL, dtype=np.uint64, endpoint=True))
    h = hashes(salt, names)
    m = per_round(n, fraction)
    draw = Draw(salt, int(np.partition(h, m - 1)[m - 1]))
    return np.flatnonzero(h <= np.uint64(draw.bound)), draw


def fleet_name(i: int, n: int) -> str:
    """The id of the i-th of n simulated clients (a salted hash needs names): the demo's i-th agent's, zero-padded
    so that the sorted ids are in the clients' order, as the coordinator sorts its participants."""
    return f"demo-agent-{i:0{max(3, len(str(n - 1)))}d}"


def fleet_names(n: int) -> list[str]:
    """Every simulated client's id (`fleet_name`)."""
    return [fleet_name(i, n) for i in range(n)]

"""Seeding a mixture by growing it from the fleet's summed statistics (LBG, Linde, Buzo and Gray 1980): private
mode's seeding (models.mixture.summed), and plaintext FedEM's with ``seeding="grow"`` (models.mixture.fedem), by
the same step, so that the two modes start from the same mixture (issue 23 point 5: the same model as plaintext).

Every device answers each seeding round with the statistics of its records' nearest broadcast centre (a hard
assignment) and its records per centre; the server, from the sums alone (`step`), moves each centre to its records'
mean, drops centres fewer than `least` of the fleet's records chose, and splits the most spread of those whose halves
can keep that many, until it has `slots` of them (more than K: merged into K by weighted k-means on their sums),
then refines once. The last round's sums, under the refined centres, are the first mixture's statistics.
"""

from __future__ import annotations

import numpy as np

from models.core.federated import State
from models.mixture.gmm import kmeans
from models.mixture.splitting import split_centres, splittable

#: the broadcast stage of a seeding round (FedEM's own: 0 seeding, 1 EM, 2 k-means)
GROW = 3
#: refinement rounds after the seeding's growth (the last one's centres are the first mixture's; the k-means rounds
#: that follow refine further)
REFINE = 1


def grow_broadcast(slots: int, centres: np.ndarray, before: int = 1) -> State:
    """A seeding round's broadcast: the centres in the first of `slots`, `live` marking them, and the slots the
    uploads cover (`span`: these and the `before` of the last seeding round, where a private device's contribution
    sits)."""
    d = centres.shape[1]
    means, live = np.zeros((slots, d)), np.zeros(slots)
    means[: len(centres)], live[: len(centres)] = centres, 1.0
    return {"stage": np.array(GROW), "centres": means, "live": live, "span": np.array(max(len(centres), before))}


def step(server: State, components: int, slots: int, least: int, max_splits: int,
         mass_floor: float = 0.0) -> tuple[str, np.ndarray | None]:
    """One seeding step on the sums of the broadcast centres' statistics (`grow.R`, `grow.S1`, `grow.S2`, weighted)
    and their records (`grow.C`) in the server state: ("again", None) when no device had records, ("next", centres)
    for the next seeding round (split while fewer than `slots` centres live, at most `max_splits` rounds; then merged
    into `components`, refined), ("seeded", None) when these sums, in the first `components` slots, are the first
    mixture's statistics. A centre lives on if `least` records chose it (fewer: its records go to others next
    round): no component of a handful of records; with differential privacy, if its noisy mass is above
    `mass_floor`."""
    R, S1, S2 = server["grow.R"], server["grow.S1"], server["grow.S2"]
    counts = server["grow.C"]
    live = (mass_floor < R) & (counts >= least - 0.5)
    if not live.any():
        live = mass_floor < R
    if not live.any() and mass_floor > 0:  # noisy sums: the heaviest broadcast centre lives (no budget to ask
        # again; a slot no centre was broadcast in holds no records, its sums are 0 and no centre)
        shown = np.asarray(server.get("last.live", np.arange(len(R)) == 0), dtype=float)[: len(R)] > 0
        live = np.arange(len(R)) == int(np.argmax(np.where(shown, R, -np.inf)))
    if not live.any():  # no device had records: ask again
        return "again", None
    centres = S1[live] / R[live, None]
    server["grow.rounds"] = server.get("grow.rounds", np.zeros(())) + 1
    refined = int(server["refined"])
    growing = len(centres) > int(server.get("grow.live", 0))  # splits that left too few records die: no churn
    server["grow.live"] = np.array(len(centres))
    if refined == 0 and len(centres) < slots and int(server["grow.rounds"]) <= max_splits \
            and splittable(counts[live], least) and growing:
        return "next", split_centres(R[live], S1[live], S2[live], counts[live], least, slots - len(centres))
    if refined == 0 and len(centres) > components:  # merge into K: weighted k-means on the centres, groups' sums
        labels = kmeans(centres, components, np.random.default_rng(int(server["seed"])), weights=R[live])[1]
        centres = np.stack([S1[live][labels == j].sum(axis=0) / R[live][labels == j].sum()
                            for j in range(components) if (labels == j).any()])
    if refined < REFINE:
        server["refined"] = np.array(refined + 1)
        return "next", centres
    for key in ("grow.C", "grow.live", "last.centres", "last.live", "last.span"):
        server.pop(key, None)
    return "seeded", None

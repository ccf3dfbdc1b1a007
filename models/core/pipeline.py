"""The aggregation pipeline: what every family's uploads pass through between a round and its server step, in
one order, each stage a small function (the simulators and the coordinator close
every round with `close_round`, so a refusal or a cap is the same in both):

    validate   the algorithm's `screen`: refuse what no honest client could send (factor 0) and shrink what is
               larger than its own claims allow (a factor in (0, 1)); counted on the server state per round
               ("rejected", "shrunk", and this round's "rejected_ids", "shrunk_ids": the operator's influence view)
    cap        answers arrive weighted by the records their devices claimed; each counts for at most the job's
               level, over the federation's mean (the weight caps the statistics phase fixed in the server state,
               models.detection.screening.weight_caps). A job without caps (recommendation weighs rating counts
               as they are) skips the stage
    server     the family's server step on what passed (its own robust aggregators: trimmed means)
    support    after the step, the support rule on the model it made: a unit of the model (a mixture's
               component) is normal for the fleet only if at least `min_support` devices support it and the
               devices that may act together do not hold most of its mass (`support_mask`); what fails stays
               out of the shared model (a device keeps it as its own). An algorithm takes part through
               `support_view` and `restrict` (FederatedAlgorithm); the others pass unchanged

Each stage is switched by the job's own settings, not by a list of its own: validation is always on (an upload
no honest device could send is never aggregated); the caps by `count_cap` and `max_share` (a job without them,
as recommendation, fixes none); the support rule by `min_support` (0: every unit shared) and `mass_cap` (1: no
mass share). Private mode's stages (secure sum, calibrated noise) come after the caps (issue 23).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from models.core.federated import FederatedAlgorithm, State, SupportView


@dataclass
class Answers:
    """A round's answers: the clients (positions in the federation), their uploads and their weights, aligned."""

    ids: np.ndarray
    uploads: State
    weight: np.ndarray


Stage = Callable[[FederatedAlgorithm, State, Answers], Answers]


def validate(algorithm: FederatedAlgorithm, server: State, answers: Answers) -> Answers:
    """Keep what the algorithm's `screen` admits, scaled by its factor; count and name what it refused or shrank."""
    factor = algorithm.screen(server, answers.ids, answers.uploads)
    if factor is None:  # nothing to check against (yet): every answer passes
        return answers
    keep = factor > 0
    shrunk = keep & (factor < 1)
    server["rejected"] = server.get("rejected", np.zeros(())) + np.count_nonzero(~keep)
    server["shrunk"] = server.get("shrunk", np.zeros(())) + np.count_nonzero(shrunk)
    server["rejected_ids"], server["shrunk_ids"] = answers.ids[~keep], answers.ids[shrunk]  # this round's
    f = factor[keep]
    uploads = {k: v[keep] * f.reshape(-1, *([1] * (v.ndim - 1))) if shrunk.any() and v.dtype.kind == "f" else v[keep]
               for k, v in answers.uploads.items()}
    return Answers(answers.ids[keep], uploads, answers.weight[keep])


#: the server-state keys of the weight caps a job's statistics phase fixes
CAP_LEVEL, CAP_SCALE = "cap.level", "cap.scale"


def cap_weights(claimed: np.ndarray, level: float, scale: float) -> np.ndarray:
    """Claimed records, each counted for at most `level`, over `scale`."""
    return np.minimum(claimed, level) / scale


def cap(algorithm: FederatedAlgorithm, server: State, answers: Answers) -> Answers:
    """The answers' claimed records as capped weights (the caps in the server state); unchanged without caps."""
    if CAP_LEVEL not in server:
        return answers
    weight = cap_weights(answers.weight, float(server[CAP_LEVEL]), float(server[CAP_SCALE]))
    return Answers(answers.ids, answers.uploads, weight)


#: every stage before the server step, in the pipeline's order
STAGES: tuple[Stage, ...] = (validate, cap)

Rule = Callable[[FederatedAlgorithm, State, State], State]


def support_mask(view: SupportView) -> np.ndarray:
    """Which units become normal for the fleet: those at least `min_support` devices support (fewer in a fleet too
    small to have that many: at most half of its devices; 0 shares every unit), and whose mass the devices that
    may act together (one fewer than the count asks for) do not hold more than `mass_cap` of, unless that would
    leave no unit shared (a fleet too small for the rule keeps its count-only model)."""
    if view.min_support <= 0:
        return np.ones(len(view.support), bool)
    needed = min(view.min_support, max(1, view.devices // 2))
    shared = np.asarray(view.support) >= needed
    if needed - 1 >= 1 and view.mass_cap < 1 and view.heaviest is not None:
        owned = view.heaviest(needed - 1) > view.mass_cap
        if (shared & ~owned).any():
            shared &= ~owned
    return shared


def support(algorithm: FederatedAlgorithm, server: State, broadcast: State) -> State:
    """The support rule on the broadcast the server step made (`support_mask`)."""
    view = algorithm.support_view(server)
    if view is None:
        return broadcast
    return algorithm.restrict(server, broadcast, support_mask(view))


#: every rule after the server step
RULES: tuple[Rule, ...] = (support,)


def close_round(algorithm: FederatedAlgorithm, server: State, client_ids: np.ndarray, uploads: State,
                weight: np.ndarray, stages: Sequence[Stage] = STAGES,
                rules: Sequence[Rule] = RULES) -> tuple[State, State]:
    """The answers (weighted by their claimed records, or by weights where the job fixed no caps) through the
    pipeline's stages, the algorithm's server step, then the rules on its broadcast: (server state, broadcast)."""
    answers = Answers(np.asarray(client_ids, dtype=np.int64), uploads, np.asarray(weight, dtype=float))
    for stage in stages:
        answers = stage(algorithm, server, answers)
    server, broadcast = algorithm.server_update(server, answers.ids, answers.uploads, answers.weight)
    for rule in rules:
        broadcast = rule(algorithm, server, broadcast)
    return server, broadcast

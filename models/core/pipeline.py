"""The aggregation pipeline: what every family's uploads pass through between a round and its server step, in
one order, each stage a small function (switched per job by the stages given to `close_round`):

    validate   the algorithm's `screen`: refuse what no honest client could send (factor 0) and shrink what is
               larger than its own claims allow (a factor in (0, 1)); counted on the server state per round
               ("rejected", "shrunk", and this round's "rejected_ids", "shrunk_ids": the operator's influence view)
    caps       the weights the answers arrive with are the devices' capped shares of the records
               (models.detection.screening.capped_weights, fixed by the statistics phase)
    then the family's server step, whose robust rules (FedEM's support rule, trimmed aggregators) act on what
    passed. The stages of private mode (secure sum, calibrated noise) come after validation, in that order.

The simulators (models.core.rounds.run_round) and the coordinator (its job runners) close rounds through
`close_round`, so a refusal is the same refusal in both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from models.core.federated import FederatedAlgorithm, State


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


STAGES: tuple[Stage, ...] = (validate,)


def close_round(algorithm: FederatedAlgorithm, server: State, client_ids: np.ndarray, uploads: State,
                weight: np.ndarray, stages: Sequence[Stage] = STAGES) -> tuple[State, State]:
    """The answers through the pipeline's stages, then the algorithm's server step: (server state, broadcast)."""
    answers = Answers(np.asarray(client_ids, dtype=np.int64), uploads, np.asarray(weight, dtype=float))
    for stage in stages:
        answers = stage(algorithm, server, answers)
    return algorithm.server_update(server, answers.ids, answers.uploads, answers.weight)

"""An agent's part in a federated Gaussian-mixture job (FedEM, `models.mixture.fedem`).

The device holds out a share of its training records (`models.detection.threshold.holdout_mask`, the job's
``holdout``): the mixture is fitted on the rest, the threshold histogram is of the held-out records' scores.
``seed`` (every participant, once): the statistics of its own clusters; ``train``: E-step statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edge_agent.detector_participant import DetectorParticipant
from edge_agent.sources import take_rows
from models.core.messages import Upload
from models.detection.preprocessing import Preprocessor
from models.detection.threshold import holdout_mask
from models.mixture.detector import MixtureDetector
from models.mixture.fedem import FedEM, device_seed, shared_of
from models.mixture.messages import MixtureHistogram, MixtureStatistics
from wire.messages import envelope
from wire.protocol import Envelope


class MixtureParticipant(DetectorParticipant):
    family = "gmm"
    statistics = MixtureStatistics
    histogram = MixtureHistogram

    def problem(self, meta: dict[str, Any]) -> dict[str, int]:
        return {"n_features": len(meta["features"])}

    def algorithm(self, meta: dict[str, Any]) -> FedEM:
        alg = super().algorithm(meta)
        if not isinstance(alg, FedEM):
            raise TypeError(f"{type(alg).__name__} is not FedEM")
        return alg

    def phases(self) -> dict[str, Callable[[Envelope], Envelope | None]]:
        return {**super().phases(), "seed": self._seed}

    def _held(self, meta: dict[str, Any]) -> np.ndarray:
        return holdout_mask(len(self.buffer.X), float(meta["holdout"]))

    def training_rows(self, meta: dict[str, Any]) -> np.ndarray:
        return ~self._held(meta)

    def stats_extra(self, meta: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"held": np.array([int(self._held(meta).sum())], dtype=np.int64)}

    def client_data(self, env: Envelope) -> dict[str, np.ndarray]:
        X = np.empty(1, dtype=object)
        X[0] = self.standardised(env)
        # this device's position among the participants (the seeding round samples all of them, in order)
        return {"X": X, "seed": np.array([device_seed(int(env.meta["seed"]), env.meta["sampled"].index(self.id))])}

    def _seed(self, env: Envelope) -> Envelope:
        """The statistics of this device's own clusters (the algorithm's client step on the seeding broadcast)."""
        alg = self.algorithm(env.meta)
        data = self.client_data(env)
        _, upload = alg.client_update(alg.init_clients(data, self.broadcast(env)), data, self.broadcast(env))
        return envelope(Upload(arrays={k: v[0] for k, v in upload.items()}), env.job, env.round, self.id)

    def threshold_extras(self, env: Envelope, errors: np.ndarray) -> dict[str, np.ndarray]:
        """The held-out records' mean negative log-likelihood (scores are NLL minus the mixture's floor)."""
        floor = self.algorithm(env.meta).consensus(self.broadcast(env)).floor()
        return {"nll": np.array([float(np.mean(errors)) + floor if len(errors) else 0.0])}

    def threshold_errors(self, env: Envelope, pre: Preprocessor) -> np.ndarray:
        """The held-out records' scores under the fleet's components and this device's own (those its records fall
        in: models.mixture.detector.personalise), as it will score its traffic."""
        broadcast = self.broadcast(env)
        det = MixtureDetector.from_model(self.algorithm(env.meta).consensus(broadcast), pre, 1.0, shared_of(broadcast))
        batch = self.buffer.batch()  # the records it trained on, as the agent personalises when it loads the model
        rows = np.flatnonzero(self.training_rows(env.meta))
        det.personalise(self.columns(take_rows(batch, rows[i: i + 4096]), env.meta)
                        for i in range(0, len(rows), 4096))
        return np.asarray(det.score_samples(self.columns(take_rows(self.buffer.batch(), self._held(env.meta)),
                                                         env.meta)))

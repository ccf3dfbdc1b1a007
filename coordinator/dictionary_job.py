"""A federated dictionary-learning job on the coordinator (FedMM, `models.dictionary.fedmm`; the phases are
`coordinator.detector_job`'s)."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from coordinator.detector_job import DetectorJob
from models.detection.preprocessing import Preprocessor
from models.detection.screening import Federation
from models.detection.threshold import EDGES
from models.dictionary.detector import DictionaryDetector
from models.dictionary.fedmm import FedMMDictionary
from models.dictionary.spec import DictionaryJobSpec


class DictionaryJob(DetectorJob):
    type = "dict"

    spec: DictionaryJobSpec

    def algorithm(self) -> FedMMDictionary:
        return cast(FedMMDictionary, super().algorithm())

    def start_algorithm(self, fed: Federation, counts: np.ndarray, total: np.ndarray, sumsq: np.ndarray) -> None:
        """The fleet attached: its weights (mu_i), the share sampled each round (p) and each device's E[Z_j^2]."""
        alg = self.algorithm()
        assert self.rng is not None
        server, _ = alg.init_server(len(counts), self.rng)
        self.server, self.broadcast = alg.attach_fleet(server, fed.weight, self.spec.fraction, fed.diag)

    def expected_upload(self) -> dict[str, tuple[int, ...]]:
        alg = self.algorithm()
        return {"S1": (alg.atoms, alg.atoms), "S2": (alg.n_features, alg.atoms)}

    def round_metrics(self, before: dict[str, np.ndarray]) -> dict[str, Any]:
        # how far the dictionary moved: a convergence signal that needs nobody's data
        change = float(np.linalg.norm(self.broadcast["theta"] - before["theta"]))
        return {"dictionary_change": change, **super().round_metrics(before)}

    def detector(self, pre: Preprocessor, threshold: float) -> DictionaryDetector:
        if not EDGES[0] < threshold < EDGES[-1]:
            raise ValueError(f"threshold {threshold!r} outside the score grid ({EDGES[0]:g}..{EDGES[-1]:g})")
        alg = self.algorithm()
        return DictionaryDetector.from_model(alg.consensus(self.broadcast), pre, threshold, lam=alg.lam,
                                             quantile=self.spec.quantile)

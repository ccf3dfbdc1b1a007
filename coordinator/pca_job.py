"""A federated PCA job on the coordinator (the phases are `coordinator.detector_job`'s)."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from coordinator.detector_job import DetectorJob
from models.core.linalg import subspace_distance
from models.detection.preprocessing import Preprocessor
from models.detection.private import NoisySum
from models.detection.screening import Federation, model_problem
from models.kernel import RandomFourierFeatures
from models.pca import PCAAlgorithm
from models.pca.detector import PCADetector
from models.pca.messages import PCARound
from models.pca.private import MOMENT_SCALES, noisy_family, pooled_subspace
from models.pca.spec import PCAJobSpec


class PCAJob(DetectorJob):
    type = "pca"

    spec: PCAJobSpec

    def algorithm(self) -> PCAAlgorithm:
        if self.spec.kernel == "rff":  # the algorithm works on the lifted features, whatever the encoding
            return cast(PCAAlgorithm, self.spec.make_algorithm())
        return cast(PCAAlgorithm, super().algorithm())

    def lift(self) -> RandomFourierFeatures | None:
        """The job's feature map over the encoded features (None before the statistics phase or without one)."""
        return self.spec.lift(len(self.info["features"])) if "features" in self.info else None

    def start_algorithm(self, fed: Federation, counts: np.ndarray, total: np.ndarray, sumsq: np.ndarray) -> None:
        alg = self.algorithm()
        assert self.rng is not None
        self.server, self.broadcast = alg.init_server(len(counts), self.rng)
        lift = self.lift()
        if lift is None:
            self.server = alg.attach_bounds(self.server, fed.diag, fed.trace)
        else:  # the lifted diagonal is unknown here: every |z_j| <= sqrt(2/D) bounds it (models.kernel)
            n = len(counts)
            self.server = alg.attach_bounds(self.server, np.full((n, lift.n_components), lift.diag_bound),
                                            np.full(n, lift.trace_bound))

    round_message = PCARound

    def round_fields(self) -> dict[str, Any]:
        lift = self.lift()
        return {"rff": lift.params() if lift else None}

    def expected_upload(self) -> dict[str, tuple[int, ...]]:
        """The upload a client would send (shapes only matter), from the algorithm itself."""
        alg = self.algorithm()
        data = {"C": np.eye(alg.n_features)[None], "weight": np.ones(1)}
        _, up = alg.client_update(alg.init_clients(data, self.broadcast), data, self.broadcast)
        return {k: v[0].shape for k, v in up.items()}

    def round_metrics(self, before: dict[str, np.ndarray]) -> dict[str, Any]:
        # how far the consensus moved: a convergence signal that needs nobody's data
        alg = self.algorithm()
        return {"subspace_change": subspace_distance(alg.consensus(self.broadcast), alg.consensus(before)),
                **super().round_metrics(before)}

    # -- private mode: FedMM's statistic whole, one secure sum of every device's weighted second moment -----------
    def family_sums(self) -> list[str]:
        return ["moments"]

    def announce_family(self, name: str) -> tuple[dict[str, tuple[int, ...]], dict[str, float], int]:
        from models.private.fixedpoint import BITS

        d = len(self.spec.features)
        return {"C": (d * (d + 1) // 2,), "w": ()}, MOMENT_SCALES, BITS

    def noisy_family(self) -> dict[str, NoisySum]:
        """With differential privacy: every device's clipped second moment, weighing 1."""
        return noisy_family(len(self.spec.features))

    def summed_family(self, name: str, total: dict[str, np.ndarray], members: list[str]) -> dict[str, Any]:
        d = len(self.spec.features)
        # the devices' weights (with differential privacy each weighs 1: the fleet's size divides)
        W = float(total["w"][0]) if "w" in total else float(self.info["dp"]["devices"])
        Z = pooled_subspace(total["C"][0] / W, d, self.spec.rank)
        self.broadcast = {"Q": Z}  # FedMM's broadcast: its consensus is the first rank columns
        return {}

    def detector(self, pre: Preprocessor, threshold: float) -> PCADetector:
        Z = self.algorithm().consensus(self.broadcast)
        problem = model_problem(Z, pre.mean, pre.scale, threshold)
        if problem:
            raise ValueError(problem)
        return PCADetector.from_model(Z, pre, threshold, self.lift(), quantile=self.spec.quantile)

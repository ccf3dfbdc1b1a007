"""The settings of a federated PCA job."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from models.detection.spec import DetectorJobSpec
from models.jobspec import Simulation, check, setting
from models.kernel import DEFAULT_COMPONENTS, KERNELS, MAX_COMPONENTS, MIN_COMPONENTS, RandomFourierFeatures
from models.pca import ALGORITHMS, FEDERATED


@dataclass
class PCAJobSpec(DetectorJobSpec):
    algorithms: ClassVar = FEDERATED
    family: ClassVar[str] = "pca"

    #: "rff": kernel PCA through random Fourier features (models.kernel); the algorithm then works on
    #: kernel_features lifted features, and the map is regenerated everywhere from (features, D, gamma, seed)
    kernel: str = setting("none", help=f"one of {', '.join(KERNELS)}: rff for kernel PCA through random Fourier "
                          "features")
    kernel_features: int = setting(DEFAULT_COMPONENTS, help="rff: number of random Fourier features")
    kernel_gamma: float | None = setting(None, help="rff: Gaussian kernel width (none: 1/(2 x features), the median "
                                         "heuristic on z-scored records)")

    # the simulator runs the paper's FedPG unless told otherwise (a job runs FedMM: the least traffic per round)
    simulation: ClassVar = Simulation(
        settings=("rank", "rounds", "fraction", "seed", "quantile", "kernel", "kernel_features", "kernel_gamma",
                  "private", "dp_epsilon", "dp_delta"),
        algorithms=ALGORITHMS, defaults={"algorithm": "fedpg"}, choices={"kernel": KERNELS},
        parameters={"local_steps": "local steps per round", "rho": "ADMM penalty (none: the number of features)",
                    "lr": "local step size (none: 1/L from each client's curvature)",
                    "oversample": "extra block columns", "bits": "quantise uploads to this many bits, 2 to 16",
                    "support_trim": "after half the rounds each device leaves out of its statistic the records "
                    "the other devices' statistics do not explain (issue 22; benchmarks/results/pca-support.md)"})

    @classmethod
    def default_algorithm(cls) -> str:
        return "fedmm"

    @property
    def n_features(self) -> int:
        """The dimension the algorithm works in: the lifted features with a kernel, the features otherwise."""
        return self.kernel_features if self.kernel == "rff" else len(self.features)

    def lift(self, n_inputs: int | None = None) -> RandomFourierFeatures | None:
        """The job's feature map over `n_inputs` columns (the encoded features, known after the statistics
        phase; the named features when None)."""
        if self.kernel != "rff":
            return None
        return RandomFourierFeatures(n_inputs or len(self.features), self.kernel_features, self.kernel_gamma,
                                     self.seed)

    @property
    def sizing(self) -> str:
        return "kernel_features" if self.kernel == "rff" else "rank"

    def problem(self) -> dict[str, int]:
        return {"n_features": self.n_features, "rank": self.rank}

    def check_family(self) -> None:
        super().check_family()
        check(self.kernel in KERNELS, "kernel", f"must be one of {', '.join(KERNELS)}, got {self.kernel!r}")
        check(MIN_COMPONENTS <= self.kernel_features <= MAX_COMPONENTS, "kernel_features",
              f"must be between {MIN_COMPONENTS} and {MAX_COMPONENTS} (the number of random Fourier features)")
        check(self.kernel_gamma is None or (math.isfinite(self.kernel_gamma) and 0 < self.kernel_gamma <= 1e6),
              "kernel_gamma", "must be in (0, 10^6] (the Gaussian kernel's exp(-gamma ||x - y||^2) width)")
        check(not self.algorithm_params.get("support_trim"), "algorithm_params.support_trim", "the support phase "
              "runs in the simulator only so far (fedsentry simulate pca --detector pca --algorithm fedmm "
              "--support-trim)")
        if self.kernel == "rff":
            check(self.rank < self.kernel_features, "rank",
                  f"({self.rank}) must be smaller than kernel_features ({self.kernel_features})")
        elif self.features:  # none named: checked when the job starts with the agents' features
            check(self.rank < len(self.features), "rank",
                  f"({self.rank}) must be smaller than the number of features ({len(self.features)})")

"""The settings of a federated dictionary-learning job (the atoms and penalties are the algorithm's parameters:
``algorithm_params.atoms``, ``lam``, ``eta``, ``beta``, ``alpha``, ``bits``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from models.detection.spec import DetectorJobSpec
from models.dictionary import ALGORITHMS, FEDERATED
from models.jobspec import Simulation


@dataclass
class DictionaryJobSpec(DetectorJobSpec):
    algorithms: ClassVar = FEDERATED
    family: ClassVar[str] = "dict"

    #: the dictionary's size follows its atoms (an algorithm parameter)
    sizing = "algorithm_params"

    simulation: ClassVar = Simulation(
        settings=("rounds", "fraction", "seed", "quantile"), algorithms=ALGORITHMS,
        parameters={"atoms": "dictionary atoms K (none: 16, at most the features - 6)",
                    "lam": "the codes' l1 penalty lambda (standardised units)",
                    "eta": "the dictionary's ridge eta", "beta": "step sizes gamma_t = beta / sqrt(beta + t)",
                    "bits": "quantise uploads to this many bits, 2 to 16"})

    def problem(self) -> dict[str, int]:
        return {"n_features": len(self.features)}

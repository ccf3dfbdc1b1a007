"""What a Gaussian-mixture job's devices add to the detector's phase messages (`models.detection.messages`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from models.core.messages import array
from models.detection.messages import DetectorRound, Histogram, Statistics


@dataclass(kw_only=True)
class MixtureRound(DetectorRound):
    """Plus the share of its records each device holds out, and the job's seed (each device's seeding stream)."""

    holdout: float
    seed: int = 0


@dataclass(kw_only=True)
class MixtureStatistics(Statistics):
    """Plus how many of its records the device holds out of training (its threshold is read from their scores)."""

    version: ClassVar[int] = 1
    held: np.ndarray = array(kinds="iu")


@dataclass(kw_only=True)
class MixtureHistogram(Histogram):
    """Plus the held-out records' mean negative log-likelihood under the fleet's mixture."""

    nll: np.ndarray = array(kinds="f")

"""The messages of every anomaly-detection job's own phases (the training rounds upload the algorithm's arrays,
`models.core.messages.Upload`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from models.core.messages import Message, RoundMessage, array


@dataclass(kw_only=True)
class DetectorRound(RoundMessage):
    """A detector job's round: the features (numeric, text, flag strings) and, after the statistics phase, the
    encoding the devices agreed, which columns get signed log1p, the fleet's standardisation and (training rounds)
    each sampled device's capped weight in `sampled` order, or, in a round that lists nobody (models.core.sampling),
    the job's weight caps (models.detection.screening.WeightCaps) each device applies to its own record count."""

    features: list[str]
    categorical: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    rank: int = 0
    log_transform: bool = True
    encoding: dict[str, Any] | None = None
    log_mask: list[int] | None = None
    mean: np.ndarray | None = array(default=None)
    scale: np.ndarray | None = array(default=None)
    weights: np.ndarray | None = array(default=None)
    cap_level: float | None = None
    cap_scale: float | None = None
    private: bool = False  # private mode: the statistics phase asks for counts only (`Counted`), sums follow
    dp: bool = False  # differential privacy: the statistics phase is a roll call (count 1), noisy sums follow
    #: differential privacy with central noise: the sum this round collects in the clear (each device's values,
    #: `models.core.messages.Upload`), its announcement (coordinator.noisy_detector.NoisyDetector.noisy_extra)
    noisy: dict[str, Any] | None = None


@dataclass(kw_only=True)
class Counted(Message):
    """A device's answer to a private job's statistics phase: how many records it trains on and, for the mixture,
    how many it holds out (a count says how much a device saw, not what; its statistics follow as secure sums)."""

    kind: ClassVar[str] = "count"
    count: np.ndarray = array()
    held: np.ndarray | None = array(default=None)


@dataclass(kw_only=True)
class Statistics(Message):
    """A device's answer to the statistics phase: its record count, each numeric feature's sum, sum of squares and
    count of records that have it, and the counts of the job's text fields' values
    (`models.detection.encoding.record_counts`)."""

    kind: ClassVar[str] = "stats"
    count: np.ndarray = array()
    total: np.ndarray = array()
    sumsq: np.ndarray = array()
    present: np.ndarray = array()
    counts: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class Histogram(Message):
    """A device's answer to the threshold phase: the counts of its errors on the agreed grid (a sparse histogram:
    bin indices and counts)."""

    kind: ClassVar[str] = "histogram"
    bins: np.ndarray = array(kinds="iu")
    counts: np.ndarray = array()

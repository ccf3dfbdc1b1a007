"""The messages of every anomaly-detection job's own phases (the training rounds upload the algorithm's arrays,
`models.core.messages.Upload`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from models.core.messages import Message, array


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

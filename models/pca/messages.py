"""What a PCA job's round message adds to the detector's (`models.detection.messages`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models.detection.messages import DetectorRound


@dataclass(kw_only=True)
class PCARound(DetectorRound):
    """Plus, for kernel PCA, the four numbers of the job's random Fourier feature map (models.kernel)."""

    rff: dict[str, Any] | None = None

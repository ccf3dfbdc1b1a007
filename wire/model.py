"""The promoted anomaly model on the wire: what the coordinator publishes and agents load.

The envelope's meta names the detector (``pca``, the default for models published before there was a
choice, or ``gmm``); its arrays and the rest of the meta are the detector's own (``to_wire``)."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from models.detection.detector import PCADetector
from models.detection.preprocessing import Preprocessor
from models.mixture.detector import MixtureDetector
from wire.protocol import Envelope


class Detector(Protocol):
    """What an agent scores with, whatever the model family."""

    threshold_: float
    quantile: float
    feature_names_: list[str]
    preprocessor_: Preprocessor

    def score_samples(self, X: np.ndarray) -> np.ndarray | float: ...

    def explain(self, X: np.ndarray, top: int | None = None) -> list[list[dict[str, Any]]]: ...

    def to_wire(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]: ...


DETECTORS: dict[str, Any] = {"pca": PCADetector, "gmm": MixtureDetector}


def model_envelope(job: str, version: int, detector: Detector, sender: str = "coordinator") -> Envelope:
    arrays, meta = detector.to_wire()
    return Envelope("model", job, version, sender, arrays, {**meta, "version": int(version)})


def stored_envelope(job: str, version: int, arrays: dict[str, np.ndarray], info: dict[str, Any]) -> Envelope:
    """The envelope of a stored model version (its arrays and info as `to_wire` gave them)."""
    return Envelope("model", job, version, "coordinator", arrays, {**info, "version": int(version)})


def detector_from_dict(d: dict[str, Any]) -> Detector:
    """A detector saved with its ``to_dict`` (PCA when the dict does not name one)."""
    kind = d.get("detector", "pca")
    if kind not in DETECTORS:
        raise ValueError(f"unknown detector {kind!r}")
    det: Detector = DETECTORS[kind].from_dict(d)
    return det


def detector_from_envelope(env: Envelope) -> Detector:
    """The promoted model as published on the model topic (ValueError when it is not a model we know)."""
    kind = env.meta.get("detector", "pca")
    if kind not in DETECTORS:
        raise ValueError(f"unknown detector {kind!r} (this agent knows {', '.join(DETECTORS)})")
    try:
        det: Detector = DETECTORS[kind].from_wire(env.arrays, env.meta)
    except KeyError as e:
        raise ValueError(f"the {kind} model lacks {e}") from None
    return det

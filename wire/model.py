"""The promoted anomaly model on the wire: what the coordinator publishes and agents load.

The envelope's meta names the detector family (`models.families`: a family with a ``detector``; models published
before there was a choice name none, and are the registry's LEGACY_DETECTOR); its arrays and the rest of the meta
are the detector's own (``to_wire``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np

from models.detection.preprocessing import Preprocessor
from models.families import FAMILIES, LEGACY_DETECTOR, detectors
from wire.protocol import Envelope


class Detector(Protocol):
    """What an agent scores with, whatever the model family."""

    threshold_: float
    quantile: float
    feature_names_: list[str]
    preprocessor_: Preprocessor

    def score_samples(self, X: np.ndarray) -> np.ndarray | float: ...

    def explain(self, X: np.ndarray, top: int | None = None) -> list[list[dict[str, Any]]]: ...

    def see(self, records: Iterable[np.ndarray]) -> None: ...

    def to_wire(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]: ...


def detector_class(kind: Any) -> Any:
    """The class that reads a model of this detector family (ValueError for a family that is not a detector)."""
    f = FAMILIES.get(kind) if isinstance(kind, str) else None
    if f is None or not f.detector:
        raise ValueError(f"unknown detector {kind!r} (this agent knows {', '.join(detectors())})")
    return f.load_detector()


def model_envelope(job: str, version: int, detector: Detector, sender: str = "coordinator") -> Envelope:
    arrays, meta = detector.to_wire()
    return Envelope("model", job, version, sender, arrays, {**meta, "version": int(version)})


def stored_envelope(job: str, version: int, arrays: dict[str, np.ndarray], info: dict[str, Any]) -> Envelope:
    """The envelope of a stored model version (its arrays and info as `to_wire` gave them)."""
    return Envelope("model", job, version, "coordinator", arrays, {**info, "version": int(version)})


def detector_from_dict(d: dict[str, Any]) -> Detector:
    """A detector saved with its ``to_dict`` (LEGACY_DETECTOR's when the dict does not name one)."""
    det: Detector = detector_class(d.get("detector", LEGACY_DETECTOR)).from_dict(d)
    return det


def detector_from_envelope(env: Envelope) -> Detector:
    """The promoted model as published on the model topic (ValueError when it is not a model we know)."""
    kind = env.meta.get("detector", LEGACY_DETECTOR)
    cls = detector_class(kind)
    try:
        det: Detector = cls.from_wire(env.arrays, env.meta)
    except KeyError as e:
        raise ValueError(f"the {kind} model lacks {e}") from None
    return det

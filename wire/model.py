"""The promoted anomaly model on the wire: what the coordinator publishes and agents load."""

from __future__ import annotations

import numpy as np

from models.detector import PCADetector
from models.preprocessing import Preprocessor
from wire.protocol import Envelope


def model_envelope(job: str, version: int, Z: np.ndarray, pre: Preprocessor, threshold: float,
                   sender: str = "coordinator") -> Envelope:
    return Envelope("model", job, version, sender,
                    {"Z": Z, "mean": pre.mean, "scale": pre.scale, "log_mask": pre.log_mask.astype(np.uint8)},
                    {"features": list(pre.feature_names), "threshold": float(threshold), "version": int(version)})


def detector_from_envelope(env: Envelope) -> PCADetector:
    """The promoted model as published on the model topic."""
    meta, a = env.meta, env.arrays
    pre = Preprocessor(list(meta["features"]), a["log_mask"].astype(bool), a["mean"], a["scale"])
    return PCADetector.from_model(a["Z"], pre, float(meta["threshold"]))

"""Model versions: agents score with the last *promoted* model, never with a half-trained Z."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from coordinator.db import ModelVersion, unpack
from edge_agent.protocol import model_topic
from edge_agent.scorer import model_envelope
from models.preprocessing import Preprocessor


def promote(sessions, publish: Callable[[str, bytes, bool], None], model_id: int) -> ModelVersion:
    """Mark one version promoted (the only one of its type) and publish it, retained, to every agent."""
    with sessions.begin() as s:
        mv = s.get(ModelVersion, model_id)
        if mv is None:
            raise KeyError(f"no model version {model_id}")
        s.query(ModelVersion).filter(ModelVersion.type == mv.type, ModelVersion.id != mv.id).update(
            {"promoted": False})
        mv.promoted = True
    publish(model_topic(mv.type), model_payload(mv), True)
    return mv


def model_payload(mv: ModelVersion) -> bytes:
    a = unpack(mv.arrays)
    pre = Preprocessor(mv.info["features"], a["log_mask"].astype(bool), a["mean"], a["scale"])
    return model_envelope(mv.job_id, mv.version, a["Z"], pre, mv.info["threshold"]).encode()


def consensus_matrix(mv: ModelVersion) -> np.ndarray:
    return unpack(mv.arrays)["Z"]

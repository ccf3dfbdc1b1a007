"""A transport-map job on the coordinator (issue 26, point 5; models.otmap): the fleet learns one map onto the
promoted mixture, and the mixture with the map is stored and promoted as the next anomaly model (agents apply the
map before scoring: models.otmap.field.MappedDetector).

Phases: the statistics phase (`coordinator.detector_job`'s: weights, the start map's moments, each device's upload
bound); with the quantile start (the default: `OTMapJobSpec.start`), the histogram phase (every device uploads the
per-feature counts of its standardised records on models.otmap.quantile's grid; the coordinator sums them into the
start map onto Q, which the model carries and the agents keep and apply first: it travels once, in the first
training round's `init`, later rounds name its digest: models.otmap.messages.OTMapRound); then the rounds of
FedMM-OT (the server step of models.otmap.fedmm, Q drawn from the promoted mixture with
the job's seed: models.otmap.fleet). No threshold phase: the mapped detector keeps its threshold. Every round is
standardised with the promoted detector's preprocessing, so the agents' records land in its space."""

from __future__ import annotations

import logging
from typing import Any, ClassVar, cast

import numpy as np

from coordinator.detector_job import DetectorJob
from coordinator.job_runner import Phase
from coordinator.models_service import slot_types
from models.core.messages import MessageType, Upload
from models.detection.preprocessing import Preprocessor
from models.detection.screening import Federation
from models.otmap.fedmm import FedMMOT
from models.otmap.field import START, MappedDetector
from models.otmap.fleet import fleet_moments, target
from models.otmap.messages import NO_START, OTMapRound
from models.otmap.objective import grad_bound
from models.otmap.quantile import GRID, QuantileMap, mapped_second, quantile_map
from models.otmap.spec import OTMapJobSpec
from store.db import ModelVersion, unpack
from wire.model import detector_from_envelope, stored_envelope
from wire.protocol import ProtocolError

log = logging.getLogger("fedsentry.coordinator")

#: an honest device's mean gradient, computed in float32-stored records, may exceed the bound computed from its
#: float64 statistics by rounding only
BOUND_SLACK = 1.0 + 1e-6


class OTMapJob(DetectorJob):
    type = "otmap"
    replies: ClassVar[dict[str, MessageType]] = {**DetectorJob.replies, "histogram": Upload}
    round_message = OTMapRound

    spec: OTMapJobSpec

    def algorithm(self) -> FedMMOT:
        return cast(FedMMOT, super().algorithm())

    def phase_table(self) -> list[Phase]:
        histogram = [Phase("histogram")] if self.spec.start == "quantile" else []
        return [Phase("stats"), *histogram, Phase("train", self.spec.rounds, sampled=True)]

    def base(self) -> Any:
        """The promoted detector the map is learnt for (the one promoted when the job's statistics closed)."""
        with self.sessions() as s:
            if "base_model" in self.info:
                mv = s.get(ModelVersion, int(self.info["base_model"]))
            else:
                mv = (s.query(ModelVersion).filter(ModelVersion.promoted.is_(True),
                                                   ModelVersion.type.in_(slot_types(self.type))).first())
            if mv is None:
                raise ValueError("no anomaly model is promoted: train and promote a gmm first")
            det = detector_from_envelope(stored_envelope(mv.job_id, mv.version, unpack(mv.arrays), dict(mv.info)))
            self.info["base_model"] = mv.id
        return det.detector if isinstance(det, MappedDetector) else det  # a new map replaces the old

    def start_algorithm(self, fed: Federation, counts: np.ndarray, total: np.ndarray, sumsq: np.ndarray) -> None:
        """The fleet attached, Q drawn from the promoted mixture, the maps started at the fleet's moments; every
        later round standardises with the promoted detector's preprocessing."""
        try:
            det = self.base()
            pre: Preprocessor = det.preprocessor_
            if list(pre.feature_names) != list(self.info["features"]) or (pre.encoding or self.info["encoding"]) \
                    != self.info["encoding"]:
                raise ValueError(f"the promoted model's features are {', '.join(pre.feature_names)}; the fleet's "
                                 f"are {', '.join(self.info['features'])} (and their encodings must agree): name the "
                                 "model's features and text fields")
            if not (pre.log_mask == self.spec.log_transform).all():
                raise ValueError("the promoted model's log transform differs from the job's (log_transform)")
            Y = target(det, self.spec.target_records, self.spec.seed)
        except ValueError as e:
            self.fail(f"no transport map: {e}")
            self.server, self.broadcast = {}, {}
            return
        alg = self.algorithm()
        assert self.rng is not None
        server, _ = alg.init_server(len(counts), self.rng)
        server, self.broadcast = alg.attach_fleet(server, fed.weight, self.spec.fraction)
        server = alg.attach_target(server, Y)
        mean, var, second = fleet_moments(pre, counts, total, sumsq)
        if self.spec.start == "moments":
            server, self.broadcast = alg.start_from_moments(server, mean, var)
        self.server = {**server, "second": second}
        self.info.update(mean=pre.mean.tolist(), scale=pre.scale.tolist(), log_mask=pre.log_mask.astype(int).tolist())

    def start_map(self) -> QuantileMap | None:
        """The start map the histogram phase built (None before it, or with another start)."""
        arrays = {k[len(START):]: v for k, v in self.server.items() if k.startswith(START)}
        return QuantileMap.from_arrays(arrays) if arrays else None

    def content(self, phase: str, header: dict[str, Any]) -> Any:
        """A training round names the start map by its digest; the map itself travels in the `init` of the round
        `info["start_round"]` names only (the first training round, or the one after a device declined for lacking
        it). No other round carries an `init`: the family's clients start from no state (FedMMOT.init_clients)."""
        msg = cast(OTMapRound, super().content(phase, header))
        msg.init = {}
        start = self.start_map()
        if phase == "train" and start is not None:
            msg.start = start.digest()
            if self.info.get("start_round") == self.round:
                msg.init = {START + k: v for k, v in start.to_arrays().items()}
        return msg

    def expected_upload(self) -> dict[str, tuple[int, ...]]:
        if self.phase == "histogram":
            return {"counts": (len(self.info["features"]), len(GRID) - 1)}
        return {"grad": (self.algorithm().layout.size,)}

    def close(self, answered: list[str]) -> dict[str, Any]:
        if self.phase == "histogram":
            return self.close_histogram(answered)
        if any(reason.startswith(NO_START) for reason in self.declined.values()):
            self.info["start_round"] = self.round + 1  # a device missed the map (offline when it travelled): again
        return super().close(answered)

    def close_histogram(self, answered: list[str]) -> dict[str, Any]:
        """The devices' histograms summed, the start map onto Q built from them; each device's bound on its
        uploads from its mapped records (models.otmap.quantile.mapped_second; none answered: nothing it sends)."""
        if not answered:
            self.fail("no agent answered the histogram phase")
            return {}
        counts = {a: np.asarray(self.pending[a].arrays["counts"], dtype=float) for a in answered}
        try:
            start = quantile_map(np.sum(list(counts.values()), axis=0),
                                 target(self.base(), self.spec.target_records, self.spec.seed))
        except ValueError as e:
            self.fail(f"no start map: {e}")
            return {}
        index = self.index()
        second = np.zeros(len(self.counts))
        for a, c in counts.items():
            second[index[a]] = mapped_second(start, c, float(self.server["second"][index[a]]))
        self.server.update({"second": second, **{START + k: v for k, v in start.to_arrays().items()}})
        self.info["start_round"] = self.round + 1  # the map travels with the first training round
        return {"histograms": len(answered)}

    def validate(self, msg: Any, sender: str) -> None:
        """Besides shape and finiteness (DetectorJob's), a training upload's norm is at most what the device's
        own records could give (models.otmap.objective.grad_bound, from its statistics phase)."""
        super().validate(msg, sender)
        if isinstance(msg, Upload) and self.phase == "histogram":
            c = msg.arrays["counts"]
            claimed = float(self.counts[self.index()[sender]])
            if not (np.all(c >= 0) and np.all(c == np.round(c)) and np.all(c.sum(axis=1, dtype=float) == claimed)):
                raise ProtocolError("value", f"counts: each feature's must be whole, non-negative and sum to the "
                                    f"{claimed:.0f} records the device counted in its statistics")
        if isinstance(msg, Upload) and self.phase == "train":
            alg = self.algorithm()
            second = float(self.server["second"][self.index()[sender]])
            bound = float(grad_bound(alg.layout, self.broadcast["omega"], second)) * BOUND_SLACK
            norm = float(np.linalg.norm(msg.arrays["grad"]))
            if not norm <= bound:
                raise ProtocolError("value", f"grad: norm {norm:.4g} exceeds {bound:.4g}, the most this device's "
                                    "records (as its statistics describe them) can give")

    def round_metrics(self, before: dict[str, np.ndarray]) -> dict[str, Any]:
        change = float(np.linalg.norm(self.broadcast["omega"] - before["omega"]))
        return {"map_change": change, **super().round_metrics(before)}

    def detector(self, pre: Preprocessor, threshold: float) -> MappedDetector:
        return MappedDetector(self.base(), self.algorithm().layout, np.asarray(self.broadcast["omega"]),
                              self.start_map())

    def finish(self) -> None:
        det = self.base()
        self.store_model(det.preprocessor_, float(det.threshold_), {"base_model": int(self.info["base_model"])})
        if self.phase == "failed":
            return
        super().finish()

"""One rogue device among eleven, over a real broker: it lies in the statistics phase, in its training
uploads and in its error histogram, the ways an attacker with one enrolled device would (issue 10).

Each job is compared with a clean job of the same fleet: the model's subspace distance and the share of
attacks caught at the label-free threshold the job picked itself. A claim no honest device could make is
refused, so the rogue's best outcome is to count as a device that said nothing: the clean job for an attack
is the one where the rogue is silent in the phase it lied in (statistics: it takes no part at all;
histogram: it trains honestly and sends no histogram), or honest when its lie is plausible."""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.participant import Request
from edge_agent.pca_participant import PCAParticipant
from models.core.linalg import orth, subspace_distance
from models.detection.metrics import detection_report
from models.detection.preprocessing import Preprocessor
from models.detection.threshold import EDGES
from models.pca.detector import PCADetector
from store.db import ModelVersion, Rejection, Round, unpack
from tests.integration.conftest import parts_for, wait_until
from wire.protocol import Envelope

N = 11
ROGUE = "dev-10"


class Rogue(PCAParticipant):
    """Honest in a job named clean-*; otherwise the attack the job's name starts with."""

    attack_records: np.ndarray

    def attack(self, req: Request) -> str:
        return req.job.rsplit("-", 1)[0]

    def _stats(self, req: Request) -> Envelope | None:
        if self.attack(req) == "absent":
            return None
        reply = super()._stats(req)
        a = reply.arrays
        attack = self.attack(req)
        if attack in ("weight", "weight-ceiling"):  # 10^12 records (or the most a job accepts), consistent sums
            claim = 10**12 if attack == "weight" else 10**6
            f = claim / float(a["count"][0])
            a.update(count=np.array([claim], dtype=np.int64), total=a["total"] * f, sumsq=a["sumsq"] * f)
        elif attack == "stats-huge":
            a.update(total=np.full_like(a["total"], 1e300), sumsq=np.full_like(a["sumsq"], 1e300))
        elif attack in ("stats-variance", "stats-in-range"):  # a huge variance on four features: what blinds
            n = float(a["count"][0])                            # flood detection (10^12, or the most possible)
            a["sumsq"][:4] = a["total"][:4] ** 2 / n + (1e12 if attack == "stats-variance" else 700.0**2) * n
        return reply

    def client_data(self, req: Request) -> dict[str, np.ndarray]:
        data = super().client_data(req)
        if not self.attack(req).startswith("weight"):
            return data
        # a positive semi-definite statistic spanned by the attacks' directions, with the trace the server
        # derives from this device's own claims: it would make the attacks look normal
        features = req.msg.features
        pre = Preprocessor(features, np.full(len(features), True), req.msg.mean, req.msg.scale)
        V = np.linalg.svd(pre.transform(self.attack_records), full_matrices=False)[2][:3].T
        trace = float(np.trace(data["C"][0]))
        return {"C": (trace * V @ V.T / 3)[None], "weight": data["weight"]}

    def _threshold(self, req: Request) -> Envelope | None:
        reply = super()._threshold(req)
        attack = self.attack(req)
        if attack == "mute":
            return None
        top = np.array([len(EDGES) - 2], dtype=np.int32)
        if attack == "histogram":  # 10^15 errors in the top bin
            return Envelope("histogram", req.job, req.round, self.id,
                            {"bins": top, "counts": np.array([10**15], dtype=np.int64)})
        if attack == "histogram-consistent":  # as many errors as it claimed records, all in the top bin
            n = int(reply.arrays["counts"].sum())
            return Envelope("histogram", req.job, req.round, self.id,
                            {"bins": top, "counts": np.array([n], dtype=np.int64)})
        if attack == "histogram-float":
            return Envelope("histogram", req.job, req.round, self.id,
                            {k: v.astype(float) + 0.5 for k, v in reply.arrays.items()})
        return reply


@pytest.fixture(scope="module")
def federation(request):
    """The broker, coordinator and eleven agents, shared by the scenarios (one job each)."""
    from coordinator.broker import EmbeddedBroker, Mosquitto
    from coordinator.service import Coordinator
    from fedsentry.data.datasets import TrafficData, train_test_split
    from models.synthetic import generate_traffic
    from tests.integration.conftest import HAVE_MOSQUITTO, Fleet

    tmp = request.getfixturevalue("tmp_path_factory").mktemp("rogue")
    t = generate_traffic(n_devices=12, records_per_device=150, seed=1)
    data = TrafficData("synthetic", t.feature_names, t.X_normal, t.X_attack)
    split = train_test_split(data, seed=0)
    broker = (Mosquitto() if HAVE_MOSQUITTO else EmbeddedBroker()).start()
    coordinator = Coordinator(broker.url, f"sqlite:///{tmp}/coordinator.db").start()
    fleet = Fleet(broker.url, tmp)
    for i, part in enumerate(parts_for(split, N)):
        agent = fleet.add(f"dev-{i:02d}", part, data.feature_names)
        if agent.cfg.agent_id == ROGUE:
            rogue = Rogue(ROGUE, agent.store, agent.buffer)
            rogue.attack_records = split.X_test[split.y_test == 1]
            agent.participants["pca"] = rogue
    wait_until(lambda: len(coordinator.online_devices()) == N, 30, "agents online")
    yield coordinator, data, split
    fleet.close()
    coordinator.close()
    broker.close()


def run_job(coordinator, job_id: str, data, deadline: float = 10) -> dict:
    coordinator.create_job(job_id, "pca", "fedmm", {"features": data.feature_names, "rank": 3, "rounds": 20,
                                                    "fraction": 0.3, "seed": 0, "min_agents": N,
                                                    "deadline": deadline})
    wait_until(lambda: coordinator.job_status(job_id) in ("finished", "failed"), 120, job_id)
    with coordinator.sessions() as s:
        mv = s.query(ModelVersion).filter_by(job_id=job_id).one_or_none()
        rounds = s.query(Round).filter_by(job_id=job_id).all()
    return {"status": coordinator.job_status(job_id), "model": mv, "rounds": rounds}


def evaluate(mv, split) -> dict:
    a = unpack(mv.arrays)
    pre = Preprocessor(mv.info["features"], a["log_mask"].astype(bool), a["mean"], a["scale"])
    det = PCADetector.from_model(a["Z"], pre, mv.info["threshold"], quantile=0.99)
    report = detection_report(split.y_test, det.score_samples(split.X_test), mv.info["threshold"])
    return {"Z": a["Z"], "threshold": mv.info["threshold"], **report}


@pytest.fixture(scope="module")
def clean(federation):
    """The references: the rogue honest, absent, or silent in the threshold phase."""
    coordinator, data, split = federation
    out = {}
    for name, deadline in (("clean", 10), ("absent", 1.5), ("mute", 1.5)):
        job = run_job(coordinator, f"{name}-1", data, deadline)
        assert job["status"] == "finished"
        out[name] = evaluate(job["model"], split)
    return out


#: attack -> the clean job it must match, and whether the coordinator must refuse what the rogue sends
ATTACKS = {"weight": ("absent", True), "stats-huge": ("absent", True), "stats-variance": ("absent", True),
           "histogram": ("mute", True), "histogram-float": ("mute", True),
           "histogram-consistent": ("clean", False)}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_one_rogue_cannot_move_the_model_or_the_threshold(federation, clean, attack):
    coordinator, data, split = federation
    reference, refused = ATTACKS[attack]
    ref = clean[reference]
    before = _rejections(coordinator)
    job = run_job(coordinator, f"{attack}-1", data, deadline=1.5 if refused else 10)
    assert job["status"] == "finished"
    got = evaluate(job["model"], split)
    sd = subspace_distance(got["Z"], ref["Z"])
    print(f"{attack}: refused {_rejections(coordinator) - before}; subspace distance to the {reference} job "
          f"{sd:.4f}; attacks caught {got['recall']:.3f} ({reference} {ref['recall']:.3f}, rogue honest "
          f"{clean['clean']['recall']:.3f}); AUC {got['auc_roc']:.4f}; false positives "
          f"{got['false_positive_rate']:.4f}; threshold {got['threshold']:.4g} ({reference} {ref['threshold']:.4g})")
    assert (_rejections(coordinator) > before) == refused
    assert sd <= 0.05
    assert abs(got["recall"] - ref["recall"]) <= 0.02


@pytest.mark.parametrize("attack, reference", [("weight-ceiling", "absent"), ("stats-in-range", "clean")])
def test_what_a_rogue_within_every_bound_can_still_do(federation, clean, attack, reference):
    """README, threat model: claim the most records a job accepts and a statistic spanned by the attacks'
    directions within the variances it reported (weight-ceiling), or the largest variance the transform
    allows on four features (stats-in-range). Neither is refused; their weight is capped, the statistic is
    shrunk to the device's bounds and the variance's pull on the scale to sqrt(1 + influence). Measured:
    the job finishes with a finite model and the ranking of records (AUC) stays within 0.1."""
    coordinator, data, split = federation
    job = run_job(coordinator, f"{attack}-1", data)
    assert job["status"] == "finished"
    got, ref = evaluate(job["model"], split), clean[reference]
    print(f"{attack}: subspace distance to the {reference} job {subspace_distance(got['Z'], ref['Z']):.4f}; AUC "
          f"{got['auc_roc']:.4f} ({reference} {ref['auc_roc']:.4f}); caught {got['recall']:.3f} ({reference} "
          f"{ref['recall']:.3f}); false positives {got['false_positive_rate']:.4f}")
    assert np.isfinite(got["Z"]).all()
    assert got["auc_roc"] >= ref["auc_roc"] - 0.1


def _rejections(coordinator) -> int:
    """What the coordinator refused, as stored: its housekeeping writes the counts within a second, so wait
    until the table holds every refusal it has counted (never call its private flush: it races the worker)."""
    def stored() -> int:
        with coordinator.sessions() as s:
            return sum(r.count for r in s.query(Rejection).all())

    wait_until(lambda: stored() == sum(coordinator.rejected.values()), 10, "rejection counts stored")
    return stored()


def test_a_model_that_fails_its_sanity_check_is_never_promoted(federation):
    """A non-finite consensus (here forced by corrupting the server's state mid-job) fails the job."""
    coordinator, data, _ = federation
    job_id = "insane-1"
    coordinator.create_job(job_id, "pca", "fedmm", {"features": data.feature_names, "rank": 3, "rounds": 40,
                                                    "fraction": 0.3, "seed": 0, "min_agents": N, "deadline": 10})
    wait_until(lambda: job_id in coordinator.jobs and coordinator.jobs[job_id].phase == "train", 60, "training")
    runner = coordinator.jobs[job_id]
    runner.server["Q"] = orth(runner.server["Q"]) * np.nan
    wait_until(lambda: coordinator.job_status(job_id) in ("finished", "failed"), 120, job_id)
    assert coordinator.job_status(job_id) == "failed"
    with coordinator.sessions() as s:
        assert s.query(ModelVersion).filter_by(job_id=job_id).count() == 0



"""Honest traffic that used to fail gmm jobs (issue 21): the coordinator's job runner and real agent
participants (the loopback of test_loopback: encoded envelopes, a real SQLite database), the default detector
settings. Every job must finish with a valid mixture."""

from __future__ import annotations

import time

import numpy as np
import pytest

from models.mixture.detector import mixture_problem
from models.mixture.gmm import Mixture, hard_stats, m_step, nearest_psd, triu_unpack
from store.db import ModelVersion, unpack
from tests.integration.test_loopback import Loopback, pca_participants
from wire.protocol import decode

FEATURES = ["duration", "src_bytes", "dst_bytes", "dst_port", "flag_s", "pkts"]


def fleet(rng: np.random.Generator, devices: int = 8, records: int = 300) -> list[np.ndarray]:
    """Ordinary IoT-like traffic: heavy-tailed counters, a port from a handful, a 0/1 flag."""
    return [np.c_[rng.exponential(2.0, records), rng.lognormal(6, 1, records), rng.lognormal(7, 1.5, records),
                  rng.choice([53, 80, 443, 8883], records), rng.integers(0, 2, records), rng.poisson(8, records)]
            for _ in range(devices)]


def train(tmp_path, parts: list[np.ndarray], drop_round: int | None = None, **settings) -> ModelVersion:
    participants = pca_participants(tmp_path, FEATURES, parts, "gmm")
    loop = DroppingLoopback(tmp_path, "gmm", "fedem", {"features": FEATURES, "rounds": 6, "fraction": 0.5,
                                                       "seed": 1, "deadline": 0.3, **settings}, participants)
    loop.drop_round = drop_round
    return loop.run()


class DroppingLoopback(Loopback):
    """A loopback in which nobody answers one training round (`drop_round`): its deadline passes."""

    drop_round: int | None = None
    dropped = False

    def run(self) -> ModelVersion:
        self.runner.start(sorted(p.id for p in self.participants))
        while self.runner.phase not in ("finished", "failed"):
            message = decode(self.outbox.pop())
            if message.meta.get("phase") == "train" and message.round == self.drop_round:
                self.dropped = True
                time.sleep(0.35)  # past the deadline, with no answer
            else:
                for p in self.participants:
                    reply = p.on_round(message)
                    if reply is not None:
                        self.runner.accept(decode(reply.encode()))
            while not self.runner.tick() and not self.outbox and self.runner.phase not in ("finished", "failed"):
                time.sleep(0.01)
        assert self.runner.phase == "finished", self.runner.job_id
        with self.sessions() as s:
            return s.query(ModelVersion).filter_by(job_id="loop").one()


def check(mv: ModelVersion) -> Mixture:
    a = unpack(mv.arrays)
    m = Mixture(a["weights"], a["means"], a["prec_chol"])
    assert mixture_problem(m) is None
    assert np.isfinite(mv.info["threshold"]) and mv.info["threshold"] > 0
    return m


def test_repeated_records_train(tmp_path):
    """The same flow seen thousands of times (a heartbeat, a keep-alive): most of a device's records identical,
    and one device holding nothing else."""
    rng = np.random.default_rng(0)
    parts = fleet(rng)
    for p in parts[:4]:
        p[: int(0.7 * len(p))] = p[0]
    parts[4][:] = [0.0, 4e9, 12.0, 8883, 1, 3]  # nothing but one bulk upload, far from every other flow
    check(train(tmp_path, parts))


def test_a_feature_constant_on_a_device_far_from_the_others_trains(tmp_path):
    rng = np.random.default_rng(1)
    parts = fleet(rng)
    parts[0][:, 3] = 61_000  # one device talks to one port no other device uses
    parts[0][:, 0] = 3e6
    parts[1][:, 4] = 1
    check(train(tmp_path, parts))


def test_devices_with_a_handful_of_records_train(tmp_path):
    rng = np.random.default_rng(2)
    parts = fleet(rng)
    parts[0], parts[1], parts[2] = parts[0][:3], parts[1][:1], parts[2][:7]  # fewer than a seeding cluster
    check(train(tmp_path, parts))


def test_a_round_nobody_answers_keeps_the_mixture_and_the_job_finishes(tmp_path):
    rng = np.random.default_rng(3)
    loop_mv = train(tmp_path, fleet(rng), drop_round=3)
    check(loop_mv)


def test_float32_statistics_of_a_flat_component_far_out_stay_positive_definite():
    """A component flat in one direction (repeated records, a constant feature) whose mean sits 80 standard
    deviations out: float32 rounding of its statistics leaves S2 / R - mu mu' an eigenvalue of about -4e-4,
    beyond the ridge. The M-step clips negative eigenvalues to zero before adding the ridge (found by a helper's
    instrumented runs on ton-iot, whose smallest eigenvalue after seeding was already 96 % of the ridge)."""
    rng = np.random.default_rng(0)
    X = np.c_[rng.normal(0, 1, (500, 3)), np.full(500, 79.37)]
    R, S1, S2 = (np.float32(s / 500).astype(float) * 500 for s in hard_stats(X, np.zeros(500, int), 1))
    cov = triu_unpack(S2, 4)[0] / R[0] - np.outer(S1[0] / R[0], S1[0] / R[0])
    assert np.linalg.eigvalsh(cov)[0] < -1e-4  # what rounding leaves: the ridge alone is not enough
    m = m_step(R, S1, S2, reg=1e-4)
    precision = m.prec_chol[0] @ m.prec_chol[0].T
    assert np.linalg.eigvalsh(precision)[-1] == pytest.approx(1e4, rel=1e-6)  # the flat direction: the ridge
    exact = m_step(*hard_stats(X, np.zeros(500, int), 1), reg=1e-4)
    np.testing.assert_allclose(m.means, exact.means, rtol=1e-6)
    C = np.cov(rng.normal(size=(50, 4)).T)[None]
    np.testing.assert_array_equal(nearest_psd(C), C)  # a positive semi-definite matrix is left as it was

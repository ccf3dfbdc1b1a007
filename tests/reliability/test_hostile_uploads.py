"""No upload may crash a job (issue 22, point 3): one device's training uploads are replaced by random and
adversarial statistics of the right shapes (huge, tiny, negative, non-finite, second moments no records could
have), and the real job runner (validation, screening, the family's server step; the loopback of
test_loopback: encoded envelopes, a real SQLite database) must finish every job with a valid model, counting
what it refused."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.mixture.fedem import FedEM, moments_psd
from models.mixture.gmm import hard_stats
from store.db import Round, unpack
from tests.integration.test_loopback import Loopback, pca_participants
from wire.protocol import Envelope, decode


class Hostile:
    """A participant whose training uploads are rewritten by `forge` (same names and shapes)."""

    def __init__(self, inner, forge):
        self.inner, self.forge, self.id = inner, forge, inner.id

    def on_round(self, env):
        reply = self.inner.on_round(env)
        if reply is None or env.meta.get("phase") not in ("train", "seed"):
            return reply
        arrays = {k: self.forge(k, np.asarray(v)) for k, v in reply.arrays.items()}
        return Envelope(reply.kind, reply.job, reply.round, reply.sender, arrays, reply.meta)


def forger(kind: str, scale: float, seed: int):
    rng = np.random.default_rng(seed)

    def forge(name: str, a: np.ndarray) -> np.ndarray:
        if a.dtype.kind not in "fc" or a.size == 0:
            return a
        if kind == "random":
            out = rng.normal(0, scale, a.shape)
        elif kind == "scaled":
            out = a * scale
        elif kind == "negative":
            out = -np.abs(a) * scale
        elif kind == "nonfinite":
            out = a.copy()
            out.flat[rng.integers(a.size)] = rng.choice([np.nan, np.inf, -np.inf])
        elif kind == "offdiagonal":  # a second moment no records have: the diagonal and sums stay consistent
            out = a.copy()
            if name == "S2" and a.shape[-1] > 2:
                out[..., 1] += scale
        else:
            raise ValueError(kind)
        return out.astype(a.dtype)

    return forge


def drive(loop, participants) -> None:
    """Run a loopback job to its end; an answer refused at the door (a ProtocolError with a reason) leaves the
    round to its deadline."""
    loop.runner.start(sorted(p.id for p in participants))
    while loop.runner.phase not in ("finished", "failed"):
        message = loop.outbox.pop()
        for p in participants:
            reply = p.on_round(decode(message))
            if reply is not None:
                try:
                    loop.runner.accept(decode(reply.encode()))
                except Exception as e:
                    assert type(e).__name__ == "ProtocolError", e
        while not loop.runner.tick() and not loop.outbox:
            time.sleep(0.01)


KINDS = ["random", "scaled", "negative", "nonfinite", "offdiagonal"]
CASES = [("gmm", "fedem", {"components": 4}), ("pca", "fedmm", {}), ("pca", "fedpg", {}), ("pca", "fedpe", {})]


@pytest.fixture(scope="module")
def fleet():
    rng = np.random.default_rng(0)
    features = ["a", "b", "c", "d"]
    parts = [np.c_[rng.lognormal(3, 1, (120, 2)), rng.normal(0, 1, (120, 2))] for _ in range(6)]
    return features, parts


@pytest.mark.parametrize(("family", "algorithm", "params"), CASES, ids=[f"{f}-{a}" for f, a, _ in CASES])
def test_hostile_uploads_never_crash_a_job(tmp_path_factory, fleet, family, algorithm, params):
    features, parts = fleet

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(kind=st.sampled_from(KINDS), exponent=st.integers(-30, 30), seed=st.integers(0, 2**16))
    def check(kind, exponent, seed):
        tmp = tmp_path_factory.mktemp("hostile")
        participants = pca_participants(tmp, features, parts, family)
        participants[0] = Hostile(participants[0], forger(kind, 10.0**exponent, seed))
        loop = Loopback(tmp, family, algorithm, {"features": features, "rounds": 4, "fraction": 0.5, "seed": 1,
                                                 "min_agents": len(parts), "algorithm_params": params, "deadline": 0.05,
                                                 **({"rank": 2} if family == "pca" else {})}, participants)
        drive(loop, participants)
        assert loop.runner.phase == "finished", (kind, exponent, loop.runner.phase)
        with loop.sessions() as s:
            rounds = s.query(Round).filter_by(job_id="loop").all()
            from store.db import ModelVersion

            arrays = unpack(s.query(ModelVersion).filter_by(job_id="loop").one().arrays)
        assert all(np.isfinite(v).all() for v in arrays.values())
        assert rounds[-1].phase == "threshold"

    check()


def test_statistics_no_records_could_have_are_refused_and_honest_float32_ones_kept():
    rng = np.random.default_rng(1)
    X = np.c_[rng.normal(0, 1, (400, 3)), np.full(400, 79.0)]  # a flat feature far out: float32 rounding
    labels = rng.integers(0, 3, 400)
    R, S1, S2 = (np.float32(v / 400).astype(float)[None] for v in hard_stats(X, labels, 3))
    assert moments_psd(R, S1, S2, 4).all()
    forged = S2.copy()
    forged[0, 0, 1] += 1e4  # (0, 1) of the first component: diagonal and sums unchanged
    assert not moments_psd(R, S1, forged, 4).any()
    alg = FedEM(4, components=3)
    mean, mean_sq = S1.sum(axis=1), S2[..., [0, 4, 7, 9]].sum(axis=1)  # the device's own claims: consistent
    assert alg.consistent(R, S1, S2, mean, mean_sq, False).all()
    assert not alg.consistent(R, S1, forged, mean, mean_sq, False).any()


@pytest.mark.parametrize("algorithm", ["fedmc-admm", "fedmavg", "altgdmin"])
def test_hostile_item_updates_never_crash_a_recommendation_job(tmp_path_factory, algorithm):
    """The recommendation family through the same runner: one device's training uploads forged (issue 22's
    property test covers every family's server step)."""
    from models.families import family
    from models.recsys.data import split_users, train_test_split
    from models.recsys.synthetic import generate_ratings
    from tests.integration.test_loopback import _shard

    data = generate_ratings(n_users=60, n_items=40, seed=4)
    train, test = train_test_split(data, 0.2, seed=0)
    parts = split_users(train.n_users, 5, "random", np.random.default_rng(0))

    @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(kind=st.sampled_from(["random", "scaled", "negative", "nonfinite"]), exponent=st.integers(-30, 30),
           seed=st.integers(0, 2**16))
    def check(kind, exponent, seed):
        from edge_agent.store import AgentStore

        tmp = tmp_path_factory.mktemp("hostile-recsys")
        participants = [family("recsys").load_participant()(f"rs-{i}", AgentStore(tmp / f"rs-{i}"),
                                                            _shard(train, users), _shard(test, users))
                        for i, users in enumerate(parts)]
        participants[0] = Hostile(participants[0], forger(kind, 10.0**exponent, seed))
        loop = Loopback(tmp, "recsys", algorithm, {"items": train.item_ids.tolist(), "rank": 2, "rounds": 4,
                                                   "fraction": 0.6, "seed": 1, "deadline": 0.05}, participants)
        drive(loop, participants)
        assert loop.runner.phase == "finished", (kind, exponent, loop.runner.phase)
        with loop.sessions() as s:
            from store.db import ModelVersion

            arrays = unpack(s.query(ModelVersion).filter_by(job_id="loop").one().arrays)
        assert all(np.isfinite(v).all() for v in arrays.values())

    check()

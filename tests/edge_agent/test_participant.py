"""The agent's side of a job, without a broker: idempotent rounds and persistence."""

import numpy as np

from edge_agent.detector_participant import TrainingBuffer
from edge_agent.pca_participant import PCAParticipant
from edge_agent.sources import Batch
from edge_agent.store import AgentStore
from models.core.linalg import orth
from wire.protocol import Envelope, decode, encode


def make(tmp_path, rng, name="dev-1"):
    store = AgentStore(tmp_path / name)
    buf = TrainingBuffer(store)
    buf.add(Batch(["a", "b", "c", "d"], np.abs(rng.standard_normal((50, 4))) * 10))
    buf.save()
    return PCAParticipant(name, store, buf), store


def round_msg(rnd, sampled, Z, init):
    meta = {"phase": "train", "algorithm": "fedpg", "rank": 2, "params": {}, "features": ["a", "b", "c", "d"],
            "sampled": sampled, "log_transform": True}
    arrays = {"Z": Z, "init.Z": init, "mean": np.full(4, 2.0), "scale": np.ones(4), "weights": np.ones(len(sampled))}
    return decode(encode(Envelope("round", "j", rnd, "coordinator", arrays, meta)))


def test_a_redelivered_round_is_answered_identically_and_applied_once(tmp_path, rng):
    p, store = make(tmp_path, rng)
    Z0 = orth(rng.standard_normal((4, 2)))
    first = p.on_round(round_msg(1, ["dev-1"], Z0, Z0))
    state1 = store.load_arrays("job-j")
    again = p.on_round(round_msg(1, ["dev-1"], Z0, Z0))
    assert np.array_equal(first.arrays["U"], again.arrays["U"])
    assert all(np.array_equal(state1[k], store.load_arrays("job-j")[k]) for k in state1)
    # the next consensus applies the dual update exactly once, even if that message comes twice
    Z1 = orth(rng.standard_normal((4, 2)))
    p.on_round(round_msg(2, [], Z1, Z0))
    y_once = store.load_arrays("job-j")["Y"]
    p.on_round(round_msg(2, [], Z1, Z0))
    assert not np.allclose(y_once, state1["Y"])
    assert np.array_equal(y_once, store.load_arrays("job-j")["Y"])


def test_state_survives_a_restart(tmp_path, rng):
    p, _store = make(tmp_path, rng)
    Z0 = orth(rng.standard_normal((4, 2)))
    p.on_round(round_msg(1, ["dev-1"], Z0, Z0))
    reborn = PCAParticipant("dev-1", AgentStore(tmp_path / "dev-1"), TrainingBuffer(AgentStore(tmp_path / "dev-1")))
    assert reborn.buffer.seen == 50 and reborn.buffer.X.shape == (50, 4)
    assert np.array_equal(reborn.on_round(round_msg(1, ["dev-1"], Z0, Z0)).arrays["U"],
                          p.on_round(round_msg(1, ["dev-1"], Z0, Z0)).arrays["U"])


def test_stats_and_schema_errors(tmp_path, rng):
    p, _ = make(tmp_path, rng)
    env = decode(encode(Envelope("round", "j", 0, "coordinator", {}, {"phase": "stats", "features": ["a", "b"],
                                                                     "log_transform": True})))
    reply = p.on_round(env)
    assert reply.arrays["count"][0] == 50 and reply.arrays["total"].shape == (2,)
    bad = decode(encode(Envelope("round", "j2", 0, "coordinator", {}, {"phase": "stats", "features": ["a", "zz"]})))
    import pytest

    from edge_agent.sources import SchemaError

    with pytest.raises(SchemaError, match="lacks the model's features: zz"):
        p.on_round(bad)


def test_training_buffer_is_a_bounded_uniform_sample(tmp_path, rng):
    buf = TrainingBuffer(AgentStore(tmp_path / "b"), capacity=100)
    for _ in range(20):
        buf.add(Batch(["x"], rng.random((50, 1))))
    assert buf.X.shape == (100, 1) and buf.seen == 1000
    assert 0.35 < buf.X.mean() < 0.65


class CountingStore(AgentStore):
    """A real store that counts its reads and writes."""

    def __init__(self, folder):
        super().__init__(folder)
        self.touched = 0

    def load_arrays(self, name):
        self.touched += 1
        return super().load_arrays(name)

    def save_arrays(self, name, arrays):
        self.touched += 1
        super().save_arrays(name, arrays)

    def load_bytes(self, name):
        self.touched += 1
        return super().load_bytes(name)

    def save_bytes(self, name, data):
        self.touched += 1
        super().save_bytes(name, data)


def test_an_agent_not_sampled_touches_no_disk_once_its_dual_update_is_applied(tmp_path, rng):
    store = CountingStore(tmp_path / "dev-1")
    buf = TrainingBuffer(store)
    buf.add(Batch(["a", "b", "c", "d"], np.abs(rng.standard_normal((50, 4))) * 10))
    p = PCAParticipant("dev-1", store, buf)
    Z = [orth(rng.standard_normal((4, 2))) for _ in range(5)]
    p.on_round(round_msg(1, ["dev-1"], Z[0], Z[0]))
    before = store.touched
    p.on_round(round_msg(2, ["dev-9"], Z[1], Z[0]))  # owes the dual update of round 1: one write (the state
    assert store.touched - before == 1  # it updates is the one it wrote, kept in memory)
    before = store.touched
    for r in (3, 4, 5):
        p.on_round(round_msg(r, ["dev-9"], Z[r - 1], Z[0]))
    assert store.touched == before
    # after a restart the state is read once from disk, then the rounds it is not sampled in are free again
    reborn = PCAParticipant("dev-1", store, TrainingBuffer(store))
    before = store.touched
    for r in (6, 7):
        reborn.on_round(round_msg(r, ["dev-9"], Z[1], Z[0]))
    assert store.touched - before == 1


def test_a_threshold_sum_with_malformed_clip_bounds_is_refused_before_any_work(tmp_path, rng):
    """Private mode's threshold sum (models.detection.tail_clip): the agent refuses an announcement whose clip
    bounds are not one positive share per coarse point, by name, before it scores a record."""
    import pytest

    from edge_agent.participant import Request
    from models.detection.private import COARSE_BINS
    from models.pca.messages import PCARound

    p, _ = make(tmp_path, rng)

    def ask(extra):
        msg = PCARound(phase="threshold", features=["a", "b", "c", "d"], sampled=["dev-1"], weights=np.ones(1),
                       secagg=extra)
        return p.secure_values("threshold", Request("j", 40, msg))

    short = np.ones(COARSE_BINS - 1)
    for bounds in (short, np.r_[short, 0.0], np.r_[short, -1.0], np.r_[short, np.nan]):
        with pytest.raises(ValueError, match=f"bounds must be {COARSE_BINS} positive shares"):
            ask({"window": [0, 3], "bounds": bounds.tolist()})
    with pytest.raises(ValueError, match="does not carry its window"):
        ask({"bounds": np.ones(COARSE_BINS).tolist()})

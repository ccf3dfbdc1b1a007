"""Deployment pinned to simulation, for every registered algorithm, without a broker.

The coordinator's job runner and the agents' participants exchange real encoded envelopes in one
process (a real SQLite database underneath); the finished model must equal what the in-process
simulator computes with the same seed: the same sampling, the same client and server steps, the same
dual updates at the same moments. Broker tests (test_pca_job, test_recsys_job) cover the network."""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.store import AgentStore
from fedsentry.runs.loopback import Loopback, detector_participants
from models.detection.preprocessing import RECORD_DTYPE
from models.dictionary import FEDERATED as DICT
from models.dictionary.simulator import simulate_dictionary
from models.families import FAMILIES, family, job_spec
from models.mixture import FEDERATED as GMM
from models.mixture.simulator import simulate_mixture
from models.otmap import FEDERATED as OTMAP
from models.otmap.field import START, MappedDetector
from models.otmap.fleet import simulate_fleet_map, target
from models.otmap.icnn import transport
from models.otmap.messages import NO_START
from models.otmap.quantile import QuantileMap, histogram, quantile_map
from models.partition import partition
from models.pca import FEDERATED as PCA
from models.pca.detector import PCADetector
from models.pca.simulator import federated_threshold, prepare_clients, run_federated
from models.recsys import FEDERATED as RECSYS
from models.recsys.data import from_triples, split_users, train_test_split
from models.recsys.simulator import prepare_clients as prepare_ratings
from models.recsys.simulator import run_federated as run_recsys
from models.recsys.synthetic import generate_ratings
from models.synthetic import generate_traffic
from store.db import ModelVersion, Round, unpack
from wire.model import detector_from_envelope, stored_envelope
from wire.protocol import decode

N_PCA, N_RECSYS = 12, 5

# every registered algorithm, with its non-default branches (robust aggregators, quantised uploads, l1)
PCA_CASES = [("fedpe", {}), ("fedpg", {}), ("fedmm", {}), ("fedpg", {"aggregator": "median"}),
             ("fedpe", {"aggregator": "trimmed", "trim": 0.2}), ("fedmm", {"bits": 8}),
             ("fedmm", {"transport": False}), ("fedmm", {"aggregator": "capped"})]
GMM_CASES = [("fedem", {"components": 4, "reg": 1e-2, "hard_rounds": 2}),
             ("fedem", {"components": 3, "float32": False})]
DICT_CASES = [("fedmm-dl", {"atoms": 6}), ("fedmm-dl", {"atoms": 5, "bits": 8, "alpha": 0.2})]
#: (algorithm, its parameters, the job's start: None for the default, the quantile start)
OTMAP_CASES = [("fedmm-ot", {}, None), ("pseudo-mm", {}, None), ("fedadam", {"server_lr": 0.003}, None),
               ("fedmm-ot", {}, "moments")]
RECSYS_CASES = [("fedmc-admm", {}), ("fedmc-admm", {"regularizer": "l1"}), ("fedmavg", {}),
                ("altgdmin", {"power_iterations": 3})]


def test_every_registered_algorithm_is_covered():
    assert {a for a, _ in PCA_CASES} == set(PCA) and {a for a, _ in RECSYS_CASES} == set(RECSYS)
    assert {a for a, _ in GMM_CASES} == set(GMM) and {a for a, _ in DICT_CASES} == set(DICT)
    assert {a for a, _, _ in OTMAP_CASES} == set(OTMAP)
    assert set(FAMILIES) == {"pca", "gmm", "dict", "otmap", "recsys"}


@pytest.fixture(scope="module")
def traffic():
    data = generate_traffic(n_devices=12, records_per_device=200, seed=5)
    X = data.X_normal
    idx = partition(X, N_PCA, "noniid", np.random.default_rng(0))
    return data.feature_names, [X[i] for i in idx]


def pca_participants(tmp_path, features, parts, job_type: str = "pca", names: list[str] | None = None) -> list:
    """One participant per partition, each with its records in its training buffer (`names`: their ids)."""
    return detector_participants(tmp_path, job_type, features, parts, names=names)


@pytest.mark.parametrize(("algorithm", "params"), PCA_CASES, ids=[f"{a}{p or ''}" for a, p in PCA_CASES])
def test_pca_deployment_equals_simulation(tmp_path, traffic, algorithm, params):
    features, parts = traffic
    rounds, fraction = 8, 0.3
    participants = pca_participants(tmp_path, features, parts)
    settings = {"features": features, "rank": 3, "rounds": rounds, "fraction": fraction, "seed": 3,
                "algorithm_params": params}
    mv = Loopback(tmp_path, "pca", algorithm, settings, participants).run()

    clients = prepare_clients(parts, features)
    alg = job_spec("pca", {**settings, "algorithm": algorithm}).make_algorithm()
    sim = run_federated(alg, clients, rounds, fraction, seed=3)
    Z = unpack(mv.arrays)["Z"]
    np.testing.assert_allclose(Z, sim.Z, atol=1e-9)
    assert mv.info["threshold"] == pytest.approx(federated_threshold(clients, sim.Z, 0.99), rel=1e-9)


# kernel PCA through random Fourier features: the same algorithms on lifted features
RFF_CASES = [("fedmm", {}), ("fedmm", {"bits": 8}), ("fedpg", {})]


@pytest.mark.parametrize(("algorithm", "params"), RFF_CASES, ids=[f"{a}{p or ''}" for a, p in RFF_CASES])
def test_pca_kernel_deployment_equals_simulation(tmp_path, traffic, algorithm, params):
    features, parts = traffic
    rounds, fraction = 8, 0.3
    participants = pca_participants(tmp_path, features, parts)
    settings = {"features": features, "rank": 5, "rounds": rounds, "fraction": fraction, "seed": 3,
                "kernel": "rff", "kernel_features": 64, "algorithm_params": params}
    mv = Loopback(tmp_path, "pca", algorithm, settings, participants).run()

    spec = job_spec("pca", {**settings, "algorithm": algorithm})
    clients = prepare_clients(parts, features, lift=spec.lift())
    sim = run_federated(spec.make_algorithm(), clients, rounds, fraction, seed=3)
    Z = unpack(mv.arrays)["Z"]
    assert Z.shape == (64, 5)
    np.testing.assert_allclose(Z, sim.Z, atol=1e-9)
    assert mv.info["threshold"] == pytest.approx(federated_threshold(clients, sim.Z, 0.99), rel=1e-9)
    assert mv.info["rff"] == spec.lift().params()
    # the promoted model scores as the simulator's detector does
    det = detector_from_envelope(stored_envelope("loop", 1, unpack(mv.arrays), dict(mv.info)))
    X = np.vstack(parts)
    ref = PCADetector.from_model(sim.Z, clients.preprocessor, mv.info["threshold"], clients.lift)
    np.testing.assert_allclose(det.score_samples(X), ref.score_samples(X), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(("algorithm", "params"), GMM_CASES, ids=[f"{a}{p}" for a, p in GMM_CASES])
def test_mixture_deployment_equals_simulation(tmp_path, traffic, algorithm, params):
    features, parts = traffic
    rounds, fraction = 6, 0.3
    participants = pca_participants(tmp_path, features, parts, "gmm")
    settings = {"features": features, "rounds": rounds, "fraction": fraction, "seed": 3, "algorithm_params": params}
    mv = Loopback(tmp_path, "gmm", algorithm, settings, participants).run()

    X = np.vstack(parts)
    sim = simulate_mixture(parts, X, np.zeros(len(X)), features, algorithm, rounds, fraction, seed=3, params=params)
    stored = unpack(mv.arrays)
    m = sim["detector"].mixture_
    np.testing.assert_allclose(stored["weights"], m.weights, atol=1e-9)
    np.testing.assert_allclose(stored["means"], m.means, atol=1e-9)
    np.testing.assert_allclose(stored["prec_chol"], m.prec_chol, atol=1e-9)
    assert mv.info["detector"] == "gmm"
    assert mv.info["threshold"] == pytest.approx(sim["threshold"], rel=1e-9)
    assert (m.weights > 1e-3).sum() == params["components"]  # seeding placed every component on data


def assert_mixture_as_simulated(mv, parts, features, rounds, fraction, params) -> None:
    """The stored FedEM mixture and threshold are the simulator's (seed 3)."""
    X = np.vstack(parts)
    sim = simulate_mixture(parts, X, np.zeros(len(X)), features, "fedem", rounds, fraction, seed=3, params=params)
    stored, m = unpack(mv.arrays), sim["detector"].mixture_
    for name, want in (("weights", m.weights), ("means", m.means), ("prec_chol", m.prec_chol)):
        np.testing.assert_allclose(stored[name], want, atol=1e-9, err_msg=name)
    assert mv.info["threshold"] == pytest.approx(sim["threshold"], rel=1e-9)


def test_mixture_deployment_with_swaps_equals_simulation_and_its_stored_state_rebuilds(tmp_path, traffic):
    """Swaps (models.mixture.swaps) merge components in every device's row: the coordinator computes what the
    simulator does, and the rows it stores after such a round rebuild its state exactly."""
    from store.db import JobState

    features, parts = traffic
    rounds, fraction, params = 12, 0.5, {"components": 8, "reg": 1e-2}
    participants = pca_participants(tmp_path, features, parts, "gmm")
    settings = {"features": features, "rounds": rounds, "fraction": fraction, "seed": 3, "algorithm_params": params}
    loop = Loopback(tmp_path, "gmm", "fedem", settings, participants)
    mv = loop.run()
    assert int(loop.runner.server["swaps"]) >= 1  # the case this test is for happened

    assert_mixture_as_simulated(mv, parts, features, rounds, fraction, params)
    with loop.sessions() as s:
        rebuilt = loop.runner.load_server(s, unpack(s.get(JobState, "loop").server))
    for k, v in loop.runner.server.items():
        np.testing.assert_array_equal(rebuilt[k], v, err_msg=k)


@pytest.mark.parametrize(("algorithm", "params"), DICT_CASES, ids=[f"{a}{p}" for a, p in DICT_CASES])
def test_dictionary_deployment_equals_simulation(tmp_path, traffic, algorithm, params):
    features, parts = traffic
    rounds, fraction = 6, 0.3
    participants = pca_participants(tmp_path, features, parts, "dict")
    settings = {"features": features, "rounds": rounds, "fraction": fraction, "seed": 3, "algorithm_params": params}
    mv = Loopback(tmp_path, "dict", algorithm, settings, participants).run()

    X = np.vstack(parts)
    sim = simulate_dictionary(parts, X, np.r_[np.zeros(len(X) - 1), 1], features, algorithm, rounds, fraction,
                              seed=3, params=params)
    theta = unpack(mv.arrays)["theta"]
    assert mv.info["detector"] == "dict"
    np.testing.assert_allclose(theta, sim["detector"].components_, atol=1e-6)
    assert np.abs(theta).max() > 0.05  # a dictionary was learned, not left at zero
    assert mv.info["threshold"] == pytest.approx(sim["threshold"], rel=1e-6)
    # the promoted model scores as the simulator's detector does
    det = detector_from_envelope(stored_envelope("loop", 1, unpack(mv.arrays), dict(mv.info)))
    np.testing.assert_allclose(det.score_samples(X), sim["detector"].score_samples(X), rtol=1e-4, atol=1e-6)


#: small maps, few rounds: what the deployment computes, not how good the map is (benchmarks measure that)
OTMAP_SMALL = {"hidden": 8, "batch": 128, "server_steps": 3}


def drifted(parts: list[np.ndarray], features: list[str]) -> list[np.ndarray]:
    """The fleet after a monotone per-feature drift (issue 26, point 5): bytes x 1.5, durations x 1000."""
    scale = np.array([1000.0 if f == "duration" else 1.5 if "bytes" in f else 1.0 for f in features])
    return [P * scale for P in parts]


def promoted_gmm(tmp_path, features, parts):
    """Fleet A's gmm, trained and promoted (job fleet-a): the detector an otmap job maps onto."""
    gmm = Loopback(tmp_path, "gmm", "fedem", {"features": features, "rounds": 3, "fraction": 0.5, "seed": 3,
                                              "algorithm_params": {"components": 3}},
                   pca_participants(tmp_path / "a", features, parts, "gmm"), job="fleet-a").run()
    return detector_from_envelope(stored_envelope("fleet-a", 1, unpack(gmm.arrays), dict(gmm.info)))


@pytest.mark.parametrize(("algorithm", "params", "start"), OTMAP_CASES,
                         ids=[f"{a}{p}-{s or 'default'}" for a, p, s in OTMAP_CASES])
def test_transport_map_deployment_equals_simulation(tmp_path, traffic, algorithm, params, start):
    features, parts = traffic
    base = promoted_gmm(tmp_path, features, parts)
    moved = drifted(parts, features)
    rounds, fraction, seed, params = 4, 0.5, 7, {**OTMAP_SMALL, **params}
    settings = {"features": features, "rounds": rounds, "fraction": fraction, "seed": seed, "target_records": 512,
                "algorithm_params": params, **({} if start is None else {"start": start})}
    mv = Loopback(tmp_path, "otmap", algorithm, settings, pca_participants(tmp_path / "b", features, moved, "otmap"),
                  job="fleet-b").run()

    mapped, broadcast = simulate_fleet_map(base, moved, algorithm, rounds, fraction, seed, params, 512,
                                           start or "quantile")
    stored = unpack(mv.arrays)
    # the quantile start (the default) travels with the model; the others carry none
    assert (mapped.start is not None) == (start in (None, "quantile")) == any(k.startswith(START) for k in stored)
    np.testing.assert_allclose(stored["omega"], broadcast["omega"], atol=1e-6)
    assert np.abs(stored["omega"]).max() > 0.1  # a map, not zeros
    assert mv.info["detector"] == "otmap" and mv.promoted
    # the promoted model is the mixture with the map, and scores as the simulation's mapped detector does
    det = detector_from_envelope(stored_envelope("fleet-b", 1, stored, dict(mv.info)))
    assert isinstance(det, MappedDetector) and det.threshold_ == base.threshold_ \
        and (det.start is None) == (mapped.start is None)
    X = np.vstack(moved)
    np.testing.assert_allclose(det.score_samples(X), mapped.score_samples(X), rtol=1e-6, atol=1e-6)
    assert len(det.explain(X[:2])) == 2
    if det.start is not None:  # built from the devices' summed histograms onto Q, applied first at scoring
        pre = base.preprocessor_
        by_hand = quantile_map(np.sum([histogram(pre.transform(P).astype(RECORD_DTYPE)) for P in moved], axis=0),
                               target(base, 512, seed))
        np.testing.assert_allclose(det.start.lo, by_hand.lo)
        moved_by_hand = pre.inverse_transform(transport(det.layout, det.omega, by_hand(pre.transform(X))))
        np.testing.assert_allclose(det.score_samples(X), base.score_samples(moved_by_hand), rtol=1e-6, atol=1e-6)


def test_a_transport_map_upload_no_device_could_send_is_refused_with_its_reason(tmp_path, traffic):
    from models.core.messages import Upload
    from wire.messages import envelope
    from wire.protocol import ProtocolError

    features, parts = traffic
    Loopback(tmp_path, "gmm", "fedem", {"features": features, "rounds": 2, "fraction": 0.5, "seed": 3,
                                        "algorithm_params": {"components": 3}},
             pca_participants(tmp_path / "a", features, parts, "gmm"), job="fleet-a").run()
    loop = Loopback(tmp_path, "otmap", "fedmm-ot", {"features": features, "rounds": 2, "fraction": 0.5,
                                                    "target_records": 256, "algorithm_params": OTMAP_SMALL},
                    pca_participants(tmp_path / "b", features, drifted(parts, features), "otmap"), job="fleet-b")
    runner, bad = loop.runner, []
    honest_accept = runner.accept

    def accept(env):
        if env.kind == Upload.kind and "counts" in env.arrays and not bad:  # the first histogram, tampered twice
            c = env.arrays["counts"]
            for arrays, why in (({"counts": np.where(np.arange(c.shape[1]) == 5, c + 1, c)}, "sum"),
                                ({"counts": np.where(c > 0, c - 0.5, c)}, "whole")):
                tampered = envelope(Upload(arrays=arrays), env.job, env.round, env.sender)
                with pytest.raises(ProtocolError) as e:
                    honest_accept(decode(tampered.encode()))
                bad.append((why, str(e.value)))
        if env.kind == Upload.kind and "grad" in env.arrays and len(bad) == 2:  # the first training upload,
            # tampered three ways first
            g = env.arrays["grad"]
            for arrays, why in (({"grad": g[:-1]}, "shape"), ({"grad": np.where(np.arange(len(g)) == 3, np.nan, g)},
                                                             "finite"),
                                ({"grad": g / np.linalg.norm(g) * 1e7}, "exceeds")):
                tampered = envelope(Upload(arrays=arrays), env.job, env.round, env.sender)
                with pytest.raises(ProtocolError) as e:
                    honest_accept(decode(tampered.encode()))
                bad.append((why, str(e.value)))
        return honest_accept(env)

    runner.accept = accept
    mv = loop.run()
    assert [w for w, _ in bad] == ["sum", "whole", "shape", "finite", "exceeds"]
    for _, message in bad[:2]:
        assert "counts" in message and "whole, non-negative and sum to the" in message, message
    for why, message in bad[2:]:
        assert "grad" in message and why in message.replace("non-finite", "finite").lower(), message
    assert "the most this device's records" in bad[4][1]
    assert mv.info["detector"] == "otmap"  # the honest answer after the refusals went through


def _mapped_fleet(tmp_path, traffic, rounds: int, seed: int):
    """A promoted gmm (fleet A) and an otmap job for the drifted fleet B, not started: (base, moved, loop)."""
    features, parts = traffic
    base = promoted_gmm(tmp_path, features, parts)
    moved = drifted(parts, features)
    loop = Loopback(tmp_path, "otmap", "fedmm-ot", {"features": features, "rounds": rounds, "fraction": 0.5,
                                                    "seed": seed, "target_records": 512,
                                                    "algorithm_params": OTMAP_SMALL},
                    pca_participants(tmp_path / "b", features, moved, "otmap"), job="fleet-b")
    return base, moved, loop


def _restarted(p):
    """The participant as a restarted agent has it: a new object over the same folder (memory gone, disk kept)."""
    from edge_agent.detector_participant import TrainingBuffer

    p.buffer.save()
    store = AgentStore(p.store.folder)
    return type(p)(p.id, store, TrainingBuffer(store))


def _carries_start(env) -> bool:
    return any(k.startswith("init." + START) for k in env.arrays)


def test_the_start_map_travels_once_and_agents_restarted_mid_job_train_with_it(tmp_path, traffic):
    """Only the first training round carries the quantile start (in its init); the later ones name its digest and
    weigh no more than the map's arrays less; every agent restarted after that round (memory gone, its disk kept)
    trains with the map it kept: the job still equals the simulation."""
    rounds, seed = 4, 7
    base, moved, loop = _mapped_fleet(tmp_path, traffic, rounds, seed)
    loop.start()
    sent = []
    while True:
        env = decode(loop.outbox[-1])
        sent.append((env, len(loop.outbox[-1])))
        if env.meta["phase"] == "train" and env.round > sent[0][0].round + 2:  # after the first training round
            loop.participants = [_restarted(p) for p in loop.participants]
        if loop.step():
            break
    assert loop.runner.phase == "finished"
    train = [(env, size) for env, size in sent if env.meta["phase"] == "train"]
    assert len(train) == rounds and _carries_start(train[0][0])
    assert not any(_carries_start(env) or any(START in k for k in env.arrays) for env, _ in train[1:])
    assert not any(k.startswith("init.") for env, _ in sent if env.meta["phase"] != "train" for k in env.arrays)
    with loop.sessions() as s:
        stored = unpack(s.query(ModelVersion).filter_by(job_id="fleet-b").one().arrays)
    start = QuantileMap.from_arrays({k[len(START):]: v for k, v in stored.items() if k.startswith(START)})
    map_bytes = sum(a.nbytes for a in start.to_arrays().values())
    assert {env.meta["start"] for env, _ in train} == {start.digest()}
    assert all(size < train[0][1] - map_bytes for _, size in train[1:])

    _, broadcast = simulate_fleet_map(base, moved, "fedmm-ot", rounds, 0.5, seed, OTMAP_SMALL, 512)
    np.testing.assert_allclose(stored["omega"], broadcast["omega"], atol=1e-6)


def test_a_coordinator_resumed_mid_job_sends_the_start_map_once_and_equals_the_simulation(tmp_path, traffic):
    """The coordinator crashes during the first training round (the map's) and again during the third: the resumed
    first round carries the map (from the stored state), no later one does, and the job equals the simulation."""
    rounds, seed = 4, 7
    base, moved, loop = _mapped_fleet(tmp_path, traffic, rounds, seed)
    loop.start()
    train, crashed = [], set()
    while True:
        env = decode(loop.outbox[-1])
        if env.meta["phase"] == "train" and len(train) in (0, 3) and len(train) not in crashed:
            crashed.add(len(train))
            loop.crash()  # the round's message went out; no answer reached the coordinator
            continue
        if env.meta["phase"] == "train":
            train.append(_carries_start(env))
        if loop.step():
            break
    assert loop.runner.phase == "finished" and crashed == {0, 3}
    assert train == [True] + [False] * (rounds - 1)
    with loop.sessions() as s:
        stored = unpack(s.query(ModelVersion).filter_by(job_id="fleet-b").one().arrays)
    _, broadcast = simulate_fleet_map(base, moved, "fedmm-ot", rounds, 0.5, seed, OTMAP_SMALL, 512)
    np.testing.assert_allclose(stored["omega"], broadcast["omega"], atol=1e-6)


def test_an_agent_that_missed_the_start_map_declines_and_the_next_round_carries_it_again(tmp_path, traffic):
    """A device offline while the map travelled (its store lost, then back) is asked to train: it declines with
    NO_START, saying which map; the next round carries the map again, and the device trains with it."""
    from models.core.messages import Decline
    from wire.messages import envelope

    _, _, loop = _mapped_fleet(tmp_path, traffic, 6, 7)
    loop.start()
    declines, carried, late = [], [], loop.participants[0]
    while True:
        env = decode(loop.outbox[-1])
        if env.meta["phase"] == "train":
            carried.append(_carries_start(env))
        if env.meta["phase"] == "train" and len(carried) == 1:  # the device is offline and loses its store
            (late.store.folder / "start-fleet-b.npz").unlink(missing_ok=True)
            loop.participants = loop.participants[1:]
        elif env.meta["phase"] == "train" and late not in loop.participants:
            loop.participants = [late, *loop.participants]
        for p in loop.participants:
            try:
                reply = p.on_round(decode(loop.outbox[-1]))
            except ValueError as e:  # what the agent sends (edge_agent.agent)
                reply = envelope(Decline(reason=str(e)[:300]), env.job, env.round, p.id)
                declines.append((env.round, str(e)))
            if reply is not None:
                loop.runner.accept(decode(reply.encode()))
        loop.outbox.pop()
        if late not in loop.participants:
            loop.runner.deadline = 0.0  # the device is offline: the round closes without it
        if loop.runner.tick():
            break
    assert loop.runner.phase == "finished"
    assert declines and all(NO_START in why and "never received" in why for _, why in declines)
    first_decline = declines[0][0]
    with loop.sessions() as s:
        rows = {r.round: r for r in s.query(Round).filter_by(job_id="fleet-b")}
    assert rows[first_decline].metrics["declined"][late.id].startswith(NO_START)
    train_start = min(r for r, row in rows.items() if row.phase == "train")
    assert carried[0] and carried[first_decline + 1 - train_start]
    later = [r for r in rows if r > first_decline + 1 and late.id in rows[r].answered]
    assert later or late.id in rows[first_decline + 1].answered  # it trained with the map sent again


def _shard(r, users):
    mine = np.isin(r.user, users)
    return from_triples(r.user_ids[r.user[mine]], r.item_ids[r.item[mine]], r.rating[mine], r.rating_min,
                        r.rating_max)


@pytest.mark.parametrize(("algorithm", "params"), RECSYS_CASES, ids=[f"{a}{p or ''}" for a, p in RECSYS_CASES])
def test_recsys_deployment_equals_simulation(tmp_path, algorithm, params):
    data = generate_ratings(n_users=90, n_items=60, seed=4)
    train, test = train_test_split(data, 0.2, seed=0)
    parts = split_users(train.n_users, N_RECSYS, "random", np.random.default_rng(0))
    participants = [family("recsys").load_participant()(f"rs-{i}", AgentStore(tmp_path / f"rs-{i}"),
                                                        _shard(train, users), _shard(test, users))
                    for i, users in enumerate(parts)]
    rounds, fraction = 6, 0.4
    settings = {"items": train.item_ids.tolist(), "rank": 3, "rounds": rounds, "fraction": fraction, "seed": 1,
                "algorithm_params": params}
    mv = Loopback(tmp_path, "recsys", algorithm, settings, participants).run()

    alg = job_spec("recsys", {**settings, "algorithm": algorithm}).make_algorithm()
    sim = run_recsys(alg, prepare_ratings(train, parts), test, rounds, fraction, seed=1)
    np.testing.assert_allclose(unpack(mv.arrays)["item_factors"], sim.item_factors, atol=1e-9)
    assert mv.info["test_rmse"] == pytest.approx(sim.history[-1]["test_rmse"], rel=1e-9)


def test_the_stored_server_state_rebuilds_exactly_and_rounds_write_only_changed_chunks(tmp_path, traffic):
    from store.db import JobState, ServerChunk
    from store.row_tables import dirty_chunks

    features, parts = traffic
    participants = pca_participants(tmp_path, features, parts)
    loop = Loopback(tmp_path, "pca", "fedmm", {"features": features, "rank": 3, "rounds": 5, "fraction": 0.25},
                    participants)
    loop.run()
    runner = loop.runner
    with loop.sessions() as s:
        st = s.get(JobState, "loop")
        rebuilt = runner.load_server(s, unpack(st.server))
        assert s.query(ServerChunk).filter_by(job_id="loop").count() > 0
    assert set(rebuilt) == set(runner.server)
    for k, v in runner.server.items():
        np.testing.assert_array_equal(rebuilt[k], v, err_msg=k)
    # a round that changed 3 rows of a million-row table writes at most 3 chunks of it, not the table
    table = np.zeros((1_000_000, 20, 9))
    assert len(dirty_chunks(table, np.array([5, 400_000, 999_999]))) == 3
    assert sum(len(b) for _, b in dirty_chunks(table, np.array([5, 6]))) <= 1 << 13
    assert len(dirty_chunks(np.zeros(1000), None)) == 1


# -- above the switch (models.core.sampling.LIST_MAX): rounds draw by salted hash and list nobody -------------------

@pytest.fixture
def drawn(monkeypatch):
    """A switch below the fleet of these tests (the constant the coordinator and the simulator both read): every
    round of a 12-device job is drawn, as a fleet of more than 1,000 devices' would be."""
    from models.core import sampling

    monkeypatch.setattr(sampling, "LIST_MAX", 5)
    return sampling


def _drawn_loopback(tmp_path, job_type, algorithm, settings, parts, features):
    from models.core.sampling import fleet_names

    loop = Loopback(tmp_path, job_type, algorithm, settings,
                    pca_participants(tmp_path, features, parts, job_type, fleet_names(len(parts))))
    sent = []
    honest = loop.runner.publish
    loop.runner.publish = lambda topic, payload, retain: (sent.append(decode(payload)), honest(topic, payload, retain))
    return loop, sent


@pytest.mark.parametrize("algorithm", ["fedpg", "fedmm"])  # fedpg's client step weighs by the device's weight
def test_a_drawn_pca_job_lists_nobody_and_equals_simulation(tmp_path, traffic, drawn, algorithm):
    from store.db import Round
    from store.round_record import answered_count, answers, asked_count

    features, parts = traffic
    rounds, fraction = 8, 0.3
    settings = {"features": features, "rank": 3, "rounds": rounds, "fraction": fraction, "seed": 3,
                "algorithm_params": {}}
    loop, sent = _drawn_loopback(tmp_path, "pca", algorithm, settings, parts, features)
    mv = loop.run()
    # every round named its devices by a draw; training rounds carry the job's weight caps, not each device's weight
    assert sent and all(env.meta["sampled"] == [] and "bound" in env.meta for env in sent)
    assert all("weights" not in env.arrays and "cap_level" in env.meta for env in sent if env.meta["phase"] == "train")
    clients = prepare_clients(parts, features)
    sim = run_federated(job_spec("pca", {**settings, "algorithm": algorithm}).make_algorithm(), clients, rounds,
                        fraction, seed=3)
    np.testing.assert_allclose(unpack(mv.arrays)["Z"], sim.Z, atol=1e-9)
    assert mv.info["threshold"] == pytest.approx(federated_threshold(clients, sim.Z, 0.99), rel=1e-9)
    # the stored rounds hold the draw and counts, and still say truthfully who answered what
    with loop.sessions() as s:
        rows = s.query(Round).filter_by(job_id="loop").order_by(Round.round).all()
    assert [asked_count(r) for r in rows] == [12] + [4] * rounds + [12]
    assert all(isinstance(r.sampled, dict) and answered_count(r) == asked_count(r) for r in rows)
    names = [p.id for p in loop.participants]
    truth = {n: sum(1 for env in sent if drawn.Draw(env.meta["salt"], env.meta["bound"]).asks(n)) for n in names}
    assert answers(rows, names) == truth and sum(truth.values()) == 12 * 2 + 4 * rounds


def test_a_drawn_mixture_job_equals_simulation(tmp_path, traffic, drawn):
    features, parts = traffic
    rounds, fraction, params = 6, 0.3, {"components": 4, "reg": 1e-2, "hard_rounds": 2}
    settings = {"features": features, "rounds": rounds, "fraction": fraction, "seed": 3, "algorithm_params": params}
    loop, sent = _drawn_loopback(tmp_path, "gmm", "fedem", settings, parts, features)
    mv = loop.run()
    assert all(env.meta["sampled"] == [] for env in sent)
    assert_mixture_as_simulated(mv, parts, features, rounds, fraction, params)


def test_a_device_outside_the_job_that_hashes_under_the_bound_is_refused_and_changes_nothing(tmp_path, traffic,
                                                                                              drawn):
    from models.core.messages import Upload
    from wire.messages import envelope
    from wire.protocol import ProtocolError

    features, parts = traffic
    settings = {"features": features, "rank": 3, "rounds": 2, "fraction": 0.3, "seed": 3, "algorithm_params": {}}
    loop, sent = _drawn_loopback(tmp_path, "pca", "fedmm", settings, parts, features)
    runner, tried = loop.runner, []
    honest_accept = runner.accept

    def accept(env):
        if env.kind == Upload.kind and not tried:  # the first training round: a stranger under the bound answers
            draw = drawn.Draw(sent[-1].meta["salt"], sent[-1].meta["bound"])
            stranger = next(f"outsider-{i}" for i in range(100_000) if draw.asks(f"outsider-{i}"))
            before = dict(runner.pending)
            with pytest.raises(ProtocolError) as e:
                honest_accept(decode(envelope(Upload(arrays=env.arrays), env.job, env.round, stranger).encode()))
            tried.append(e.value.reason)
            assert runner.pending == before and stranger not in runner.refused
        return honest_accept(env)

    runner.accept = accept
    loop.run()
    assert tried == ["not_sampled"]


#: a family's algorithm and its settings, each (the PCA ones weigh devices differently)
GROWTH_CASES = {"fedmm": ("pca", {"rank": 3}), "fedpg": ("pca", {"rank": 3}),
                "fedem": ("gmm", {"algorithm_params": {"components": 3}}),
                "fedmm-dl": ("dict", {"algorithm_params": {"atoms": 4}})}


@pytest.mark.parametrize("algorithm", list(GROWTH_CASES))
def test_no_field_of_a_drawn_round_message_grows_with_the_fleet(tmp_path, drawn, algorithm):
    """Every phase's round message of a 12-device and a 36-device fleet, each above the (lowered) switch: the same
    size but for a few digits of the job's numbers (a per-device field would add bytes for each device)."""
    data = generate_traffic(n_devices=12, records_per_device=200, seed=5)
    job_type, settings = GROWTH_CASES[algorithm]

    def largest(n: int) -> dict[str, int]:
        parts = [data.X_normal[i] for i in partition(data.X_normal, n, "noniid", np.random.default_rng(0))]
        loop, sent = _drawn_loopback(tmp_path / str(n), job_type, algorithm, {
            "features": data.feature_names, "rounds": 3, "fraction": 0.3, "seed": 3, **settings}, parts,
            data.feature_names)
        loop.run()
        out: dict[str, int] = {}
        for env in sent:
            out[env.meta["phase"]] = max(out.get(env.meta["phase"], 0), len(env.encode()))
        return out

    small, large = largest(12), largest(36)
    assert set(small) == set(large) and all(abs(large[p] - small[p]) <= 32 for p in small), (small, large)

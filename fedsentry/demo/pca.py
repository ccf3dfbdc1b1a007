"""`fedsentry demo`: a broker, the coordinator, and N agent processes on this machine, end to end.

Anomaly detection (`--detector gmm`, the default, `pca` or `dict`): each agent gets one partition of the training
records (exactly the partition `simulate` would give client i with the same settings) and a share of the test
traffic. The job trains, its model is promoted, and the agents replay their test traffic and publish alerts.
For evaluation only, agents also write the score of every replayed record, so AUC is computed over all
records; labels never reach the model. `--job recsys`: see fedsentry.demo.recsys.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from fedsentry.demo.stack import Stack, keep_serving, write_csv
from fedsentry.errors import UsageError
from wire.mqtt import redact_url


def demo(args: argparse.Namespace) -> dict[str, Any]:
    if args.job == "recsys":
        from fedsentry.demo.recsys import demo_recsys

        return demo_recsys(args)
    from sqlalchemy import func

    from fedsentry.runs.detection import algorithm_params, prepare
    from fedsentry.runs.params import flag_params
    from models.detection.metrics import auc_roc
    from models.families import family
    from models.mixture.simulator import devices_seeing
    from store.db import Alert, ModelVersion, unpack

    args.clients = args.agents
    if getattr(args, "adversaries", 0) and (args.attack or "compliant") != "compliant":
        raise UsageError(f"--attack {args.attack}: the demo runs the unchanged agent program, so only compliant "
                         "rogues (agents whose training traffic holds attacks) apply; the other attacks forge "
                         "uploads: measure them with `fedsentry simulate pca` or `fedsentry bench robustness`")
    data, split, parts = prepare(args)
    # each agent replays the test traffic a device like it sees: normal records like its own, attacks at random
    # (with --adversaries K: to the honest agents; the rogues keep their own attacks normal by construction)
    seen_by = devices_seeing(parts, split.X_test, split.y_test, args.seed,
                             first_honest=getattr(args, "adversaries", 0))
    test_parts = [np.flatnonzero(seen_by == i) for i in range(args.agents)]
    label = f"{args.agents} agents, {args.algorithm}, {args.rounds} rounds on {data.name}"
    with Stack(args.broker, args.db, label, args.agents, args.host, args.port,
               keep_work=args.keep_work or args.keep_serving) as st:
        for i in range(args.agents):
            write_csv(st.tmp / f"train-{i}.csv", data.feature_names, (map(repr, r) for r in parts[i].tolist()))
            idx = test_parts[i]
            write_csv(st.tmp / f"test-{i}.csv", [*data.feature_names, "label"],
                      ([*map(repr, r), int(y)] for r, y in zip(split.X_test[idx].tolist(), split.y_test[idx])))
            st.agent(i, "--train", str(st.tmp / f"train-{i}.csv"), "--csv", str(st.tmp / f"test-{i}.csv"),
                     "--label-column", "label", "--model-job", st.job_id, "--wait-for-model", "--exit-after-replay",
                     "--scores-out", str(st.tmp / f"scores-{i}.csv"))
        job_type = args.detector
        given = {s.name: getattr(args, s.name, None) for s in family(job_type).spec.simulated()}  # the family's flags
        params = {**{k: v for k, v in given.items() if v is not None and k != "algorithm"},
                  "features": data.feature_names, "min_agents": args.agents, "deadline": 30.0,
                  "algorithm_params": flag_params(family(job_type).algorithms[args.algorithm], algorithm_params(args),
                                                  args.algorithm)}
        seconds = st.run_job(job_type, args.algorithm, params, args.rounds)
        print(f"fedsentry demo: model promoted; agents replay {len(split.X_test)} test records", file=sys.stderr)
        st.wait_agents()
        rounds = st.round_seconds()
        with st.coordinator.sessions() as s:
            alerts = s.query(Alert).filter_by(job_id=st.job_id).count()
            counted = int(s.query(func.coalesce(func.sum(Alert.count), 0)).filter(Alert.job_id == st.job_id).scalar())
            mv = s.query(ModelVersion).filter_by(job_id=st.job_id).one()
            arrays, threshold = unpack(mv.arrays), mv.info["threshold"]
        scores = np.vstack([np.loadtxt(st.tmp / f"scores-{i}.csv", delimiter=",", ndmin=2)
                            for i in range(args.agents)])
        flagged = scores[:, 0] > scores[:, 2]  # each agent at its own threshold
        result = {
            "job": st.job_id, "dataset": data.name, "algorithm": args.algorithm, "agents": args.agents,
            "rounds_completed": len(rounds), "alerts_stored": alerts, "flagged_records_counted": counted,
            "records_flagged": int(flagged.sum()), "records_scored": len(scores),
            "recall": float(flagged[scores[:, 1] == 1].mean()),
            "false_positive_rate": float(flagged[scores[:, 1] == 0].mean()),
            "auc_roc": auc_roc(scores[:, 1], scores[:, 0]),
            **simulation_gap(args, data, split, parts, arrays, test_parts),
            "threshold": threshold, "seconds_per_round": float(np.mean(rounds)) if rounds else None,
            "median_round_seconds": float(np.median(rounds)) if rounds else None, "training_seconds": seconds,
            "rejected": dict(st.coordinator.rejected), "broker": redact_url(st.broker_url or ""),
            "work_folder": str(st.tmp) if st.keep_work else None,
            "dashboard": st.dashboard,
        }
        print(f"fedsentry demo: {job_type}, {result['rounds_completed']} rounds, {result['records_flagged']} records "
              f"flagged, {counted} counted in {alerts} alerts and incident updates; {result['recall']:.1%} of the "
              f"attacks caught at {result['false_positive_rate']:.2%} false positives (AUC {result['auc_roc']:.4f}); "
              f"{result['gap']}", file=sys.stderr)
        if args.keep_serving:  # the replay agents have exited: the same devices again, online until Ctrl-C
            for i in range(args.agents):
                st.agent(i, "--train", str(st.tmp / f"train-{i}.csv"))
            st.wait_online(job_type)
            print(f"fedsentry demo: {args.agents} agents online for new {job_type} jobs (fedsentry job create "
                  f"--type {job_type} ...)", file=sys.stderr)
        keep_serving(args)
        return result


def simulation_gap(args: argparse.Namespace, data, split, parts: list[np.ndarray],
                   arrays: dict[str, np.ndarray], test_parts: list[np.ndarray]) -> dict[str, Any]:
    """How far the deployed model is from what `simulate` computes with the same settings (pca: subspace
    distance to centralised PCA, as simulate reports it; gmm: the largest difference of the mixtures' means and
    the AUC simulate reaches; dict: the largest difference of the dictionaries and simulate's AUC)."""
    if "Z" in arrays and len(arrays["Z"]) != len(data.feature_names):  # a subspace of lifted features (kernel PCA)
        return {"subspace_distance": None, "gap": "kernel PCA: no centralised subspace of the features to compare"}
    if "Z" in arrays:  # a subspace of the features (PCA)
        from models.core.linalg import subspace_distance
        from models.pca.baselines import centralized_pca
        from models.pca.simulator import prepare_clients

        clients = prepare_clients(parts, data.feature_names)
        sd = subspace_distance(arrays["Z"], centralized_pca(clients.C, clients.weight, args.rank))
        return {"subspace_distance": sd, "gap": f"subspace distance to centralised PCA {sd:.4f}"}
    from fedsentry.runs.detection import algorithm_params

    chosen = {k: v for k, v in algorithm_params(args).items() if v is not None}
    if "theta" in arrays:  # a dictionary
        from models.dictionary.simulator import simulate_dictionary

        sim = simulate_dictionary(parts, split.X_test, split.y_test, data.feature_names, args.algorithm, args.rounds,
                                  args.fraction, args.quantile or 0.99, args.seed, chosen)
        diff = float(np.abs(sim["detector"].components_ - arrays["theta"]).max())
        return {"simulate_auc_roc": sim["auc_roc"], "simulate_recall": sim["recall"], "dictionary_difference": diff,
                "gap": f"simulate: AUC {sim['auc_roc']:.4f}, dictionary within {diff:.1e}"}
    from models.mixture.simulator import simulate_mixture
    from models.mixture.spec import MixtureJobSpec

    seen_by = np.empty(len(split.X_test), dtype=int)  # the agent that replays each test record
    for i, idx in enumerate(test_parts):
        seen_by[idx] = i
    sim = simulate_mixture(parts, split.X_test, split.y_test, data.feature_names, args.algorithm, args.rounds,
                           args.fraction, args.quantile or MixtureJobSpec.quantile, args.seed,
                           chosen, args.holdout, test_devices=seen_by)
    diff = float(np.abs(sim["detector"].mixture_.means - arrays["means"]).max())
    return {"simulate_auc_roc": sim["auc_roc"], "simulate_recall": sim["recall"], "mixture_mean_difference": diff,
            "gap": f"simulate: AUC {sim['auc_roc']:.4f}, mixture means within {diff:.1e}"}


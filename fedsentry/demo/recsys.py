"""`fedsentry demo --job recsys`: a recommendation job across agent processes, each holding the ratings
of its own users (the same groups of users `simulate recsys` gives client i with the same settings) and
their held-out ratings. Every agent reports the squared error and count of its held-out ratings; the
coordinator pools them into the test RMSE."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from fedsentry.demo.stack import Stack, keep_serving, write_csv
from wire.mqtt import redact_url


def demo_recsys(args: argparse.Namespace) -> dict[str, Any]:
    from fedsentry.runs.params import flag_params, simulated_params
    from fedsentry.runs.recsys import FAMILY, prepare
    from models.recsys import FEDERATED
    from store.db import ModelVersion

    algorithm = args.algorithm
    args.clients = args.agents
    for name, default in (("test_share", 0.2), ("client_split", "random"), ("rating_min", 0.5),
                          ("rating_max", 5.0), ("ratings", None)):
        if not hasattr(args, name):
            setattr(args, name, default)
    prep = prepare(args, [args.rank])
    train, test = prep.train, prep.test
    label = f"{args.agents} agents, {algorithm}, {args.rounds} rounds of recommendation on {prep.ratings.name}"
    with Stack(args.broker, args.db, label, args.agents, args.host, args.port,
               keep_work=args.keep_work or args.keep_serving) as st:
        for i, users in enumerate(prep.parts):
            for part, r in (("train", train), ("test", test)):
                mine = np.isin(r.user, users)
                write_csv(st.tmp / f"{part}-{i}.csv", ["userId", "itemId", "rating"],
                          zip(r.user_ids[r.user[mine]].tolist(), r.item_ids[r.item[mine]].tolist(),
                              r.rating[mine].tolist()))
            st.agent(i, "--ratings", str(st.tmp / f"train-{i}.csv"), "--test-ratings", str(st.tmp / f"test-{i}.csv"),
                     "--item-col", "itemId", "--rating-min", str(train.rating_min), "--rating-max",
                     str(train.rating_max))
        params = {"items": train.item_ids.tolist(), "rank": args.rank, "rounds": args.rounds,
                  "fraction": args.fraction, "seed": args.seed, "min_agents": args.agents, "deadline": 60.0,
                  "rating_min": train.rating_min, "rating_max": train.rating_max,
                  "algorithm_params": flag_params(FEDERATED[algorithm], simulated_params(args, FAMILY), algorithm)}
        seconds = st.run_job("recsys", algorithm, params, args.rounds)
        rounds = st.round_seconds()
        with st.coordinator.sessions() as s:
            mv = s.query(ModelVersion).filter_by(job_id=st.job_id).one()
            test_rmse = mv.info["test_rmse"]
        result = {"job": st.job_id, "dataset": prep.ratings.name, "algorithm": algorithm, "agents": args.agents,
                  "rank": args.rank, "rounds_completed": len(rounds), "test_rmse": test_rmse,
                  "test_ratings": len(test), "seconds_per_round": float(np.mean(rounds)) if rounds else None,
                  "median_round_seconds": float(np.median(rounds)) if rounds else None, "training_seconds": seconds,
                  "rejected": dict(st.coordinator.rejected), "broker": redact_url(st.broker_url or ""),
                  "work_folder": str(st.tmp) if st.keep_work else None,
                  "dashboard": st.dashboard}
        print(f"fedsentry demo: {len(rounds)} rounds, test RMSE {test_rmse:.4f}", file=sys.stderr)
        keep_serving(args)
        return result

"""The coordinator's time for one private round over the network (issue 23, point 5): one secure sum's four steps
(advertise, share, upload, unmask) run by the coordinator's own code (coordinator.secure_sums on the job runner:
every reply decoded from its envelope, read, validated, the step closed, the state saved to a SQLite database after
each step, the round messages and each device's routed shares encoded), at N devices per round, with a third of
them leaving after their masked upload (their masks rebuilt: the costly case). The devices' side runs in the same
process (models.private.relay.Member) and is timed apart; the network is not in the figure.

    nice -n 10 python benchmarks/private_round.py --devices 100 1000 --values 35328 \
        --json benchmarks/results/private-round.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

import numpy as np

from coordinator.secure_sums import SecureSums, step_of
from models.core.messages import RoundMessage
from models.families import job_spec
from models.private.messages import Routed
from models.private.relay import STEPS, Announced, Member
from store.db import Job, make_engine, migrate, session_factory
from store.jobs import create_job
from wire.messages import envelope, read
from wire.protocol import decode


class OneSum(SecureSums):
    """A job runner that runs one secure sum of `length` values over its participants, then finishes."""

    type = "gmm"
    length = 0

    def announce(self, name: str, rnd: int, members: list[str]) -> Announced:
        return Announced(f"bench/{name}/{rnd}", tuple(members), {"x": (self.length,)}, {"x": 1.0}, 1.0, 48, rnd)

    def summed(self, name: str, total: dict[str, np.ndarray], members: list[str]) -> dict[str, Any]:
        self.total = total["x"][0]
        return {}

    def algorithm(self) -> Any:
        from models.mixture.summed import SummedFedEM

        return SummedFedEM(2)  # no row tables: the state saved is the sum's

    def content(self, phase: str, header: dict[str, Any]) -> RoundMessage:
        return RoundMessage(**header, **self.secure_fields(phase))

    def validate(self, msg: Any, sender: str) -> None:
        self.validate_step(msg, sender)

    def close(self, answered: list[str]) -> dict[str, Any]:
        return self.close_step(answered)

    def phase_table(self) -> list:
        return []

    def follow(self) -> None:
        at = step_of(self.phase)
        if at is None or at[1] == STEPS[-1]:
            self.finish()
        else:
            phase = f"sum:{STEPS[STEPS.index(at[1]) + 1]}"
            self.begin(phase, self.round + 1, self.asked(phase))


def measure(devices: int, length: int, leave: float, seed: int = 0) -> dict[str, Any]:
    tmp = tempfile.mkdtemp()
    engine = make_engine(f"sqlite:///{tmp}/bench.db")
    migrate(engine)
    sessions = session_factory(engine)
    create_job(sessions, "bench", job_spec("gmm", {"features": ["a", "b"], "algorithm": "fedem"}))
    with sessions() as s:
        row = s.get(Job, "bench")
    outbox: list[tuple[str, bytes]] = []
    runner = OneSum(row, sessions, lambda t, p, r: outbox.append((t, p)), "fedsentry/v1/jobs/bench/round")
    runner.length = length
    names = [f"dev-{i:04d}" for i in range(devices)]
    runner.participants = names
    rng = np.random.default_rng(seed)
    values = {n: rng.uniform(-1.0, 1.0, size=length) for n in names}  # within the clip (1)
    leavers = set(rng.choice(names, int(leave * devices), replace=False).tolist())
    members: dict[str, Member] = {}
    coordinator = {"wall_s": {}, "cpu_s": {}}
    device_cpu = 0.0
    bytes_published = {}

    def timed(step: str, fn: Any) -> None:
        t, c = time.perf_counter(), time.process_time()
        fn()
        coordinator["wall_s"][step] = coordinator["wall_s"].get(step, 0.0) + time.perf_counter() - t
        coordinator["cpu_s"][step] = coordinator["cpu_s"].get(step, 0.0) + time.process_time() - c

    outbox.clear()
    timed("advertise", lambda: runner.begin("sum:advertise", 1, names))
    for step in STEPS:
        published = list(outbox)
        outbox.clear()
        bytes_published[step] = sum(len(p) for _, p in published)
        round_msg = read(RoundMessage, decode(published[0][1]))
        routed = {t.split("/")[-2]: read(Routed, decode(p)) for t, p in published[1:] if p}
        replies = []
        c = time.process_time()
        for n in round_msg.sampled:
            if step == "unmask" and n in leavers:
                continue
            arrays = round_msg.secagg_arrays
            if step == "advertise":
                members[n], msg = Member.advertise(Announced.from_meta(round_msg.secagg), n, {"x": values[n]})
            elif step == "share":
                msg = members[n].share(arrays["ids"], arrays["keys"])
            elif step == "upload":
                msg = members[n].upload(routed[n])
            else:
                msg = members[n].unmask(arrays["survivors"], arrays["dropped"])
            replies.append(envelope(msg, "bench", runner.round, n).encode())
        device_cpu += time.process_time() - c

        def accept_all(replies: list[bytes] = replies) -> None:
            for payload in replies:
                runner.accept(decode(payload))
            runner.deadline = 0.0  # the leavers do not answer: the step closes at its deadline
            runner.tick()

        timed(step, accept_all)
    assert runner.phase == "finished", runner.phase
    exact = sum(values[n] for n in names)
    coordinator["wall_s"]["total"] = sum(coordinator["wall_s"].values())
    coordinator["cpu_s"]["total"] = sum(coordinator["cpu_s"].values())
    return {"devices": devices, "values": length, "left_after_upload": len(leavers),
            "coordinator": coordinator, "device_cpu_s_mean": device_cpu / devices,
            "published_bytes": bytes_published, "max_abs_error": float(np.abs(runner.total - exact).max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--values", type=int, default=35_328, help="values per upload (a gmm upload's size)")
    parser.add_argument("--leave", type=float, default=1 / 3, help="share of the devices leaving after upload")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    rows = []
    for n in args.devices:
        r = measure(n, args.values, args.leave)
        rows.append(r)
        w, c = r["coordinator"]["wall_s"], r["coordinator"]["cpu_s"]
        print(f"{n} devices, {r['left_after_upload']} leaving after upload: coordinator {w['total']:.1f} s wall "
              f"({c['total']:.1f} s CPU); per step (wall s) " +
              ", ".join(f"{s} {w[s]:.2f}" for s in STEPS) + f"; device CPU {r['device_cpu_s_mean']:.3f} s; "
              f"max error {r['max_abs_error']:.1e}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": "python benchmarks/private_round.py " + " ".join(
                f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in vars(args).items()
                if v is not None and k != "json"), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()

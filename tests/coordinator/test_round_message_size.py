"""Issue 27, point 5: a round message does not grow with the fleet. The real coordinator builds a training round of
10^6 participants with 10 % sampled (after a real statistics phase of 12 devices, its roster then widened to a
million): the message is at most 64 KB, it asks exactly 100,000 of them, and each device's own test on the message
as read off the wire picks the very devices the coordinator will accept answers from."""

from __future__ import annotations

import json
import time

import numpy as np

from models.core.messages import RoundMessage
from models.core.sampling import fleet_names
from store.round_record import round_row
from tests.integration.test_loopback import Loopback, pca_participants
from wire.messages import read
from wire.protocol import decode

FLEET, FRACTION = 10**6, 0.1


def test_a_round_of_a_million_participants_fits_64_kb_and_devices_agree_with_the_coordinator(tmp_path):
    from models.synthetic import generate_traffic

    data = generate_traffic(n_devices=12, records_per_device=100, seed=5)
    parts = np.array_split(data.X_normal, 12)
    loop = Loopback(tmp_path, "pca", "fedmm", {"features": data.feature_names, "rank": 3, "rounds": 3,
                                               "fraction": FRACTION, "seed": 3},
                    pca_participants(tmp_path, data.feature_names, parts))
    runner = loop.runner
    runner.start(sorted(p.id for p in loop.participants))
    stats = decode(loop.outbox.pop())
    for p in loop.participants:
        runner.accept(decode(p.on_round(stats).encode()))
    runner.tick()  # the statistics phase closes; the first training round (12 devices: listed) opens
    assert runner.phase == "train" and runner.draw is None

    runner.participants = fleet_names(FLEET)
    runner.counts = np.resize(np.array(runner.counts), FLEET).tolist()
    t0 = time.perf_counter()
    runner.sample("train", 2)
    seconds = time.perf_counter() - t0
    size = len(runner.message)
    print(f"round message at {FLEET:,} participants, {FRACTION:.0%} sampled: {size:,} bytes; sampled in "
          f"{seconds:.2f} s")
    assert size <= 64 * 1024
    assert len(runner.sampled) == FRACTION * FLEET

    msg = read(RoundMessage, decode(runner.message))  # what every agent reads
    assert msg.sampled == [] and msg.draw() is not None
    asked = [n for n in runner.participants if msg.asks(n)]  # each device's own test
    assert asked == runner.sampled

    # the round's stored record holds the draw and counts, not the lists
    row = round_row("loop", 2, "train", runner.sampled, runner.sampled[:-3], runner.draw, {}, 0.0)
    assert len(json.dumps(row.sampled)) < 100 and json.dumps(row.answered).count("demo-agent") == 3

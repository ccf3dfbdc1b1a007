"""What a device can do is stored in `devices` (issue 27, point 2: "capabilities go into devices"): a coordinator that
never heard a device's status (a standby driver, one on another broker node, a restarted process) reads the job
types, abilities and features it declared there, and a device whose program changed is judged by its newest
status."""

from __future__ import annotations

from coordinator.service import Coordinator
from store.db import Device
from wire.protocol import ABILITIES, Envelope, agent_topic


def status(agent: str, **meta) -> bytes:
    return Envelope("status", "", 0, agent, {}, {"online": True, **meta}).encode()


def test_a_coordinator_that_heard_no_status_knows_what_each_device_can_do(tmp_path):
    db = f"sqlite:///{tmp_path}/c.db"
    heard = Coordinator("mqtt://127.0.0.1:9", db, client_id="heard")  # never started: statuses handed to it
    other = Coordinator("mqtt://127.0.0.1:9", db, client_id="other")
    try:
        heard.handle(agent_topic("a-1", "status"), status("a-1", jobs=["gmm"], abilities=list(ABILITIES),
                                                          features=["bytes", "dur"]))
        heard.handle(agent_topic("a-2", "status"), status("a-2", jobs=["gmm", "pca"], features=["bytes"]))
        heard.handle(agent_topic("a-3", "status"), status("a-3"))  # an older agent: pca only, no abilities
        assert other.online_devices("gmm") == ["a-1", "a-2"]
        assert sorted(other.online_devices("pca")) == ["a-2", "a-3"]
        assert other.online_devices("gmm", frozenset({"dp"})) == ["a-1"]
        assert other.announced() == {"a-1": ("bytes", "dur"), "a-2": ("bytes",)}

        # the same device, its program downgraded: its newest status declares no ability, and it loses it
        heard.handle(agent_topic("a-1", "status"), status("a-1", jobs=["gmm"], features=["bytes", "dur"]))
        assert other.online_devices("gmm", frozenset({"dp"})) == []
        # the broker's will (offline, nothing declared) keeps what it can do for when it is back
        heard.handle(agent_topic("a-2", "status"), Envelope("status", "", 0, "a-2", {}, {"online": False}).encode())
        assert other.online_devices("gmm") == ["a-1"]
        with other.sessions() as s:
            assert s.get(Device, "a-2").capabilities == {"jobs": ["gmm", "pca"], "abilities": [],
                                                         "features": ["bytes"]}
        # features a device cannot have announced (not printable) are not stored
        heard.handle(agent_topic("a-1", "status"), status("a-1", jobs=["gmm"], features=["ok", "bad\x00"]))
        assert other.announced() == {}
    finally:
        for c in (heard, other):
            c.locks.close()
            c.engine.dispose()

"""One secure sum (models.private.secagg) run as four network steps, each a round of a job: the coordinator's side
(`Relay`: it routes and unmasks) and a device's (`Member`), with what each keeps between steps as arrays, so
that a coordinator or an agent restarted between two steps goes on where it was.

    advertise  the round message announces the sum (`Announced`); each device computes its values, keeps them with
               its fresh secrets, and answers with its public keys (`Advertised`)
    share      the round message carries every advertised public key; each device answers with its neighbours'
               encrypted shares (`Shares`)
    upload     the coordinator sends each device, on its own topic, the shares its neighbours sent it (`Routed`);
               the device answers with its masked upload (`Masked`)
    unmask     the round message names who uploaded and who dropped; each survivor answers with the shares that
               rebuild exactly those secrets (`Revealed`); the coordinator decodes the sum

The coordinator keeps (and a job saves) only what the protocol lets it know: the announcement, the public keys,
the ciphertexts it relays and cannot read, and the sum of the masked uploads (one vector, not one per device); the
shares revealed to it are used when the sum is decoded and never kept. A device keeps its own secrets on its own
disk.

`flatten` and `unflatten` are how every secure sum (this one, and the simulator's in-process transport,
models.private.transport) lays a device's named statistics out as one vector and reads the decoded sum back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.private.fixedpoint import Ring
from models.private.messages import CIPHERTEXT_BYTES, KEYS_BYTES, Advertised, Masked, Revealed, Routed, Shares

#: the four steps, in order: each is one round of the job (its phase is "<sum>:<step>")
STEPS = ("advertise", "share", "upload", "unmask")
#: what a device answers each step with
REPLIES = {"advertise": Advertised, "share": Shares, "upload": Masked, "unmask": Revealed}


def flatten(values: Mapping[str, np.ndarray], scales: Mapping[str, float]) -> np.ndarray:
    """One device's statistics as one vector: each name's values (sorted by name) over its scale."""
    return np.concatenate([np.asarray(values[k], dtype=float).reshape(-1) / float(scales[k]) for k in sorted(values)])


def unflatten(total: np.ndarray, shapes: Mapping[str, tuple[int, ...]],
              scales: Mapping[str, float]) -> dict[str, np.ndarray]:
    """A decoded sum back as named arrays times their scales, each with a leading axis of 1 (one summed upload)."""
    out, at = {}, 0
    for k in sorted(shapes):
        size = int(np.prod(shapes[k], dtype=np.int64))
        out[k] = (np.asarray(total[at: at + size]) * float(scales[k])).reshape(1, *shapes[k])
        at += size
    return out


@dataclass(frozen=True)
class Announced:
    """What the coordinator announces for one secure sum: its label (job, sum, attempt), the devices asked (their
    positions are their places in `names`), each statistic's shape and scale, the clip of scaled values, the
    ring's width and the neighbour graph's seed."""

    label: str
    names: tuple[str, ...]
    shapes: Mapping[str, tuple[int, ...]]
    scales: Mapping[str, float]
    clip: float
    bits: int
    graph_seed: int

    def __post_init__(self) -> None:
        if set(self.shapes) != set(self.scales) or not self.shapes:
            raise ValueError("a secure sum names its statistics, each with a shape and a scale")
        if not all(float(s) > 0 for s in self.scales.values()):
            raise ValueError("every scale of a secure sum must be positive")

    @property
    def length(self) -> int:
        return sum(int(np.prod(s, dtype=np.int64)) for s in self.shapes.values())

    def setup(self) -> Any:
        """The protocol's setup (models.private.secagg.Setup; imports the `private` extra)."""
        from models.private.secagg import Setup

        return Setup(self.label.encode(), tuple(range(len(self.names))), self.length,
                     Ring.for_sum(self.clip, len(self.names), self.bits), self.graph_seed)

    def to_meta(self) -> dict[str, Any]:
        return {"label": self.label, "names": list(self.names), "shapes": {k: list(v) for k, v in self.shapes.items()},
                "scales": dict(self.scales), "clip": self.clip, "bits": self.bits, "graph_seed": self.graph_seed}

    @classmethod
    def from_meta(cls, meta: Any) -> Announced:
        """The announcement a round message carries; a ValueError naming what is wrong otherwise."""
        try:
            return cls(str(meta["label"]), tuple(str(n) for n in meta["names"]),
                       {str(k): tuple(int(x) for x in v) for k, v in meta["shapes"].items()},
                       {str(k): float(v) for k, v in meta["scales"].items()}, float(meta["clip"]), int(meta["bits"]),
                       int(meta["graph_seed"]))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"a secure sum's announcement lacks or garbles {e}") from None


def _rows(items: Mapping[int, bytes], width: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.array(sorted(items), dtype=np.int64)
    data = np.frombuffer(b"".join(items[i] for i in ids), dtype=np.uint8).reshape(len(ids), width)
    return ids, data


def _bytes_rows(ids: np.ndarray, data: np.ndarray, width: int, what: str) -> dict[int, bytes]:
    from models.private.secagg import SecAggError

    if data.ndim != 2 or data.shape[1] != width or len(ids) != len(data) or data.dtype != np.uint8:
        raise SecAggError(f"{what}: expected one row of {width} bytes per position, got {data.shape} {data.dtype} "
                          f"for {len(ids)} positions")
    if len(set(ids.tolist())) != len(ids):
        raise SecAggError(f"{what}: a position repeats")
    return {int(i): bytes(row) for i, row in zip(ids, data)}


@dataclass
class Relay:
    """The coordinator's side of one secure sum over the network (wraps models.private.secagg.Server)."""

    announced: Announced
    server: Any = None  # secagg.Server
    routed: dict[int, dict[int, bytes]] = field(default_factory=dict)  # receiver -> sender -> ciphertext
    _graph: dict[int, tuple[int, ...]] | None = None  # the neighbours (secagg.Setup.neighbours), once computed

    def __post_init__(self) -> None:
        if self.server is None:
            from models.private.secagg import Server

            self.server = Server(self.announced.setup())

    def advertised(self, replies: Mapping[int, Advertised]) -> dict[str, np.ndarray]:
        """Keep the advertisements; the share step's round arrays: every advertised public key."""
        from models.private.secagg import Keys

        self.server.hand_keys({i: Keys.from_bytes(bytes(m.keys.astype(np.uint8))) for i, m in replies.items()})
        return self.keys_arrays()

    def keys_arrays(self) -> dict[str, np.ndarray]:
        ids, data = _rows({i: k.to_bytes() for i, k in self.server.keys.items()}, KEYS_BYTES)
        return {"ids": ids, "keys": data}

    def check_shares(self, me: int, msg: Shares) -> None:
        """Refuse shares addressed to devices that are not the sender's advertised neighbours."""
        from models.private.secagg import SecAggError

        if self._graph is None:  # once per sum: every sender's shares are checked against it
            self._graph = self.server.setup.neighbours()
        mine = set(self._graph[me]) & set(self.server.keys)
        sent = _bytes_rows(msg.to, msg.data, CIPHERTEXT_BYTES, "shares")
        if not set(sent) <= mine:
            raise SecAggError(f"shares addressed to {sorted(set(sent) - mine)[:5]}, not advertised neighbours")

    def shared(self, replies: Mapping[int, Shares]) -> dict[int, Routed]:
        """Route the shares: what each device that shared receives (its own message)."""
        self.routed = self.server.route({i: _bytes_rows(m.to, m.data, CIPHERTEXT_BYTES, "shares")
                                         for i, m in replies.items()})
        return self.routed_messages()

    def routed_messages(self) -> dict[int, Routed]:
        out = {}
        for i, incoming in self.routed.items():
            sender, data = _rows(incoming, CIPHERTEXT_BYTES) if incoming else \
                (np.zeros(0, np.int64), np.zeros((0, CIPHERTEXT_BYTES), np.uint8))
            out[i] = Routed(label=self.announced.label, sender=sender, data=data)
        return out

    def check_upload(self, msg: Masked) -> None:
        from models.private.secagg import SecAggError

        ring = self.server.setup.ring
        if msg.y.dtype != np.uint8 or len(msg.y) != self.announced.length * ring.width:
            raise SecAggError(f"a masked upload has {self.announced.length * ring.width} bytes, got {len(msg.y)}")

    def check_reveal(self, msg: Revealed) -> None:
        """Refuse revealed shares of the wrong layout (their values are checked when the sum is decoded)."""
        _share_rows(msg)

    def uploaded(self, replies: Mapping[int, Masked]) -> dict[str, np.ndarray]:
        """Add up the masked uploads; the unmask step's round arrays: who uploaded and who dropped after sharing. A
        SecAggError when fewer than the threshold uploaded (the sum cannot be decoded)."""
        survivors, dropped = self.server.collect({i: bytes(m.y) for i, m in replies.items()})
        return {"survivors": np.array(sorted(survivors), dtype=np.int64),
                "dropped": np.array(sorted(dropped), dtype=np.int64)}

    def finish(self, replies: Mapping[int, Revealed]) -> dict[str, np.ndarray]:
        """The decoded sum of the survivors' statistics (each with a leading axis of 1), from their revealed
        shares; a SecAggError when too few came back or a share was altered."""
        reveals = {i: {int(j): (b"b" if int(w) == 0 else b"s") + bytes(s)
                       for j, w, s in zip(m.of, m.what, _share_rows(m))} for i, m in replies.items()}
        total = self.server.finish(reveals)
        return unflatten(total, self.announced.shapes, self.announced.scales)

    # -- what is saved between steps (only what the coordinator may know) --------------------------------
    def state(self) -> dict[str, np.ndarray]:
        out = {f"keys.{k}": v for k, v in self.keys_arrays().items()}
        out["shared"] = np.array(sorted(self.server.shared), dtype=np.int64)
        to, sender, data = [], [], []
        for i, incoming in self.routed.items():
            for j, ct in incoming.items():
                to.append(i)
                sender.append(j)
                data.append(ct)
        out["routed.to"], out["routed.sender"] = np.array(to, np.int64), np.array(sender, np.int64)
        out["routed.data"] = np.frombuffer(b"".join(data), np.uint8).reshape(len(data), CIPHERTEXT_BYTES)
        out["uploaded"] = np.array(sorted(self.server.uploaded), dtype=np.int64)
        if self.server.masked is not None:  # the sum of the masked uploads, not each one
            out["masked"] = np.asarray(self.server.masked, dtype=np.uint64)
        return out

    @classmethod
    def restore(cls, announced: Announced, arrays: Mapping[str, np.ndarray]) -> Relay:
        from models.private.secagg import Keys

        relay = cls(announced)
        keys = _bytes_rows(arrays["keys.ids"], arrays["keys.keys"], KEYS_BYTES, "saved keys")
        relay.server.keys = {i: Keys.from_bytes(k) for i, k in keys.items()}
        relay.server.shared = {int(i) for i in arrays["shared"]}
        for i, j, ct in zip(arrays["routed.to"], arrays["routed.sender"], arrays["routed.data"]):
            relay.routed.setdefault(int(i), {})[int(j)] = bytes(ct)
        for i in relay.server.shared:
            relay.routed.setdefault(i, {})
        relay.server.uploaded = {int(i) for i in arrays["uploaded"]}
        if "masked" in arrays:
            relay.server.masked = np.asarray(arrays["masked"], dtype=np.uint64)
        return relay


def _share_rows(m: Revealed) -> list[bytes]:
    from models.private import shamir
    from models.private.secagg import SecAggError

    if m.share.ndim != 2 or m.share.shape[1] != shamir.SHARE_BYTES or not len(m.of) == len(m.what) == len(m.share):
        raise SecAggError(f"revealed shares: one row of {shamir.SHARE_BYTES} bytes per neighbour, got "
                          f"{m.share.shape} for {len(m.of)} neighbours")
    if not np.isin(m.what, (0, 1)).all():
        raise SecAggError("revealed shares: what must be 0 (a self-mask seed) or 1 (a mask key)")
    return [bytes(r) for r in m.share.astype(np.uint8)]


@dataclass
class Member:
    """One device's side of one secure sum over the network (wraps models.private.secagg.Client); `state` and
    `restore` keep it on the device's disk between steps."""

    announced: Announced
    me: int
    client: Any = None  # secagg.Client
    x: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the device's scaled statistics

    @classmethod
    def advertise(cls, announced: Announced, name: str,
                  values: Mapping[str, np.ndarray]) -> tuple[Member, Advertised]:
        """Step 1: keep the device's values (scaled as announced) and fresh secrets; its advertisement."""
        from models.private.secagg import Client

        if name not in announced.names:
            raise ValueError(f"{name} is not among the devices of secure sum {announced.label}")
        shapes = {k: tuple(np.asarray(v).shape) for k, v in values.items()}
        if shapes != dict(announced.shapes):
            raise ValueError(f"secure sum {announced.label} announces statistics {dict(announced.shapes)}, the device "
                             f"has {shapes}")
        member = cls(announced, announced.names.index(name))
        member.client = Client(announced.setup(), member.me)
        member.x = flatten(values, announced.scales)
        keys = member.client.advertise()
        return member, Advertised(keys=np.frombuffer(keys.to_bytes(), np.uint8))

    def share(self, ids: np.ndarray, keys: np.ndarray) -> Shares:
        """Step 2: from every advertised public key, the encrypted shares for the device's neighbours."""
        from models.private.secagg import Keys, Server

        everyone = {i: Keys.from_bytes(k) for i, k in _bytes_rows(ids, keys, KEYS_BYTES, "advertised keys").items()}
        if self.me not in everyone:
            raise ValueError(f"device {self.me} is not among the advertised devices of {self.announced.label}")
        handed = Server(self.client.setup).hand_keys(everyone)[self.me]
        to, data = _rows(self.client.share(handed), CIPHERTEXT_BYTES)
        return Shares(to=to, data=data)

    def upload(self, routed: Routed) -> Masked:
        """Step 3: keep the neighbours' shares; the masked upload."""
        self.client.receive(_bytes_rows(routed.sender, routed.data, CIPHERTEXT_BYTES, "routed shares"))
        return Masked(y=np.frombuffer(self.client.upload(self.x), np.uint8))

    def unmask(self, survivors: np.ndarray, dropped: np.ndarray) -> Revealed:
        """Step 4: the shares of the survivors' self-mask seeds and of the dropped devices' mask keys."""
        given = self.client.unmask({int(i) for i in survivors}, {int(i) for i in dropped})
        of = np.array(sorted(given), dtype=np.int64)
        return Revealed(of=of, what=np.array([given[j][:1] == b"s" for j in of], dtype=np.uint8),
                        share=np.frombuffer(b"".join(given[j][1:] for j in of), np.uint8).reshape(len(of), -1))

    def state(self) -> dict[str, np.ndarray]:
        from models.private import shamir

        c = self.client
        held = sorted(c.held)
        return {"me": np.array(self.me), "x": self.x, "c_private": np.frombuffer(c.c_private, np.uint8),
                "s_private": np.frombuffer(c.s_private, np.uint8), "b": np.frombuffer(c.b, np.uint8),
                "keys.ids": np.array(sorted(c.keys), np.int64),
                "keys.keys": np.frombuffer(b"".join(c.keys[j].to_bytes() for j in sorted(c.keys)),
                                           np.uint8).reshape(len(c.keys), KEYS_BYTES),
                "held.ids": np.array(held, np.int64),
                "held.shares": np.frombuffer(b"".join(c.held[j][0] + c.held[j][1] for j in held),
                                             np.uint8).reshape(len(held), 2 * shamir.SHARE_BYTES),
                "revealed": np.array(c.revealed)}

    @classmethod
    def restore(cls, announced: Announced, arrays: Mapping[str, np.ndarray]) -> Member:
        from models.private import shamir
        from models.private.secagg import Client, Keys

        me = int(arrays["me"])
        client = Client(announced.setup(), me, bytes(arrays["c_private"]), bytes(arrays["s_private"]),
                        bytes(arrays["b"]))
        client.keys = {int(j): Keys.from_bytes(bytes(k)) for j, k in zip(arrays["keys.ids"], arrays["keys.keys"])}
        client.held = {int(j): (bytes(s[: shamir.SHARE_BYTES]), bytes(s[shamir.SHARE_BYTES:]))
                       for j, s in zip(arrays["held.ids"], arrays["held.shares"])}
        client.revealed = bool(arrays["revealed"])
        return cls(announced, me, client, np.asarray(arrays["x"], dtype=float))

"""SecAgg+ (Bell, Bonawitz, Gascon, Lepoint, Raykova 2020): the coordinator learns the sum of a round's uploads
and nothing else about any one of them, and the sum survives devices that drop out after uploading.

One secure sum runs in four steps between the devices of a round (`members`, positions) and the coordinator:

1. advertise  each device makes two X25519 key pairs (c: to encrypt its shares, s: to agree pairwise masks),
              a self-mask seed b, and sends its public keys with a commitment to b (`Keys`).
2. share      the coordinator hands each device its neighbours' keys. Neighbours: a random k-regular graph
              (a Harary graph on a permutation drawn from the announced seed), k about 2 log2 n. Each device
              splits b and its s private key into Shamir shares, `threshold` of k + 1 needed, and sends each
              neighbour its two shares encrypted (AES-GCM) under their c agreement; the coordinator only routes.
3. upload     each device uploads y = encode(x) + PRG(b) + sum over neighbours j that shared of
              +/- PRG(s_ij), + for the smaller position: pairwise masks cancel in the sum.
4. unmask     the coordinator names the devices that uploaded (survivors) and the neighbours that shared but did
              not (dropped). Each survivor returns, per neighbour, the share of b (survivor) or of the s key
              (dropped), never both for one device. The coordinator rebuilds each survivor's b and each dropped
              device's s key, checks each against what was advertised (the commitment, the public key: a tampered
              share fails the round, never yields a wrong sum), removes the self-masks and the dropped devices'
              pairwise masks, and decodes the sum.

Security (an honest-but-curious coordinator, the paper's semi-honest server): the coordinator sees uploads that
are uniformly distributed, and from honest devices at most one kind of share per device; with fewer than
`threshold` colluding devices among a device's share holders it cannot rebuild that device's secrets.
`threshold` is more than a third of the k + 1 holders. A malicious coordinator that tells devices different
stories about who dropped can learn an individual upload (SecAgg+ without its consistency round); the threat
model says so. Dropouts: a survivor's b needs `threshold` surviving holders among its neighbours and itself,
a dropped device's key `threshold` surviving neighbours; `default_degree` picks k so that random dropouts of a
third of the devices fail a sum with probability below 2^-20 (every other device in small rounds: exact).
"""

from __future__ import annotations

import math
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.private import crypto, shamir
from models.private.fixedpoint import Ring
from models.private.messages import KEYS_BYTES, REVEAL_ROW_BYTES, SHARE_ROW_BYTES


class SecAggError(ValueError):
    """A secure sum that cannot complete, with the reason (too few devices, a tampered share, ...)."""


#: the share of a round's devices that may drop after uploading with the sum still recovered
DROPOUT = 1 / 3
#: the chance, per round, that random dropouts at DROPOUT leave some secret with too few holders
FAILURE = 2.0**-20


def default_threshold(degree: int) -> int:
    """Shares that rebuild a secret: more than a third of its k + 1 holders. An honest-but-curious coordinator
    together with fewer devices than this among one device's holders learns nothing of its upload."""
    return (degree + 1) // 3 + 1


def default_degree(n: int) -> int:
    """Neighbours per device: every other device up to the smallest even k >= 2 log2 n at which random dropouts
    of a third of the devices leave every secret with `default_threshold(k)` holders except with probability
    FAILURE (binomial tail, union over the n devices). With every other device as neighbour (small rounds) the
    guarantee is exact: any third may drop."""
    if n <= 1:
        return 0
    k = 2 * math.ceil(math.log2(n))
    while k < n - 1 and n * binomial_cdf(default_threshold(k) - 1, k, 1 - DROPOUT) > FAILURE:
        k += 2
    return min(k, n - 1)


def binomial_cdf(x: int, n: int, p: float) -> float:
    """P[Binomial(n, p) <= x]."""
    return float(sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(0, x + 1)))


@dataclass(frozen=True)
class Setup:
    """What the coordinator announces for one secure sum."""

    label: bytes  # binds keys, shares and masks to this sum (job, round, phase)
    members: tuple[int, ...]  # the devices' positions
    length: int  # values per upload
    ring: Ring
    graph_seed: int
    degree: int = -1  # -1: default_degree(len(members))
    threshold: int = -1  # -1: default_threshold(degree)

    def __post_init__(self) -> None:
        n = len(self.members)
        if n < 2 or len(set(self.members)) != n:
            raise SecAggError(f"a secure sum needs at least 2 distinct devices, got {n}")
        if self.degree == -1:
            object.__setattr__(self, "degree", default_degree(n))
        if self.threshold == -1:
            object.__setattr__(self, "threshold", default_threshold(self.degree))
        if not 1 <= self.degree <= n - 1:
            raise SecAggError(f"neighbours per device must be between 1 and {n - 1}, got {self.degree}")
        if not (self.degree + 1) // 3 < self.threshold <= self.degree + 1:
            raise SecAggError(f"the share threshold must be above a third of the {self.degree + 1} holders and "
                              f"at most all of them, got {self.threshold}")

    def neighbours(self) -> dict[int, tuple[int, ...]]:
        """Each member's neighbours: the `degree` nearest on a ring of the members in a seeded random order
        (degree/2 each side; an odd degree adds the opposite member)."""
        rng = np.random.default_rng(self.graph_seed)
        order = [self.members[i] for i in rng.permutation(len(self.members))]
        n, half = len(order), self.degree // 2
        out: dict[int, set[int]] = {m: set() for m in order}
        for i, m in enumerate(order):
            for step in range(1, half + 1):
                out[m] |= {order[(i + step) % n], order[(i - step) % n]}
            if self.degree % 2:
                out[m].add(order[(i + n // 2) % n])
        return {m: tuple(sorted(v - {m})) for m, v in out.items()}


@dataclass(frozen=True)
class Keys:
    """A device's advertisement: its two public keys and the commitment to its self-mask seed."""

    c_public: bytes
    s_public: bytes
    b_commitment: bytes

    def to_bytes(self) -> bytes:
        return self.c_public + self.s_public + self.b_commitment

    @classmethod
    def from_bytes(cls, data: bytes) -> Keys:
        if len(data) != 96:
            raise SecAggError(f"an advertisement has 96 bytes, got {len(data)}")
        return cls(data[:32], data[32:64], data[64:])


def _pair_label(setup: Setup, a: int, b: int, what: bytes) -> bytes:
    return setup.label + what + struct.pack(">qq", min(a, b), max(a, b))


def _share_ad(setup: Setup, sender: int, receiver: int) -> bytes:
    return setup.label + b"share" + struct.pack(">qq", sender, receiver)


def pairwise_mask(setup: Setup, private: bytes, public: bytes, adder: int, other: int) -> np.ndarray:
    """What `adder` adds for its pair with `other`: +PRG(s) if adder < other, -PRG(s) otherwise (they cancel).
    s is the pair's X25519 agreement, the same from either side's private key and the other's public key, so
    the coordinator rebuilds a survivor's mask for a dropped device from the dropped device's key."""
    seed = crypto.agree(private, public, _pair_label(setup, adder, other, b"mask"))
    words = crypto.expand(seed, setup.length) & setup.ring.mask
    return words if adder < other else setup.ring.sub(np.zeros_like(words), words)


def self_mask(setup: Setup, b: bytes) -> np.ndarray:
    return crypto.expand(b, setup.length) & setup.ring.mask


@dataclass
class Client:
    """One device's side of one secure sum."""

    setup: Setup
    me: int
    c_private: bytes = b""
    s_private: bytes = b""
    b: bytes = b""
    keys: dict[int, Keys] = field(default_factory=dict)  # the neighbours' advertisements
    held: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)  # (b share, s share) of each neighbour
    revealed: bool = False
    pair_keys: dict[int, bytes] = field(default_factory=dict)  # the share-encryption key with each neighbour

    def share_key(self, j: int) -> bytes:
        if j not in self.pair_keys:
            self.pair_keys[j] = crypto.agree(self.c_private, self.keys[j].c_public,
                                             _pair_label(self.setup, self.me, j, b"share"))
        return self.pair_keys[j]

    def advertise(self) -> Keys:
        self.c_private, c_public = crypto.keypair()
        self.s_private, s_public = crypto.keypair()
        self.b = os.urandom(shamir.SECRET_BYTES)
        return Keys(c_public, s_public, crypto.commitment(self.b))

    def share(self, neighbour_keys: dict[int, Keys]) -> dict[int, bytes]:
        """Encrypted shares for the neighbours that advertised (the coordinator routes them)."""
        mine = set(self.setup.neighbours()[self.me])
        if not set(neighbour_keys) <= mine:
            raise SecAggError(f"device {self.me} was handed keys of devices that are not its neighbours")
        if len(neighbour_keys) + 1 < self.setup.threshold:
            raise SecAggError(f"device {self.me}: {len(neighbour_keys)} neighbours advertised, the sum needs "
                              f"{self.setup.threshold - 1}")
        self.keys = dict(neighbour_keys)
        points = [j + 1 for j in sorted(self.keys)] + [self.me + 1]
        b_shares = shamir.split(self.b, points, self.setup.threshold)
        s_shares = shamir.split(self.s_private, points, self.setup.threshold)
        self.held[self.me] = (b_shares[self.me + 1], s_shares[self.me + 1])
        out = {}
        for j in self.keys:
            out[j] = crypto.encrypt(self.share_key(j), b_shares[j + 1] + s_shares[j + 1],
                                    _share_ad(self.setup, self.me, j))
        return out

    def receive(self, ciphertexts: dict[int, bytes]) -> None:
        """Keep the shares the neighbours that completed step 2 sent (their pairwise masks go into the upload)."""
        for i, ct in ciphertexts.items():
            if i not in self.keys:
                raise SecAggError(f"device {self.me} got shares from {i}, which is not an advertised neighbour")
            plain = crypto.decrypt(self.share_key(i), ct, _share_ad(self.setup, i, self.me))
            if len(plain) != 2 * shamir.SHARE_BYTES:
                raise SecAggError(f"device {self.me}: shares from {i} have the wrong length")
            self.held[i] = (plain[: shamir.SHARE_BYTES], plain[shamir.SHARE_BYTES:])

    def upload(self, x: np.ndarray) -> bytes:
        """The masked, encoded upload (ring elements, packed)."""
        x = np.asarray(x, dtype=float).reshape(-1)
        if len(x) != self.setup.length:
            raise SecAggError(f"an upload has {self.setup.length} values, got {len(x)}")
        ring = self.setup.ring
        y = ring.add(ring.encode(x), self_mask(self.setup, self.b))
        for j in self.held:
            if j != self.me:
                y = ring.add(y, pairwise_mask(self.setup, self.s_private, self.keys[j].s_public, self.me, j))
        return ring.pack(y)

    def unmask(self, survivors: set[int], dropped: set[int]) -> dict[int, bytes]:
        """For each neighbour it holds shares of: the b share of a survivor, the s share of a dropped device;
        once, and never both for one device."""
        if self.revealed:
            raise SecAggError(f"device {self.me} already answered the unmasking of this sum")
        if survivors & dropped:
            raise SecAggError("a device cannot both have uploaded and dropped")
        if self.me not in survivors:
            raise SecAggError(f"device {self.me} uploaded but is not named a survivor")
        holders = survivors & set(self.held)
        if len(holders) < self.setup.threshold:
            raise SecAggError(f"only {len(holders)} of device {self.me}'s share holders survived; the sum needs "
                              f"{self.setup.threshold}")
        self.revealed = True
        out = {}
        for j, (b_share, s_share) in self.held.items():
            if j in survivors:
                out[j] = b"b" + b_share
            elif j in dropped:
                out[j] = b"s" + s_share
        return out


@dataclass
class Server:
    """The coordinator's side of one secure sum: it routes and unmasks, and keeps nothing that unmasks one
    upload (only the advertisements, the routed ciphertexts it cannot read, the masked uploads, and the
    shares it is given of exactly the secrets the protocol lets it rebuild)."""

    setup: Setup
    keys: dict[int, Keys] = field(default_factory=dict)
    shared: set[int] = field(default_factory=set)  # completed step 2
    uploaded: set[int] = field(default_factory=set)  # completed step 3
    #: the sum of the masked uploads (ring elements): all the coordinator keeps of them, one vector whatever the round
    masked: np.ndarray | None = None

    def hand_keys(self, advertised: dict[int, Keys]) -> dict[int, dict[int, Keys]]:
        """Each advertising device's advertised neighbours' keys."""
        self.keys = {i: k for i, k in advertised.items() if i in self.setup.members}
        graph = self.setup.neighbours()
        return {i: {j: self.keys[j] for j in graph[i] if j in self.keys} for i in self.keys}

    def route(self, shares: dict[int, dict[int, bytes]]) -> dict[int, dict[int, bytes]]:
        """Each device's incoming ciphertexts, from the senders that completed the sharing step."""
        self.shared = {i for i in shares if i in self.keys}
        out: dict[int, dict[int, bytes]] = {i: {} for i in self.shared}
        for i in self.shared:
            for j, ct in shares[i].items():
                if j in self.shared:
                    out[j][i] = ct
        return out

    def collect(self, uploads: dict[int, bytes]) -> tuple[set[int], set[int]]:
        """Add up the masked uploads of devices that shared; (survivors, dropped) for the unmasking step."""
        ring = self.setup.ring
        total = np.zeros(self.setup.length, dtype=np.uint64) if self.masked is None else self.masked
        for i, data in uploads.items():
            if i in self.shared and i not in self.uploaded:
                total = ring.add(total, ring.unpack(data, self.setup.length))
                self.uploaded.add(i)
        self.masked = total
        survivors = set(self.uploaded)
        if len(survivors) < self.setup.threshold:
            raise SecAggError(f"{len(survivors)} devices uploaded; a secure sum needs at least "
                              f"{self.setup.threshold}")
        return survivors, self.shared - survivors

    def finish(self, reveals: dict[int, dict[int, bytes]]) -> np.ndarray:
        """The sum of the survivors' values (decoded), from the survivors' revealed shares."""
        survivors = set(self.uploaded)
        dropped = self.shared - survivors
        ring, graph = self.setup.ring, self.setup.neighbours()
        b_parts: dict[int, dict[int, bytes]] = {}
        s_parts: dict[int, dict[int, bytes]] = {}
        for holder, given in reveals.items():
            if holder not in survivors:
                continue
            for j, share in given.items():
                kind, body = share[:1], share[1:]
                if kind == b"b" and j in survivors:
                    b_parts.setdefault(j, {})[holder + 1] = body
                elif kind == b"s" and j in dropped:
                    s_parts.setdefault(j, {})[holder + 1] = body
                else:
                    raise SecAggError(f"device {holder} revealed a share the unmasking did not ask for")
        total = np.zeros(self.setup.length, dtype=np.uint64) if self.masked is None else self.masked.copy()
        for i in survivors:
            b = self._rebuild(b_parts.get(i, {}), i, "self-mask seed")
            if crypto.commitment(b) != self.keys[i].b_commitment:
                raise SecAggError(f"the shares of device {i}'s self-mask seed do not match its commitment: a "
                                  "share was altered; the sum is not used")
            total = ring.sub(total, self_mask(self.setup, b))
        for j in dropped:
            s = self._rebuild(s_parts.get(j, {}), j, "mask key")
            if crypto.public_of(s) != self.keys[j].s_public:
                raise SecAggError(f"the shares of dropped device {j}'s mask key do not match its public key: a "
                                  "share was altered; the sum is not used")
            for i in graph[j]:
                if i in survivors:  # i added its pair mask with j; take it out
                    total = ring.sub(total, pairwise_mask(self.setup, s, self.keys[i].s_public, i, j))
        return ring.decode(total)

    def _rebuild(self, parts: dict[int, bytes], owner: int, what: str) -> bytes:
        if len(parts) < self.setup.threshold:
            raise SecAggError(f"{len(parts)} shares of device {owner}'s {what} came back; {self.setup.threshold} "
                              "are needed")
        try:
            return shamir.combine(parts)
        except ValueError as e:
            raise SecAggError(f"device {owner}'s {what}: {e}") from None



#: a secure sum's four replies, as the simulator counts their bytes (`Transcript.steps`)
STEP_NAMES = ("keys", "shares", "masked", "unmask")


@dataclass
class Transcript:
    """What one in-process secure sum exchanged and cost: the bytes each device sent (what its four replies carry
    over MQTT beyond their envelopes, models.private.messages), all the devices' bytes per step, the CPU seconds
    each device and the coordinator spent (`fedsentry bench secagg`), and the coordinator's stored view (the
    masked uploads)."""

    sent: dict[int, int] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STEP_NAMES, 0))
    cpu: dict[int, float] = field(default_factory=dict)
    server_cpu: float = 0.0
    uploads: dict[int, bytes] = field(default_factory=dict)

    def send(self, step: str, i: int, n: int) -> None:
        """Device i sent n bytes in `step`."""
        self.sent[i] += n
        self.steps[step] += n

    def device(self, i: int, step: Any, *args: Any) -> Any:
        """Run a device's step, its CPU time counted."""
        t = time.process_time()
        out = step(*args)
        self.cpu[i] = self.cpu.get(i, 0.0) + time.process_time() - t
        return out

    def coordinator(self, step: Any, *args: Any) -> Any:
        """Run a coordinator's step, its CPU time counted."""
        t = time.process_time()
        out = step(*args)
        self.server_cpu += time.process_time() - t
        return out


def secure_sum(setup: Setup, values: dict[int, np.ndarray], gone_before_upload: frozenset[int] = frozenset(),
               gone_after_upload: frozenset[int] = frozenset()) -> tuple[np.ndarray, set[int], Transcript]:
    """The four steps in process, as the agents and the coordinator run them over MQTT: (the sum of the values
    of the devices that uploaded, those devices, the transcript). Devices in `gone_before_upload` share their
    keys and then vanish; those in `gone_after_upload` upload and then vanish before unmasking."""
    server = Server(setup)
    clients = {i: Client(setup, i) for i in setup.members}
    log = Transcript({i: 0 for i in setup.members})
    advertised = {i: log.device(i, c.advertise) for i, c in clients.items()}
    for i in advertised:
        log.send("keys", i, KEYS_BYTES)
    handed = log.coordinator(server.hand_keys, advertised)
    shares = {i: log.device(i, clients[i].share, handed[i]) for i in handed}
    for i, out in shares.items():
        log.send("shares", i, len(out) * SHARE_ROW_BYTES)
    for i, incoming in log.coordinator(server.route, shares).items():
        log.device(i, clients[i].receive, incoming)
    uploads = {i: log.device(i, clients[i].upload, values[i]) for i in server.shared
               if i not in gone_before_upload}
    for i, data in uploads.items():
        log.send("masked", i, len(data))
    log.uploads = uploads
    survivors, dropped = log.coordinator(server.collect, uploads)
    answering = survivors - set(gone_after_upload)
    reveals = {i: log.device(i, clients[i].unmask, survivors, dropped) for i in answering}
    for i, out in reveals.items():
        log.send("unmask", i, len(out) * REVEAL_ROW_BYTES)
    return log.coordinator(server.finish, reveals), survivors, log

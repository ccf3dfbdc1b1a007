"""Private mode's transport in a simulation: a round's uploads reach the server step only as their sum, through
the SecAgg+ protocol itself (models.private.secagg.secure_sum: keys, encrypted shares, masked uploads, unmasking),
run in process with its dropouts, and with what it cost counted.

Each device scales its values by the job's announced `scales` (a statistic of standardised records summed over
records is at most `bound`^power per record: 1 for counts, `bound` for sums, `bound`^2 for sums of squares, so
every scaled value lies in [-clip, clip]), clips them there and encodes them in the ring `Ring.for_sum` picks
for the round's size: a sum of the round's devices cannot wrap, and the fractional bits are as many as that
leaves. The server step receives the decoded sum as a single upload (leading axis 1).

With differential privacy (`noise`, models.private.dp) each device's upload is clipped per name first; in private
mode each device then adds its share of the noise and the ring keeps room for it above the clip, and without
private mode (`secure` false) the coordinator sums the clipped uploads in the clear and adds the whole noise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from models.core.federated import State
from models.core.rounds import RoundFailedError
from models.private.dp import Noise
from models.private.fixedpoint import BITS, Ring
from models.private.relay import flatten, unflatten

if TYPE_CHECKING:
    from models.private.proven import ProvenRows


@dataclass
class SecureTransport:
    """The secure sum of each round's uploads (a `models.core.rounds.Hooks.receive`)."""

    scales: Mapping[str, float]  # per upload name: what its values are divided by before clipping
    clip: float  # the announced bound on every scaled value
    dropout: float = 0.0  # share of each round's devices that vanish after uploading (their values still count)
    seed: int = 0
    sent: list[float] = field(default_factory=list)  # bytes each device sent, per round (mean over the round)
    device_cpu: list[float] = field(default_factory=list)  # CPU seconds of the round's slowest device
    server_cpu: list[float] = field(default_factory=list)  # CPU seconds of the coordinator per round
    sums: int = 0
    clipped: int = 0  # values a device clipped to the bound (an honest device's statistics beyond it)
    phase_bytes: float = 0.0  # bytes every device sent together in phases outside the rounds (statistics)
    bits: int = BITS  # the ring's width
    failures: int = 0  # secure sums that could not be unmasked (their rounds failed)
    noise: Noise | None = None  # differential privacy: the Gaussian mechanism on each sum
    secure: bool = True  # masked uploads (private mode); False: summed in the clear (central noise only)
    #: bytes all the devices sent, per step of a secure sum (models.private.secagg.STEP_NAMES; "clear": sums in the
    #: clear), over this transport and the phases it made
    steps: dict[str, float] = field(default_factory=dict)
    #: the bit proofs of one upload name's 0/1 rows (models.private.proven; None: none): proofs checked on arrival,
    #: the blinding limbs summed with the values, the sum checked against the commitments after unmasking
    proven: ProvenRows | None = None

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.admitted: np.ndarray | None = None  # the devices of the last sum (those whose proofs verified)

    def counted(self, ids: np.ndarray) -> np.ndarray:
        """The round's devices whose uploads the last sum holds (a `models.core.rounds.Hooks.counted`): a device
        refused on arrival keeps its state as before the round, as an agent drops the state it kept aside."""
        return ids if self.admitted is None else self.admitted

    def phase(self, scales: Mapping[str, float], clip: float, offset: int, noise: Noise | None = None,
              bits: int = BITS) -> SecureTransport:
        """The transport of a phase outside the rounds: this job's dropouts and mode, its own scales, clip and
        seed (`offset` from the job's), and its own differential privacy (None: none)."""
        return SecureTransport(scales, clip, self.dropout, self.seed + offset, bits=bits, noise=noise,
                               secure=self.secure, steps=self.steps)

    def __call__(self, ids: np.ndarray, uploads: State) -> State:
        if len(ids) < 2:  # a secure sum needs two devices: one device alone is not summed (nothing is sent)
            raise ValueError("a private round needs at least 2 answering devices")
        if not self.secure:
            return self.plain(ids, uploads)
        from models.private.secagg import SecAggError, Setup, secure_sum  # the `private` extra

        clip = self.clip
        if self.noise is not None:  # each device clips, then adds its share of the noise before masking
            uploads = self.noise.device_shares(ids, uploads)
            clip += self.noise.room({k: self.scales[k] for k in uploads}, len(ids))
        shapes = {k: np.asarray(v).shape[1:] for k, v in uploads.items()}
        self.sums += 1
        proven, clear = self.proven, 0.0
        if proven is not None:  # each device's bit proofs, checked on arrival: a device that fails is left out
            admitted = np.isin(ids, proven.answer(str(self.sums), ids, uploads[proven.name]))
            ids, uploads = ids[admitted], {k: np.asarray(v)[admitted] for k, v in uploads.items()}
            if len(ids) < 2:
                raise RoundFailedError(f"secure sum {self.sums}: fewer than 2 devices' proofs verified")
        self.admitted = ids
        flat = {int(i): flatten({k: v[j] for k, v in uploads.items()}, self.scales) for j, i in enumerate(ids)}
        ring = Ring.for_sum(clip, len(ids), self.bits)
        self.clipped += int(sum(np.count_nonzero(np.abs(v) > clip) for v in flat.values()))
        width = len(next(iter(flat.values())))
        if proven is not None:  # the blinding factors' change joins each masked upload, as whole-number limbs
            flat = {i: np.concatenate([v, proven.limbs(i, ring)]) for i, v in flat.items()}
            clear = float(np.mean([proven.clear_bytes(i) for i in flat]))
            self.steps["proofs"] = self.steps.get("proofs", 0.0) + clear * len(flat)
        setup = Setup(f"round-{self.sums}".encode(), tuple(int(i) for i in ids), len(next(iter(flat.values()))),
                      ring, int(self.rng.integers(2**31)))
        gone = int(np.floor(self.dropout * len(ids)))
        after = frozenset(int(i) for i in self.rng.choice(ids, gone, replace=False)) if gone else frozenset()
        try:
            total, uploaded, log = secure_sum(setup, flat, gone_after_upload=after)
        except SecAggError as e:  # too few devices left to unmask: the round fails, nothing of it counts
            self.failures += 1
            raise RoundFailedError(f"secure sum of {len(ids)} devices, {gone} gone after upload: {e}") from None
        if self.noise is not None:  # every upload counted (drops came after it): the noise is all there
            self.noise.check_uploads(len(ids), len(ids))
        self.sent.append(float(np.mean(list(log.sent.values()))) + clear)
        for step, n in log.steps.items():
            self.steps[step] = self.steps.get(step, 0.0) + n
        self.device_cpu.append(max(log.cpu.values()) + (proven.device_cpu[-1] if proven is not None else 0.0))
        self.server_cpu.append(log.server_cpu + (proven.server_cpu[-1] if proven is not None else 0.0))
        out = unflatten(total[:width], shapes, self.scales)
        if proven is not None and not proven.check(set(uploaded), out[proven.name][0], total[width:], ring):
            # some device masked another row than it committed to: the sum's row changes are withheld
            out[proven.name] = np.zeros_like(out[proven.name])
            out[f"{proven.name}.withheld"] = np.ones(1)
        return out

    def plain(self, ids: np.ndarray, uploads: State) -> State:
        """The round's uploads summed in the clear (float64 on the wire), with the central noise if any."""
        n = len(ids)
        values = sum(int(np.prod(np.asarray(v).shape[1:], dtype=np.int64)) for v in uploads.values())
        self.sent.append(8.0 * values)
        self.steps["clear"] = self.steps.get("clear", 0.0) + 8.0 * values * n
        self.sums += 1
        if self.noise is not None:
            return self.noise.central(ids, uploads)
        return {k: np.asarray(v, dtype=float).sum(axis=0, keepdims=True) for k, v in uploads.items()} if n else {}

    def per_step(self, device_rounds: float) -> dict[str, float]:
        """The bytes of each step per device and round (`device_rounds`: devices times the job's rounds, as
        `upload_bytes_per_device_round` divides its total)."""
        return {k: v / device_rounds for k, v in self.steps.items()}

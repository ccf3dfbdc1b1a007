"""Fixed-point encoding of real vectors into the ring Z_(2^bits), where masks add and sums of many devices cannot
wrap.

A device clips each value to [-clip, clip] (the bound the job announces), scales it by 2^frac, rounds it to the
nearest integer and reads it modulo 2^bits. The sum of n encodings, modulo 2^bits, decodes exactly to the sum of
the rounded values as long as it stays within the ring's signed range: n * clip * 2^frac < 2^(bits - 1).
`Ring.for_sum` chooses `frac` as large as that allows for the number of devices the sum is announced to (a sum of
its survivors holds fewer), so a sum of clipped values cannot wrap whatever values the devices hold, and precision
is spent where the ring has room; the rounding error of a decoded sum of n values is at most n * 2^-(frac + 1).
(A device that encodes something else than its clipped values can shift the sum however it likes, wrapped or not:
private mode cannot check one upload; docs/privacy.md.)

The rounding is deterministic (to nearest, ties to even): the same values encode to the same ring elements on an
agent and in the simulator (`fedsentry simulate --private`), so a private job's sums equal the simulator's bit for
bit (tests/models/test_relay.py). Stochastic rounding would be unbiased, but each side would draw its own rounding
and the two sums would differ by grains, more than the 1e-6 a job is held to against the simulator (a count's
grain is 2^-frac times the most records a device holds: 1.5e-5 at 26 fractional bits and 1,000 records).
Rounding to nearest is off by at most half a grain a value, deterministically: 2^-27 of a value's scale at the 26
fractional bits `BITS` leaves at 1,000 devices of clip 5 (7.5e-9; float32 rounds a value of that scale by up to
6e-8); a value below half a grain is 0.

Values travel packed in the fewest whole bytes that hold `bits` (5 bytes for 40 bits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the widest ring (numpy's unsigned 64-bit integers wrap modulo 2^64)
MAX_BITS = 64
#: private mode's ring for the rounds' and the threshold's sums (5 bytes a value on the wire). The width does not
#: decide whether a sum can wrap (`Ring.for_sum` takes the fractional bits from what is left, and refuses a sum that
#: leaves fewer than 8): it decides the precision. At 40 bits a sum of n values within the clip c keeps
#: frac = 39 - ceil(log2(n c + 1)) fractional bits, so its rounding error, at most n 2^-(frac + 1), is at most about
#: n 2^-39 of the largest sum n c: below float32's rounding of a single value (2^-24) up to 2^15 devices a sum. 26
#: fractional bits at 1,000 devices of clip 5 (a grain of 1.5e-8 of a value's scale); 32 bits would leave 18 there.
BITS = 40


@dataclass(frozen=True)
class Ring:
    """Z_(2^bits) with `frac` fractional bits, for values clipped to [-clip, clip]."""

    bits: int
    frac: int
    clip: float

    def __post_init__(self) -> None:
        if not 8 <= self.bits <= MAX_BITS or self.bits % 8:
            raise ValueError(f"ring bits must be a multiple of 8 between 8 and {MAX_BITS}, got {self.bits}")
        if not 0 <= self.frac < self.bits:
            raise ValueError(f"fractional bits must be between 0 and {self.bits - 1}, got {self.frac}")
        if not (np.isfinite(self.clip) and self.clip > 0):
            raise ValueError(f"the clip bound must be a positive number, got {self.clip}")

    @classmethod
    def for_sum(cls, clip: float, devices: int, bits: int = BITS) -> Ring:
        """The ring of `bits` bits with the most fractional bits at which the sum of `devices` values in
        [-clip, clip] cannot wrap."""
        if devices < 1:
            raise ValueError("a sum needs at least one device")
        headroom = bits - 1 - int(np.ceil(np.log2(devices * clip + 1)))
        if headroom < 8:
            raise ValueError(f"{devices} values of magnitude {clip:g} leave fewer than 8 fractional bits in a "
                             f"{bits}-bit ring; use a wider ring or a smaller clip")
        return cls(bits, headroom, float(clip))

    @property
    def mask(self) -> np.uint64:
        return np.uint64((1 << self.bits) - 1) if self.bits < 64 else np.uint64(0xFFFF_FFFF_FFFF_FFFF)

    @property
    def width(self) -> int:
        """Bytes per value on the wire."""
        return self.bits // 8

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Clip, scale, round to the nearest integer, and reduce modulo 2^bits (uint64 with the high bits zero)."""
        scaled = np.clip(np.asarray(x, dtype=float), -self.clip, self.clip) * float(1 << self.frac)
        return np.rint(scaled).astype(np.int64).astype(np.uint64) & self.mask

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a + b) & self.mask

    def sub(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a - b) & self.mask

    def decode(self, v: np.ndarray) -> np.ndarray:
        """The signed value of each ring element (a sum within the signed range), unscaled."""
        v = np.asarray(v, dtype=np.uint64) & self.mask
        signed = v.astype(np.int64) if self.bits == 64 else \
            v.astype(np.int64) - (v >= np.uint64(1 << (self.bits - 1))).astype(np.int64) * (1 << self.bits)
        return signed.astype(float) / float(1 << self.frac)

    def pack(self, v: np.ndarray) -> bytes:
        """The elements in `width` little-endian bytes each."""
        raw = np.ascontiguousarray(np.asarray(v, dtype="<u8")).view(np.uint8).reshape(-1, 8)
        return raw[:, : self.width].tobytes()

    def unpack(self, data: bytes, n: int) -> np.ndarray:
        """`n` elements from `pack`'s bytes; a length that does not match is a ValueError."""
        if len(data) != n * self.width:
            raise ValueError(f"expected {n} ring elements of {self.width} bytes ({n * self.width} bytes), "
                             f"got {len(data)} bytes")
        raw = np.zeros((n, 8), dtype=np.uint8)
        raw[:, : self.width] = np.frombuffer(data, dtype=np.uint8).reshape(n, self.width)
        return raw.reshape(-1).view("<u8").astype(np.uint64)

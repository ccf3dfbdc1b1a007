"""Fixed-point encoding of real vectors into the ring Z_(2^bits), where masks add and sums of many devices cannot
wrap.

A device clips each value to [-clip, clip] (the bound the job announces), scales it by 2^frac and rounds it
(stochastically, so the rounding error is zero in expectation), and reads the integer modulo 2^bits. The sum of
n encodings, modulo 2^bits, decodes exactly to the sum of the rounded values as long as it stays within the ring's
signed range: n * clip * 2^frac < 2^(bits - 1). `Ring.for_sum` chooses `frac` as large as that allows for the
largest number of devices a round may hold, so precision is spent where the ring has room; the rounding error
of a decoded sum of n values is then below n * 2^-frac.

Values travel packed in the fewest whole bytes that hold `bits` (6 bytes for 48 bits): a 48-bit ring uploads
1.5x a float32 vector.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the widest ring (numpy's unsigned 64-bit integers wrap modulo 2^64)
MAX_BITS = 64


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
    def for_sum(cls, clip: float, devices: int, bits: int = 48) -> Ring:
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

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clip, scale, round stochastically, and reduce modulo 2^bits (uint64 with the high bits zero)."""
        scaled = np.clip(np.asarray(x, dtype=float), -self.clip, self.clip) * float(1 << self.frac)
        low = np.floor(scaled)
        rounded = low + (rng.random(scaled.shape) < scaled - low)
        return rounded.astype(np.int64).astype(np.uint64) & self.mask

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

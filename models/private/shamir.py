"""Shamir secret sharing (Shamir 1979) of 32-byte secrets over the prime field GF(2^256 + 297).

`split` gives each of the `points` a share such that any `threshold` shares reconstruct the secret (`combine`,
Lagrange interpolation at 0) and fewer reveal nothing about it. The field is the smallest prime above 2^256,
2^256 + 297: any 256-bit secret is an element, and a share is 33 bytes (257 bits; a field of 2^521 - 1 would
double every share a device sends and reveals). Shares that combine to a field element above 2^256 are refused
here; an altered share that combines to another 256-bit value is caught by the caller, who checks the secret
against what its owner committed to (models.private.secagg). Coefficients come from the operating system's
cryptographic generator (`secrets`), never from a seeded one.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

PRIME = (1 << 256) + 297
SHARE_BYTES = 33  # 257 bits
SECRET_BYTES = 32


def split(secret: bytes, points: Sequence[int], threshold: int) -> dict[int, bytes]:
    """The share of `secret` for each point (distinct non-zero integers below PRIME, e.g. devices' positions
    + 1), any `threshold` of which reconstruct it."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"a shared secret has {SECRET_BYTES} bytes, got {len(secret)}")
    if not 1 <= threshold <= len(points):
        raise ValueError(f"threshold {threshold} must be between 1 and the {len(points)} share holders")
    if len(set(points)) != len(points) or any(not 0 < x < PRIME for x in points):
        raise ValueError("share points must be distinct positive integers")
    coefficients = [int.from_bytes(secret, "big")] + [secrets.randbelow(PRIME) for _ in range(threshold - 1)]
    out = {}
    for x in points:
        y = 0
        for c in reversed(coefficients):  # Horner
            y = (y * x + c) % PRIME
        out[x] = y.to_bytes(SHARE_BYTES, "big")
    return out


def combine(shares: dict[int, bytes]) -> bytes:
    """The secret from shares {point: share} (at least the threshold many; every share is used)."""
    if not shares:
        raise ValueError("no shares to combine")
    xs = list(shares)
    ys = []
    for x in xs:
        share = shares[x]
        if len(share) != SHARE_BYTES:
            raise ValueError(f"a share has {SHARE_BYTES} bytes, got {len(share)}")
        ys.append(int.from_bytes(share, "big"))
    if any(y >= PRIME for y in ys):
        raise ValueError("a share is not an element of the field")
    secret = 0
    for i, (xi, yi) in enumerate(zip(xs, ys)):
        num, den = 1, 1
        for j, xj in enumerate(xs):
            if j != i:
                num = num * -xj % PRIME
                den = den * (xi - xj) % PRIME
        secret = (secret + yi * num * pow(den, -1, PRIME)) % PRIME
    if secret >> (8 * SECRET_BYTES):
        raise ValueError("the shares do not combine to a secret (a share was altered)")
    return secret.to_bytes(SECRET_BYTES, "big")

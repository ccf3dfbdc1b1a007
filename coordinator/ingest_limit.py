"""A per-device limit on alert ingestion (token buckets): one device flooding alerts cannot take the
coordinator's database or its other devices' share. Alerts over the limit are not confirmed, so the device
keeps them in its outbox and sends them again later: the limit delays, it never loses."""

from __future__ import annotations

import time


class IngestLimit:
    def __init__(self, rate: float, burst: float):
        if rate <= 0 or burst < 1:
            raise ValueError("the alert rate must be positive and the burst at least 1")
        self.rate, self.burst = float(rate), float(burst)
        self._buckets: dict[str, tuple[float, float]] = {}  # device -> (tokens, when)

    def take(self, device: str, n: int, now: float | None = None) -> int:
        """How many of n alerts the device may have stored now (and spend them)."""
        now = time.monotonic() if now is None else now
        tokens, when = self._buckets.get(device, (self.burst, now))
        tokens = min(self.burst, tokens + (now - when) * self.rate)
        admitted = min(n, int(tokens))
        self._buckets[device] = (tokens - admitted, now)
        return admitted

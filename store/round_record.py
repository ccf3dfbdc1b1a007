"""A round's record (the `rounds` table's sampled and answered columns): who it asked and who answered.

Up to the switch (models.core.sampling.LIST_MAX participants) both are JSON lists of device ids, as always. Above
it a list would grow with the fleet: `sampled` holds the round's draw and how many it asked
(`{"salt", "bound", "count"}`; a phase that asks every participant has the bound 2**64 - 1), and `answered` how
many answered and which of those asked did not (`{"count", "missing"}`: it grows with the dropouts, not with the
fleet). Whether a participant answered a round is then its own hash against the bound, and not missing.

Readers (the API, the CLI, the influence view) go through `asked_count`, `answered_count` and `answers`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from models.core.sampling import Draw
from store.db import Round


def round_row(job_id: str, rnd: int, phase: str, sampled: list[str], answered: list[str], draw: Draw | None,
              metrics: dict[str, Any], seconds: float) -> Round:
    """The record of a closed round (`draw`: how its message named the devices it asked; None: listed)."""
    if draw is None:
        return Round(job_id=job_id, round=rnd, phase=phase, sampled=sampled, answered=answered, metrics=metrics,
                     seconds=seconds)
    came = set(answered)
    return Round(job_id=job_id, round=rnd, phase=phase, metrics=metrics, seconds=seconds,
                 sampled={"salt": draw.salt, "bound": draw.bound, "count": len(sampled)},
                 answered={"count": len(answered), "missing": [d for d in sampled if d not in came]})


def asked_count(r: Round) -> int:
    """How many devices the round asked."""
    return int(r.sampled["count"]) if isinstance(r.sampled, dict) else len(r.sampled or ())


def answered_count(r: Round) -> int:
    """How many devices answered the round."""
    return int(r.answered["count"]) if isinstance(r.answered, dict) else len(r.answered or ())


def answers(rounds: list[Round], devices: list[str]) -> dict[str, int]:
    """How many of the rounds each of these participants answered."""
    out = dict.fromkeys(devices, 0)
    for r in rounds:
        if isinstance(r.answered, dict):
            came = answered_in(r)
            for d in devices:
                out[d] += came(d)
        else:
            for d in r.answered or ():
                if d in out:
                    out[d] += 1
    return out


def answered_by(r: Round, device: str) -> bool:
    """Whether a participant of the job answered the round (above the switch a device that was not a participant
    may hash under the bound too: ask this of participants only)."""
    if not isinstance(r.answered, dict):
        return device in (r.answered or ())
    return answered_in(r)(device)


def answered_in(r: Round) -> Callable[[str], bool]:
    """A drawn round's test of whether a participant answered it: asked by its draw, and not missing (the draw and
    the missing set read once a round)."""
    drawn: dict[str, Any] = r.sampled if isinstance(r.sampled, dict) else {}
    try:
        draw = Draw(drawn.get("salt"), drawn.get("bound"))  # type: ignore[arg-type]
    except ValueError:
        return lambda device: False  # a record this module did not write
    missing: set[str] = set(r.answered.get("missing") or ()) if isinstance(r.answered, dict) else set()
    return lambda device: draw.asks(device) and device not in missing

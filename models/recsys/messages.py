"""The messages of a recommendation job's own phases (training rounds upload the algorithm's item-side rows,
`models.core.messages.Upload`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from models.core.messages import Message, RoundMessage, array, open_arrays


@dataclass(kw_only=True)
class RecsysRound(RoundMessage):
    """A recommendation job's round: the model's rank and catalogue size, the catalogue itself (statistics
    phase) and the fleet's mean rating (after it)."""

    rank: int
    n_items: int
    items: list[int | str] | None = None
    mean: float | None = None
    #: private mode (models.recsys.private): each round's upload is a secure sum; `counted` names, for each device
    #: asked, the label of the last secure sum whose total holds its upload (the device keeps the state it made then)
    private: bool = False
    counted: dict[str, str] | None = None


@dataclass(kw_only=True)
class RatingSums(Message):
    """A device's rating count and sum (the fleet's mean rating)."""

    kind: ClassVar[str] = "stats"
    count: np.ndarray = array(kinds="iu")
    sum: np.ndarray = array(kinds="f")
    users: np.ndarray | None = array(kinds="iu", default=None)  # private mode: how many users it holds (the clip)


@dataclass(kw_only=True)
class SetupStep(Message):
    """The algorithm's setup step of one device (AltGDMin's spectral start)."""

    kind: ClassVar[str] = "setup"
    arrays: dict[str, np.ndarray] = open_arrays()


@dataclass(kw_only=True)
class Evaluation(Message):
    """The squared error and count of a device's held-out ratings under its own user factors and the final items."""

    kind: ClassVar[str] = "eval"
    sq_error: np.ndarray = array(kinds="f")
    count: np.ndarray = array(kinds="iu")

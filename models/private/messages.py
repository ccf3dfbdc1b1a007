"""The typed messages of one secure sum's four steps over the network (models.private.secagg), as a job's round
messages and replies carry them (models.private.relay drives them; the coordinator and the agents only route).

The coordinator's side travels in the round message every family sends (`models.core.messages.RoundMessage`:
its `secagg` meta, the step's setup, and its `secagg.`-prefixed arrays: the advertised public keys, who survived);
the shares routed to one device travel to that device alone (`Routed`, on its own topic). A device answers each
step with its own message: `Advertised`, `Shares`, `Masked`, `Revealed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from models.core.messages import Message, array
from models.private import crypto, shamir

#: an encrypted pair of shares (b and s): nonce, both shares, AES-GCM tag
CIPHERTEXT_BYTES = crypto.NONCE_BYTES + 2 * shamir.SHARE_BYTES + 16
#: an advertisement: two X25519 public keys and the commitment to the self-mask seed
KEYS_BYTES = 96
#: what a device's replies carry beyond their envelopes (the arrays the agents send; models.private.secagg counts
#: the simulator's bytes with them): a row of `Shares` (the neighbour's position, int64, and its ciphertext) and a
#: row of `Revealed` (the neighbour's position, int64, which kind of share, and the share)
SHARE_ROW_BYTES = 8 + CIPHERTEXT_BYTES
REVEAL_ROW_BYTES = 8 + 1 + shamir.SHARE_BYTES


@dataclass(kw_only=True)
class Advertised(Message):
    """Step 1: the device's public keys and its commitment (secagg.Keys.to_bytes)."""

    kind: ClassVar[str] = "keys"
    keys: np.ndarray = array(1, "u")
    #: a sum with support proofs (models.private.proven): a Pedersen commitment per entry of the device's 0/1 row and
    #: its bit proof, one row of bytes each (none otherwise)
    commitments: np.ndarray | None = array(2, "u", default=None)
    proofs: np.ndarray | None = array(2, "u", default=None)


@dataclass(kw_only=True)
class Shares(Message):
    """Step 2: the device's encrypted shares, one row per neighbour (`to`: their positions)."""

    kind: ClassVar[str] = "shares"
    to: np.ndarray = array(1, "i")
    data: np.ndarray = array(2, "u")


@dataclass(kw_only=True)
class Routed(Message):
    """Step 3's input, coordinator to one device: the encrypted shares its neighbours sent it (`sender`: theirs)."""

    kind: ClassVar[str] = "routed"
    label: str  # the sum's (models.private.relay.Announced.label)
    sender: np.ndarray = array(1, "i")
    data: np.ndarray = array(2, "u")


@dataclass(kw_only=True)
class Masked(Message):
    """Step 3: the masked, encoded upload (ring elements, packed little-endian)."""

    kind: ClassVar[str] = "masked"
    y: np.ndarray = array(1, "u")


@dataclass(kw_only=True)
class Revealed(Message):
    """Step 4: per neighbour (`of`), the share the unmasking asks for: `what` 0 a survivor's self-mask seed, 1 a
    dropped device's mask key."""

    kind: ClassVar[str] = "revealed"
    of: np.ndarray = array(1, "i")
    what: np.ndarray = array(1, "u")
    share: np.ndarray = array(2, "u")

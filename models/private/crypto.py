"""The cryptography of private mode, from the `cryptography` package (the optional extra `fedsentry[private]`):
X25519 key agreement (RFC 7748) with HKDF-SHA256, AES-256-GCM for the shares devices send each other through
the coordinator, and ChaCha20 as the generator that expands a 32-byte seed into a mask.

Nothing here is home-made cryptography: each primitive is the library's; this module only fixes how they are
combined (labels, nonces, byte layouts).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np

KEY_BYTES = 32
NONCE_BYTES = 12


def _lib() -> Any:
    try:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import x25519
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    except ImportError:  # pragma: no cover - the message is the point
        raise RuntimeError("private mode needs the 'cryptography' package: pip install 'fedsentry[private]'") from None
    return hashes, serialization, x25519, Cipher, algorithms, AESGCM, HKDF


def keypair() -> tuple[bytes, bytes]:
    """A fresh X25519 key pair: (private, public), 32 raw bytes each."""
    _, serialization, x25519, *_ = _lib()
    sk = x25519.X25519PrivateKey.generate()
    raw = serialization.Encoding.Raw
    return (sk.private_bytes(raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()),
            sk.public_key().public_bytes(raw, serialization.PublicFormat.Raw))


def public_of(private: bytes) -> bytes:
    """The public key of a raw X25519 private key (to check a reconstructed key against the one advertised)."""
    _, serialization, x25519, *_ = _lib()
    raw = serialization.Encoding.Raw
    return x25519.X25519PrivateKey.from_private_bytes(private).public_key().public_bytes(
        raw, serialization.PublicFormat.Raw)


def agree(private: bytes, public: bytes, label: bytes) -> bytes:
    """The 32-byte key two parties share: X25519 then HKDF-SHA256 with `label` (one label per use)."""
    hashes, _, x25519, _, _, _, HKDF = _lib()
    shared = x25519.X25519PrivateKey.from_private_bytes(private).exchange(
        x25519.X25519PublicKey.from_public_bytes(public))
    return bytes(HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=label).derive(shared))


def encrypt(key: bytes, plaintext: bytes, associated: bytes) -> bytes:
    """AES-256-GCM under a random nonce (prefixed); `associated` is authenticated, not sent."""
    AESGCM = _lib()[5]
    nonce = os.urandom(NONCE_BYTES)
    return nonce + bytes(AESGCM(key).encrypt(nonce, plaintext, associated))


def decrypt(key: bytes, ciphertext: bytes, associated: bytes) -> bytes:
    """The plaintext of `encrypt`; a ciphertext altered in any bit (or under other associated data) is a
    ValueError."""
    AESGCM = _lib()[5]
    try:
        return bytes(AESGCM(key).decrypt(ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES:], associated))
    except Exception:
        raise ValueError("a share failed authentication: it was altered or is not for this device") from None


def expand(seed: bytes, n: int) -> np.ndarray:
    """n pseudo-random 64-bit words from a 32-byte seed (ChaCha20 keystream, zero nonce: every seed is used for
    one mask only, the protocol derives a fresh one per round)."""
    _, _, _, Cipher, algorithms, _, _ = _lib()
    if len(seed) != KEY_BYTES:
        raise ValueError(f"a mask seed has {KEY_BYTES} bytes, got {len(seed)}")
    stream = Cipher(algorithms.ChaCha20(seed, bytes(16)), mode=None).encryptor().update(bytes(8 * n))
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64)


def commitment(secret: bytes) -> bytes:
    """SHA-256 of a secret: published before the secret is shared, so a reconstruction can be checked."""
    return hashlib.sha256(secret).digest()

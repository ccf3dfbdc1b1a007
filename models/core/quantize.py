"""b-bit uploads (with error feedback for FedMM for PCA): what a client sends instead of a float64 matrix; shared by
the PCA and dictionary families."""

from __future__ import annotations

import numpy as np


def quantize(V: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric uniform quantisation per column: integer codes and one float32 scale per column."""
    levels = 2 ** (bits - 1) - 1
    scale = np.abs(V).max(axis=-2, keepdims=True).astype(np.float32)
    scale[scale == 0] = 1.0
    codes = np.rint(V / scale * levels).astype(np.int8 if bits <= 8 else np.int16)
    return codes, scale


def dequantize(codes: np.ndarray, scale: np.ndarray, bits: int) -> np.ndarray:
    levels = 2 ** (bits - 1) - 1
    return codes.astype(float) * (scale.astype(float) / levels)


def quantize_with_feedback(V: np.ndarray, error: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Quantise V + error; return (what the server reconstructs, the new error to carry)."""
    target = V + error
    sent = dequantize(*quantize(target, bits), bits)
    return sent, target - sent


def quantized_bytes(rows: int, cols: int, bits: int) -> int:
    return (rows * cols * bits + 7) // 8 + 4 * cols

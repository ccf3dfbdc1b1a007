"""Evaluation metrics in numpy (models/ depends on numpy and scipy only; tests check them against
scikit-learn)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def auc_roc(y_true: ArrayLike, scores: ArrayLike) -> float:
    """Area under the ROC curve (Mann-Whitney U with average ranks for ties)."""
    y = np.asarray(y_true).astype(bool)
    s = np.asarray(scores, dtype=float)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    # average ranks over ties
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_s)) + 1]
    ends = np.r_[starts[1:], len(s)]
    avg = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(avg, ends - starts)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def average_precision(y_true: ArrayLike, scores: ArrayLike) -> float:
    """Average precision as scikit-learn defines it: sum_n (R_n - R_{n-1}) P_n over distinct scores."""
    y = np.asarray(y_true).astype(bool)
    s = np.asarray(scores, dtype=float)
    n_pos = int(y.sum())
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # last index of each distinct score
    tp = np.cumsum(y)[last]
    fp = (last + 1) - tp
    precision = tp / (tp + fp)
    recall = tp / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def f1_score(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    y = np.asarray(y_true).astype(bool)
    p = np.asarray(y_pred).astype(bool)
    tp = int((y & p).sum())
    denom = 2 * tp + int((~y & p).sum()) + int((y & ~p).sum())
    return 2 * tp / denom if denom else 0.0


def detection_report(y_true: ArrayLike, scores: ArrayLike, threshold: float | np.ndarray) -> dict[str, float]:
    """Ranking figures of the scores, and those of flagging above the threshold (one, or one per record)."""
    pred = np.asarray(scores) > threshold
    y = np.asarray(y_true).astype(bool)
    return {
        "auc_roc": auc_roc(y, scores),
        "average_precision": average_precision(y, scores),
        "f1": f1_score(y, pred),
        "precision": float((y & pred).sum() / max(pred.sum(), 1)),
        "recall": float((y & pred).sum() / max(y.sum(), 1)),
        "false_positive_rate": float((~y & pred).sum() / max((~y).sum(), 1)),
    }

"""`fedsentry bench recsys`: every algorithm at every rank on one split; a table, a plot and the JSON."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.errors import UsageError
from fedsentry.output import write_json

log = logging.getLogger("fedsentry.recsys")


def bench(args: argparse.Namespace, prep, algorithms: list[str], ranks: list[int]) -> dict[str, Any]:
    """Run everything, write recsys-<dataset>.md/.png/.json under --out and return the JSON document."""
    from fedsentry.runs.recsys import simulate

    new_user = _new_user(prep)
    runs = []
    for rank in ranks:
        for algorithm in algorithms:
            r = simulate(args, prep, algorithm, rank, {"fold_in_pairs": new_user, "top": 10}, strict=False)
            log.info("%s rank %d: test_rmse=%.4f seconds_per_round=%.5f", algorithm, rank, r["test_rmse"],
                     r["seconds_per_round"])
            runs.append(r)
    doc = {"dataset": prep.ratings.name, "command": command(args), "settings": settings(args, prep),
           "global_mean_test_rmse": runs[0]["global_mean_test_rmse"], "runs": runs}
    out = Path(args.out)
    stem = f"recsys-{prep.ratings.name}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{stem}.md").write_text(table(doc, f"{stem}.png"))
    except OSError as e:
        raise UsageError(f"cannot write to {out}: {e.strerror}") from None
    plot(doc, out / f"{stem}.png")
    write_json(doc, str(out / f"{stem}.json"))
    return doc


def _new_user(prep) -> tuple[np.ndarray, np.ndarray]:
    """A realistic fold-in request: ten held-out ratings of one test user."""
    test = prep.test
    users, counts = np.unique(test.user, return_counts=True)
    user = users[np.argmax(counts)]
    idx = np.flatnonzero(test.user == user)[:10]
    return prep.ratings.item_ids[test.item[idx]], test.rating[idx]


def command(args: argparse.Namespace) -> str:
    """The command line that reproduces this bench (data given by name or file)."""
    data = f"--ratings {args.ratings}" if args.ratings else f"--dataset {args.dataset or '(default)'}"
    if getattr(args, "synthetic_scale", None) is not None:
        data += f" --synthetic-scale {args.synthetic_scale:g}"
    parts = [f"fedsentry bench recsys {data}", f"--clients {args.clients}", f"--fraction {args.fraction:g}",
             f"--rounds {args.rounds}", f"--ranks {args.ranks}", f"--client-split {args.client_split}",
             f"--seed {args.seed}"]
    for flag in ("rho", "lam", "gamma", "local_steps", "lr"):
        if getattr(args, flag) is not None:
            parts.append(f"--{flag.replace('_', '-')} {getattr(args, flag):g}")
    if args.regularizer not in (None, "l2"):
        parts.append(f"--regularizer {args.regularizer}")
    if args.user_solver:
        parts.append(f"--user-solver {args.user_solver}")
    if getattr(args, "user_items", None):
        parts.append(f"--user-items {args.user_items}")
    return " ".join(parts)


def settings(args: argparse.Namespace, prep) -> dict[str, Any]:
    return {"clients": len(prep.parts), "fraction": args.fraction, "rounds": args.rounds,
            "client_split": args.client_split, "seed": args.seed, "test_share": args.test_share,
            "n_users": prep.ratings.n_users, "n_items": prep.ratings.n_items, "n_train": len(prep.train),
            "n_test": len(prep.test)}


def table(doc: dict[str, Any], png: str) -> str:
    s = doc["settings"]
    lines = [
        f"# Federated recommendation on {doc['dataset']}",
        "",
        f"{s['n_users']} users, {s['n_items']} items; seeded random split {s['n_train']} training / {s['n_test']} "
        f"test ratings; {s['clients']} clients ({s['client_split']} groups of users), "
        f"{100 * s['fraction']:g} % sampled per round, {s['rounds']} rounds (centralized: ALS sweeps). "
        "RMSE and MAE on the original rating scale, pooled over all test ratings.",
        "",
        f"Command: `{doc['command']}`",
        "",
        "| algorithm | rank | test RMSE | test MAE | best RMSE (round) | seconds / round | upload / client / round "
        "| fold-in |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["runs"]:
        best = min(r["history"], key=lambda h: h["test_rmse"])
        up = r["upload_bytes_per_client_round"]
        upload = "pooled data" if up is None else f"{up / 1024:.1f} KiB"
        fold = r.get("recommendations", {}).get("fold_in", {}).get("seconds")
        name = label(r)
        lines.append(f"| {name} | {r['rank']} | {r['test_rmse']:.4f} | {r['test_mae']:.4f} | "
                     f"{best['test_rmse']:.4f} ({best['round']}) | {r['seconds_per_round']:.4f} | {upload} | "
                     f"{'-' if fold is None else f'{1000 * fold:.1f} ms'} |")
    lines += ["", f"Global mean (every prediction = the training mean): test RMSE {doc['global_mean_test_rmse']:.4f}.",
              "", f"![test RMSE per round]({png})", ""]
    return "\n".join(lines)


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = sorted({r["rank"] for r in doc["runs"]})
    fig, axes = plt.subplots(1, len(ranks), figsize=(6 * len(ranks), 4.2), squeeze=False, sharey=True)
    for ax, rank in zip(axes[0], ranks):
        for r in (r for r in doc["runs"] if r["rank"] == rank):
            h = r["history"]
            ax.plot([e["round"] for e in h], [e["test_rmse"] for e in h], label=f"{label(r)} ({r['test_rmse']:.3f})")
        ax.axhline(doc["global_mean_test_rmse"], color="grey", ls=":", label="global mean")
        ax.set_title(f"{doc['dataset']}, rank {rank}")
        ax.set_xlabel("round")
        ax.set_ylim(top=min(ax.get_ylim()[1], doc["global_mean_test_rmse"] + 0.1))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("test RMSE (original scale)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def label(run: dict[str, Any]) -> str:
    l1 = run["algorithm"] == "fedmc-admm" and run.get("regularizer") == "l1"
    return run["algorithm"] + (" (l1)" if l1 else "")

"""`fedsentry simulate dict --paper`: seed 003's dictionary-learning figures (Sec. 6, Figs. 1-2) redrawn from
generated data and movielens-small (models.dictionary.paper). The dict detector itself runs under
`fedsentry simulate pca --detector dict`."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.cli.common import positive_float, positive_int
from fedsentry.errors import UsageError
from fedsentry.output import write_results

log = logging.getLogger("fedsentry.dict")


def register(groups: dict[str, Any], verbs: Any) -> None:
    p = groups["simulate"].add_parser("dict", help="seed 003's dictionary-learning figures (--paper); the dict "
                                      "detector runs under `simulate pca --detector dict`")
    p.add_argument("--paper", action="store_true", help="redraw Figs. 1-2: fedmm against the naive parameter-space "
                   "algorithm, and fedmm with control variates (alpha 0.01) and without")
    p.add_argument("--rounds", type=positive_int, default=300, help="rounds of every run (default 300)")
    p.add_argument("--seeds", type=positive_int, default=3, help="runs averaged per curve (default 3; the paper 10)")
    p.add_argument("--every", type=positive_int, default=10, help="measure every this many rounds (default 10)")
    p.add_argument("--beta", type=positive_float, default=0.5, help="step sizes beta / sqrt(beta + t) (default 0.5)")
    p.add_argument("--data-dir", help="where movielens-small lives (default ../shared/data)")
    p.add_argument("--settings", default="homogeneous,heterogeneous,ratings",
                   help="comma-separated, of homogeneous, heterogeneous, ratings (default: all three)")
    p.add_argument("--out", default="benchmarks/results", help="folder for dict-paper.md, .png (default "
                   "benchmarks/results)")
    p.add_argument("--json", metavar="PATH", help="also write the curves as JSON (- for stdout)")
    p.set_defaults(func=run_paper)


def ratings_matrix(data_dir: str | None, items: int = 500) -> np.ndarray:
    """Users x the `items` most rated movies of movielens-small, 0 where a user did not rate (the paper subsamples
    MovieLens-1M to 5,000 users x 500 movies; movielens-small has 610 users)."""
    from fedsentry.data import datasets
    from fedsentry.data.ratings import load_ratings_csv

    path = datasets.data_dir(data_dir) / "movielens-small" / "ratings.csv"
    if not path.is_file():
        raise UsageError(f"the ratings setting needs {path} (set --data-dir, or leave out ratings with --settings)")
    r = load_ratings_csv(path)
    top = np.argsort(-np.bincount(r.item, minlength=len(r.item_ids)), kind="stable")[:items]
    column = np.full(len(r.item_ids), -1)
    column[top] = np.arange(len(top))
    M = np.zeros((len(r.user_ids), len(top)))
    keep = column[r.item] >= 0
    M[r.user[keep], column[r.item[keep]]] = r.rating[keep]
    return M


def run_paper(args: argparse.Namespace) -> int:
    from models.dictionary.paper import SETTINGS, figures, synthetic
    from models.partition import balanced_split

    if not args.paper:
        raise UsageError("simulate dict runs the paper's figures (--paper); the dict detector: fedsentry simulate "
                         "pca --detector dict")
    chosen = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SETTINGS]
    if unknown or not chosen:
        raise UsageError(f"--settings {args.settings!r}: choose from {', '.join(SETTINGS)}")
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {}
    for setting in chosen:
        if setting == "homogeneous":  # every client holds a copy of the same 250 records
            Z = synthetic(20, 15, 250, rng)
            parts, atoms = [Z] * 20, 15
        elif setting == "heterogeneous":
            parts, atoms = balanced_split(synthetic(20, 15, 5000, rng), 20, rng), 15
        else:
            parts, atoms = balanced_split(ratings_matrix(args.data_dir), 20, rng), 50
        log.info("dict --paper: %s, %d clients of %d records, %d features", setting, len(parts), len(parts[0]),
                 parts[0].shape[1])
        out[setting] = figures({setting: parts}, atoms, args.rounds, args.seeds, args.beta, every=args.every)[setting]
    result = {"rounds": args.rounds, "seeds": args.seeds, "every": args.every, "beta": args.beta, "curves": out,
              "checks": checks(out)}
    plot(out, args.every, Path(args.out) / "dict-paper.png")
    write_results(args.out, "dict-paper.md", markdown(result), result, args.json)
    return 0


def checks(out: dict[str, Any]) -> dict[str, Any]:
    """Issue 26 point 3: the naive algorithm ends above fedmm when heterogeneous; alpha 0.01 ends at most half of
    alpha 0's E_s. Ends: the mean of the last three measurements."""
    def end(curve: list[float]) -> float:
        return float(np.mean(curve[-3:]))

    result: dict[str, Any] = {}
    for setting, runs in out.items():
        result[setting] = {
            "objective_end_fedmm": end(runs["fig1_fedmm"]["objective"]),
            "objective_end_naive": end(runs["fig1_naive"]["objective"]),
            "surrogate_change_end_alpha_0": end(runs["fig2_alpha_0"]["surrogate_change"]),
            "surrogate_change_end_alpha_0.01": end(runs["fig2_alpha_0.01"]["surrogate_change"]),
        }
        r = result[setting]
        r["naive_above_fedmm"] = r["objective_end_naive"] > r["objective_end_fedmm"]
        r["control_variates_halve_surrogate_change"] = (r["surrogate_change_end_alpha_0.01"]
                                                        <= 0.5 * r["surrogate_change_end_alpha_0"])
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = ["# Seed 003 Figs. 1-2: federated dictionary learning", "",
             f"`fedsentry simulate dict --paper`: {result['rounds']} rounds, {result['seeds']} seeds, beta "
             f"{result['beta']}, measured every {result['every']} rounds ([curves](dict-paper.png)).", "",
             "| setting | objective end: fedmm / naive | E_s end: alpha 0 / 0.01 | naive above fedmm | "
             "alpha 0.01 <= 1/2 alpha 0 |", "|---|---|---|---|---|"]
    for setting, r in result["checks"].items():
        lines.append(f"| {setting} | {r['objective_end_fedmm']:.4f} / {r['objective_end_naive']:.4f} | "
                     f"{r['surrogate_change_end_alpha_0']:.4g} / {r['surrogate_change_end_alpha_0.01']:.4g} | "
                     f"{'yes' if r['naive_above_fedmm'] else 'no'} | "
                     f"{'yes' if r['control_variates_halve_surrogate_change'] else 'no'} |")
    return "\n".join(lines) + "\n"


def plot(out: dict[str, Any], every: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("objective", "parameter_change", "surrogate_change")
    fig, axes = plt.subplots(len(out), 6, figsize=(24, 3.2 * len(out)), squeeze=False)
    for row, (setting, runs) in enumerate(out.items()):
        for col, key in enumerate(keys):
            for j, (names, fig_no) in enumerate(((("fig1_fedmm", "fig1_naive"), 1),
                                                 (("fig2_alpha_0", "fig2_alpha_0.01"), 2))):
                ax = axes[row][col + 3 * j]
                for name in names:
                    y = runs[name][key]
                    x = np.r_[0, np.arange(1, len(y)) * every] if key == "objective" else np.arange(1, len(y) + 1) \
                        * every
                    ax.plot(x, y, label=name.split("_", 1)[1])
                ax.set_yscale("log" if key != "objective" else "linear")
                ax.set_title(f"Fig. {fig_no} {setting}: {key}", fontsize=8)
                ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)

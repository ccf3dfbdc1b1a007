"""`fedsentry simulate otmap --paper`: seed 003's transport-map figure (Sec. 7.3, Fig. 3) redrawn from generated
P, Q and known maps (models.otmap.paper): FedMM-OT against FedAdam, L2-UVP per round."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.cli.common import positive_int
from fedsentry.errors import UsageError
from fedsentry.output import write_results

log = logging.getLogger("fedsentry.otmap")

#: FedAdam's server learning rates tried for each dimension (the paper tunes it), and as many client steps lr * d
#: for fedmm-ot: each algorithm's best final L2-UVP is compared
FEDADAM_RATES = (0.003, 0.01, 0.03)
FEDMM_STEPS = (0.1, 0.25, 0.5)


def register(groups: dict[str, Any], verbs: Any) -> None:
    p = groups["simulate"].add_parser("otmap", help="seed 003's transport-map figure (--paper)")
    p.add_argument("--paper", action="store_true", help="redraw Fig. 3: fedmm-ot against FedAdam (its server "
                   f"learning rate tuned over {', '.join(map(str, FEDADAM_RATES))}), L2-UVP per round")
    p.add_argument("--dims", default="16,32,64", help="comma-separated feature counts (default 16,32,64)")
    p.add_argument("--rounds", type=positive_int, default=60, help="rounds of every run (default 60)")
    p.add_argument("--seeds", type=positive_int, default=1, help="benchmarks and runs averaged per curve (default 1)")
    p.add_argument("--every", type=positive_int, default=3, help="measure every this many rounds (default 3)")
    p.add_argument("--share", type=float, default=1.0, help="share of the 10 clients sampled each round (default 1; "
                   "below 1 also runs pseudo-mm, the averaging of the sampled clients' best responses)")
    p.add_argument("--hidden", type=positive_int, default=64, help="units per hidden layer of both ICNNs (default 64)")
    p.add_argument("--out", default="benchmarks/results", help="folder for otmap-paper.md, .png (default "
                   "benchmarks/results)")
    p.add_argument("--json", metavar="PATH", help="also write the curves as JSON (- for stdout)")
    p.set_defaults(func=run_paper)


def dims_of(text: str) -> list[int]:
    try:
        dims = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        dims = []
    if not dims or min(dims) < 1:
        raise UsageError(f"--dims {text!r}: give comma-separated positive feature counts, e.g. 16,32,64")
    return dims


def run_paper(args: argparse.Namespace) -> int:
    from models.otmap.paper import figure

    if not args.paper:
        raise UsageError("simulate otmap runs the paper's figure (--paper)")
    if not 0 < args.share <= 1:
        raise UsageError(f"--share {args.share}: give a share of the clients in (0, 1]")
    dims = dims_of(args.dims)
    out: dict[str, Any] = {}
    for d in dims:
        settings = runs_for(d, args.hidden, args.share)
        log.info("otmap --paper: %d features, %d rounds", d, args.rounds)
        out[str(d)] = figure(d, args.rounds, args.share, args.seeds, args.every, settings)
    result = {"rounds": args.rounds, "seeds": args.seeds, "every": args.every, "share": args.share,
              "hidden": args.hidden, "curves": out, "checks": checks(out, args.every)}
    plot(out, args.every, Path(args.out) / "otmap-paper.png")
    write_results(args.out, "otmap-paper.md", markdown(result), result, args.json)
    return 0


def runs_for(d: int, hidden: int, share: float) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each curve of one dimension: its label, algorithm and parameters."""
    common = {"hidden": hidden, "batch": 512}
    settings: dict[str, tuple[str, dict[str, Any]]] = {
        f"fedmm-ot-{c}": ("fedmm-ot", {**common, "lr": c / d}) for c in FEDMM_STEPS}
    settings.update({f"fedadam-{r}": ("fedadam", {**common, "server_lr": r}) for r in FEDADAM_RATES})
    if share < 1:
        settings["pseudo-mm"] = ("pseudo-mm", {**common, "lr": 0.1 / d})
    return settings


def best(runs: dict[str, list[float]], algorithm: str) -> str:
    """The label of the algorithm's run (of its tuned step sizes) with the lowest final L2-UVP."""
    return min((k for k in runs if k.startswith(algorithm)), key=lambda k: runs[k][-1])


def checks(out: dict[str, Any], every: int) -> dict[str, Any]:
    """Issue 26 point 3: fedmm-ot below FedAdam (each at its best step size) at every measurement from 20 % of the
    rounds on."""
    result: dict[str, Any] = {}
    for d, runs in out.items():
        mine, adam = best(runs, "fedmm-ot"), best(runs, "fedadam")
        ours, theirs = np.array(runs[mine]), np.array(runs[adam])
        rounds = np.r_[0, np.arange(1, len(ours)) * every]
        late = rounds >= 0.2 * rounds[-1]
        result[d] = {"fedmm_ot": mine, "fedadam": adam, "fedmm_ot_end": float(ours[-1]),
                     "fedadam_end": float(theirs[-1]),
                     "fedmm_ot_at_20pct": float(ours[late][0]), "fedadam_at_20pct": float(theirs[late][0]),
                     "below_after_20pct": bool(np.all(ours[late] < theirs[late]))}
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = ["# Seed 003 Fig. 3: federated transport maps (L2-UVP %, lower is better)", "",
             f"`fedsentry simulate otmap --paper`: {result['rounds']} rounds, {result['seeds']} seed(s), 10 clients, "
             f"share {result['share']}, {result['hidden']} hidden units, measured every {result['every']} rounds "
             "([curves](otmap-paper.png)). Each algorithm at its best step size (fedmm-ot: client lr x d; FedAdam: "
             "server lr).", "",
             "| d | lr x d, FedAdam lr | at 20 %: fedmm-ot / FedAdam | end: fedmm-ot / FedAdam | "
             "fedmm-ot below from 20 % |",
             "|---|---|---|---|---|"]
    for d, r in result["checks"].items():
        steps = f"{r['fedmm_ot'].rsplit('-', 1)[1]}, {r['fedadam'].split('-', 1)[1]}"
        lines.append(f"| {d} | {steps} | {r['fedmm_ot_at_20pct']:.3g} / "
                     f"{r['fedadam_at_20pct']:.3g} | {r['fedmm_ot_end']:.3g} / {r['fedadam_end']:.3g} | "
                     f"{'yes' if r['below_after_20pct'] else 'no'} |")
    return "\n".join(lines) + "\n"


def plot(out: dict[str, Any], every: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(out), figsize=(5 * len(out), 3.6), squeeze=False)
    for ax, (d, runs) in zip(axes[0], out.items()):
        for name, y in runs.items():
            ax.plot(np.r_[0, np.arange(1, len(y)) * every], y, label=name)
        ax.set_yscale("log")
        ax.set_ylim(top=3 * max(y[0] for y in runs.values()))  # a diverging run would hide the others
        ax.set_title(f"d = {d}: L2-UVP %")
        ax.set_xlabel("round")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)

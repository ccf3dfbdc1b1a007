"""The README's support-rule table: caught and AUC at the honest devices, clean, with compliant rogues, with the
mass rule off and with the whole rule off, 1 of 11 and 2 of 21 devices (the setting of tests/models/test_support.py,
whose `run` this calls: nsl-kdd where the shared data is, synthetic otherwise).

    python benchmarks/support_table.py                                   # nsl-kdd rows
    FEDSENTRY_DATA_DIR=$(mktemp -d) python benchmarks/support_table.py   # synthetic rows
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.models.test_support import run


def main() -> None:
    warnings.filterwarnings("ignore")
    out = {}
    for n, k in ((11, 1), (21, 2)):
        for label, args, params in (("clean", (n, 0, 3), {}), ("rogues", (n, k, 3), {}),
                                    ("mass off", (n, k, 3), {"mass_cap": 1.0}), ("rule off", (n, k, 0), {})):
            r = run(*args, **params)
            out[f"{k} of {n} {label}"] = {"caught": round(100 * r["recall"], 1), "auc": round(r["auc_roc"], 3)}
            print(f"{k} of {n} {label}: {100 * r['recall']:.1f} % (AUC {r['auc_roc']:.3f})", file=sys.stderr,
                  flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

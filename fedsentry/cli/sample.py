"""`fedsentry sample`: a small labelled traffic set to run agents on, on a machine without a dataset."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fedsentry.cli.common import non_negative_int, positive_int
from fedsentry.errors import UsageError


def _devices(text: str) -> int:
    from fedsentry.data.sample import MAX_DEVICES

    n = positive_int(text)
    if n > MAX_DEVICES:
        raise argparse.ArgumentTypeError(f"at most {MAX_DEVICES}, got {text}")
    return n


def register(groups: dict[str, Any], verbs: Any) -> None:
    p = verbs.add_parser("sample", help="write a small labelled traffic set (CSV and Zeek conn.log) for agents")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder to write into (created if needed; files of an earlier sample are replaced)")
    p.add_argument("--devices", type=_devices, default=3, metavar="K", help="number of devices (default 3)")
    p.add_argument("--seed", type=non_negative_int, default=0, metavar="N",
                   help="seed: the same seed writes the same bytes (default 0)")
    p.set_defaults(func=run_sample)


def run_sample(args: argparse.Namespace) -> int:
    from fedsentry.data.sample import device_ids, write_sample

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a folder")
    try:
        written = write_sample(out, args.devices, args.seed)
    except OSError as e:
        raise UsageError(f"--out {args.out}: cannot write there: {e.strerror or e}") from None
    ids = device_ids(args.devices)
    print(f"wrote {len(written)} files for {', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''} into {out} "
          f"(what they are: {out / 'README.txt'})", file=sys.stderr)
    return 0

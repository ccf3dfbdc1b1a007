"""Writing results: JSON files or stdout, progress bars, BLAS threads for timed runs."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.errors import UsageError


def write_json(result: dict[str, Any], target: str | None) -> None:
    if target is None:
        return
    text = json.dumps(result, indent=2, default=_jsonable)
    if target == "-":
        sys.stdout.write(text + "\n")
        return
    path = Path(target)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(path)
    except OSError as e:
        raise UsageError(f"cannot write {target}: {e.strerror}") from None


def _jsonable(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def progress(total: int, desc: str):
    """A progress bar on stderr (tqdm when installed, silent otherwise)."""
    try:
        from tqdm import tqdm
    except ModuleNotFoundError:  # base install: no progress bar
        return None
    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, disable=None)



def single_blas_thread(active: bool = True):
    """Limit BLAS to one thread while the federated steps run (when threadpoolctl is installed).

    A round multiplies many small matrices (a Gram per user): BLAS threads buy nothing there and stall
    when the other core is busy. Measured on this 2-core machine with the other core loaded: fedmc-admm
    at rank 50 took 0.069 s per round with two threads and 0.038 s with one (0.024 s idle either way)."""
    try:
        from threadpoolctl import threadpool_limits
    except ModuleNotFoundError:  # base install: leave BLAS as it is
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas") if active else contextlib.nullcontext()



def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Columns padded to their widest cell, the header first (for terminals; --json for scripts)."""
    cells = [headers, *[["" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells)


def write_results(out: str, name: str, text: str, result: Any, json_path: str | None) -> None:
    """A benchmark's outcome: its table as `out/name` (the README quotes it), its JSON where asked, the table
    on stderr."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    write_json(result, json_path)
    print(text, file=sys.stderr)

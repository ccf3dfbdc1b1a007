"""FedEM's control variates: each device's last statistics, kept by the server in a table of bounded size.

The aggregate the M-step reads is sum_i W_i S_i over the devices the table holds, S_i the device's last
upload (its statistics per record: R, S1, S2) and W_i the weight it was counted with. A round replaces its
devices' rows and updates the sums by what changed, so its cost follows the devices that answered.

Bounded: the table has `capacity` rows, allocated once at that size (zero pages cost no memory until a row is
written; there is no growing, so no copying spike). A fleet larger than the table keeps the rows of the
devices seen most recently: when a round brings more new devices than there are free rows, the devices seen
longest ago are retired, their statistics taken out of the sums, and a retired device that answers again
joins afresh. With every device in the table this is incremental EM (Neal and Hinton 1998) exactly; beyond,
the aggregate covers the `capacity` devices seen last, a sliding window over the fleet, which a large fleet's
rounds renew anyway (at 10 % participation of 100,000 devices one round alone brings 10,000).

Rows hold what the device uploaded, in its own precision (float32 uploads: float32 rows), and the sums (float64)
add exactly W_i times what the row holds, so taking a row out subtracts the very value that went in.

A row also says which components the device supports (a share of at least SUPPORT_SHARE of its records) and
the sums include their per-component count (the support rule, models.mixture.fedem.shared_components).
"""

from __future__ import annotations

import numpy as np

from models.core.federated import State
from models.mixture import heaviest

#: what the table may hold by default: the rows (one per device) stay within this many bytes
TABLE_BUDGET = 1 << 30
#: a device supports a component when at least this share of its records falls in it (hard assignment: at least
#: one record, and 0.5 % of a large device's)
SUPPORT_SHARE = 0.005
STATS = ("R", "S1", "S2")


def default_capacity(n_clients: int, row_bytes: int, budget: int = TABLE_BUDGET) -> int:
    """Rows for every device of the fleet when they fit the budget, otherwise as many as fit (at least 1)."""
    return int(max(1, min(n_clients, budget // max(row_bytes, 1))))


def empty_table(n_clients: int, capacity: int, K: int, d: int, p: int, dtype: type) -> State:
    """A table with no device in it (arrays of the full capacity, untouched until rows are written)."""
    return {
        "slot": np.zeros(n_clients, dtype=np.int64),  # each device's row + 1; 0: not in the table
        "rows": np.zeros((), dtype=np.int64),  # rows in use (the first `rows`)
        "owner": np.full(capacity, -1, dtype=np.int64),  # the device of each row
        "seen": np.zeros(capacity, dtype=np.int64),  # the round each row was last written
        "W_rows": np.zeros(capacity),  # the weight each row is counted with
        "R_rows": np.zeros((capacity, K), dtype=dtype), "S1_rows": np.zeros((capacity, K, d), dtype=dtype),
        "S2_rows": np.zeros((capacity, K, p), dtype=dtype),
        "H_rows": np.zeros((capacity, K), dtype=bool),  # the components the row's device supports
        "R": np.zeros(K), "S1": np.zeros((K, d)), "S2": np.zeros((K, p)), "support": np.zeros(K),
        "retired": np.zeros(0, dtype=np.int64),  # the devices the last step retired
        **heaviest.empty(K),  # the heaviest rows of each component (the support rule's mass share)
    }


def upgrade(server: State, capacity: int) -> State:
    """Bring a table saved by an older version (rows holding weighted statistics, grown by doubling, support
    as floats) or restored at its used length to the current layout at its full capacity, once."""
    n = int(server["rows"])
    if "W_rows" not in server:  # weighted rows: the same sums with weight 1
        server["W_rows"] = np.ones(len(server["R_rows"]))
        server["W_rows"][n:] = 0.0
        server["owner"] = np.full(len(server["R_rows"]), -1, dtype=np.int64)
        held = np.flatnonzero(server["slot"] > 0)
        server["owner"][server["slot"][held] - 1] = held
        server["seen"] = np.zeros(len(server["R_rows"]), dtype=np.int64)
        server["H_rows"] = (server["H_rows"] > 0) if "H_rows" in server else np.zeros(server["R_rows"].shape, bool)
    if "support" not in server:
        server["support"] = server["H_rows"][:n].sum(axis=0).astype(float)
    server.setdefault("retired", np.zeros(0, dtype=np.int64))
    if "top_rows" not in server:
        heaviest.invalidate(server)  # read from the table at the next share
    capacity = max(capacity, n)
    for name in ("owner", "seen", "W_rows", "R_rows", "S1_rows", "S2_rows", "H_rows"):
        table = server[name]
        if len(table) < capacity:
            grown = np.full((capacity, *table.shape[1:]), -1, dtype=table.dtype) if name == "owner" else \
                np.zeros((capacity, *table.shape[1:]), dtype=table.dtype)
            grown[:n] = table[:n]
            server[name] = grown
    return server


def place(server: State, ids: np.ndarray, round_no: int) -> np.ndarray:
    """The rows of these devices, handing rows to those not in the table: free rows first, then the rows of
    the devices seen longest ago (not among `ids`), which are retired (their statistics leave the sums)."""
    fresh = ids[server["slot"][ids] == 0]
    n, capacity = int(server["rows"]), len(server["owner"])
    free = capacity - n
    retire = max(0, len(fresh) - free)
    if retire:
        candidates = np.ones(n, bool)
        candidates[server["slot"][ids][server["slot"][ids] > 0] - 1] = False
        pool = np.flatnonzero(candidates)
        if retire > len(pool):
            raise ValueError(f"{len(ids)} devices in one step do not fit a table of {capacity} rows")
        oldest = pool[oldest_first(server["seen"][pool], retire)]
        subtract(server, oldest)
        retired = server["owner"][oldest]
        server["slot"][retired] = 0
        server["owner"][oldest] = -1
        server["retired"] = retired
        new_rows = np.concatenate([np.arange(n, capacity), oldest])
    else:
        server["retired"] = np.zeros(0, dtype=np.int64)
        new_rows = np.arange(n, n + len(fresh))
    server["slot"][fresh] = new_rows + 1
    server["owner"][new_rows] = fresh
    server["rows"] = np.array(min(capacity, n + len(fresh)))
    rows = server["slot"][ids] - 1
    server["seen"][rows] = round_no
    return rows


def oldest_first(seen: np.ndarray, count: int) -> np.ndarray:
    """The positions of the `count` smallest of `seen`, smallest first, ties in order of position (a stable sort's
    first `count`), by a partition: no sort of the whole table."""
    if count >= len(seen):
        return np.argsort(seen, kind="stable")
    key = seen.astype(np.int64) * len(seen) + np.arange(len(seen))  # distinct: the order is (seen, position)
    first = np.argpartition(key, count - 1)[:count]
    return first[np.argsort(key[first])]


def subtract(server: State, rows: np.ndarray) -> None:
    """Take these rows' statistics and support out of the sums (rows not yet written hold zeros)."""
    if not len(rows):
        return
    w = server["W_rows"][rows]
    for name in STATS:
        table = server[f"{name}_rows"][rows]
        server[name] = server[name] - np.tensordot(w, table.astype(float), axes=1)
    server["support"] = server["support"] - server["H_rows"][rows].sum(axis=0)


def write(server: State, ids: np.ndarray, weight: np.ndarray, stats: tuple[np.ndarray, np.ndarray, np.ndarray],
          round_no: int) -> np.ndarray:
    """Replace these devices' rows by their new statistics (per record, unweighted) counted with `weight`, and
    update the sums by the difference. Returns their rows.

    A step with more devices than the table has rows (a seeding round asks every device) keeps rows for
    `capacity` of them, spread evenly over the step; the others count in this step's aggregate only (the
    `extra` sums, which the next step clears) and then leave, as retired devices do."""
    weight = np.asarray(weight, dtype=float)
    server["extra"] = np.zeros(())
    capacity = len(server["owner"])
    before = None
    if len(ids) > capacity:
        kept = np.zeros(len(ids), bool)
        kept[np.unique(np.linspace(0, len(ids) - 1, capacity).round().astype(np.int64))] = True
        passing = np.flatnonzero(~kept)
        for name, new in zip(STATS, stats):
            server[f"{name}_extra"] = np.tensordot(weight[passing], np.asarray(new, float)[passing], axes=1)
        server["support_extra"] = (stats[0][passing] >= SUPPORT_SHARE).sum(axis=0).astype(float)
        server["extra"] = np.array(float(len(passing)))
        before = server["owner"][: int(server["rows"])].copy()
        clear(server)  # every row is rewritten: the step's kept devices fill the table
        ids, weight = ids[kept], weight[kept]
        stats = (stats[0][kept], stats[1][kept], stats[2][kept])
    held = server["slot"][ids] > 0
    rows = place(server, ids, round_no)
    if before is not None:
        server["retired"] = np.setdiff1d(before, ids)
    subtract(server, rows[held])
    server["W_rows"][rows] = weight
    for name, new in zip(STATS, stats):
        table = server[f"{name}_rows"]
        kept = np.asarray(new).astype(table.dtype, copy=False)  # what the rows hold
        table[rows] = kept
        server[name] = server[name] + np.tensordot(weight, kept.astype(float), axes=1)
    support = stats[0] >= SUPPORT_SHARE
    server["H_rows"][rows] = support
    server["support"] = server["support"] + support.sum(axis=0)
    heaviest.refresh(server, rows)
    return rows


def clear(server: State) -> None:
    """Empty the table: every device out, the sums zero."""
    held = server["owner"][: int(server["rows"])]
    server["slot"][held] = 0
    server["owner"][:] = -1
    server["W_rows"][:] = 0.0
    server["rows"] = np.array(0)
    for name in (*STATS, "support"):
        server[name] = np.zeros_like(server[name])
    server.update(heaviest.empty(len(server["R"]), heaviest.room(server)))


def aggregate(server: State) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sums the M-step reads: the table's, and those of a step's devices that had no room in it."""
    if float(server.get("extra", 0.0)) == 0:
        return server["R"], server["S1"], server["S2"]
    return tuple(server[name] + server[f"{name}_extra"] for name in STATS)  # type: ignore[return-value]


def devices_and_support(server: State) -> tuple[int, np.ndarray]:
    """How many devices the aggregate covers, and how many of them support each component."""
    extra = float(server.get("extra", 0.0))
    if extra == 0:
        return int(server["rows"]), server["support"]
    return int(server["rows"]) + int(extra), server["support"] + server["support_extra"]


def heaviest_share(server: State, m: int) -> np.ndarray:
    """Per component, the share of its weighted mass (the aggregate's R_k: the table's sum_i W_i R_ik and a step's
    devices without room) that its `m` heaviest rows hold; 0 for a component without mass. Kept up to date by the
    rows each step writes (models.mixture.heaviest): no pass over the table."""
    return heaviest.share(server, aggregate(server)[0], m)


def bounded_share(server: State, m: int) -> np.ndarray:
    """`heaviest_share` bounded from the sums of the rows' masses and squared masses (heaviest.mass_shares), as
    private mode bounds it: no row is read for itself."""
    n = int(server["rows"])
    mass = server["W_rows"][:n, None] * server["R_rows"][:n].astype(float)
    return heaviest.mass_shares(aggregate(server)[0], (mass**2).sum(axis=0), m)


def touched(server: State, client_ids: np.ndarray) -> dict[str, np.ndarray]:
    """The rows and devices a step with these devices changed (the last step's retirements included)."""
    ids = np.asarray(client_ids, dtype=np.int64)
    retired = server.get("retired", ids[:0])
    slots = server["slot"][ids]
    rows = slots[slots > 0] - 1  # a retired device's row went to a device of this step
    return {"slot": np.union1d(ids, retired), "mean": ids[:0], "mean_sq": ids[:0], "owner": rows, "seen": rows,
            "W_rows": rows, "R_rows": rows, "S1_rows": rows, "S2_rows": rows, "H_rows": rows}

"""A small labelled traffic set to run agents on without a dataset (`fedsentry sample`).

Built on the synthetic generator (models.synthetic): for each device ``dev-i`` (a camera, a thermostat, a
smart plug, ... in turn) it writes

- ``dev-i-train.csv``: normal records only, to train on (``fedsentry agent --train``);
- ``dev-i-replay.csv``: other normal records with attacks mixed in (port scans, floods, exfiltration,
  brute-force logins), with a ``label`` column (0 normal, 1 attack) that ``--label-column label`` keeps out of
  the model;
- ``dev-i-train-conn.log``: the training records as a Zeek conn.log (Zeek's text fields included);
- ``dev-i-conn.log``: the replay's records again, in the same order, as a Zeek conn.log (TSV with Zeek's
  headers) that ``--zeek`` follows and ``--train`` reads: the agent's Zeek reader turns its fields back into
  exactly the CSVs' numbers;

and ``README.txt`` saying so. Everything follows from the seed: the same seed gives the same bytes.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from models.synthetic import ATTACKS, DEVICE_KINDS, FEATURES, generate_traffic

#: normal records drawn per device (about 70 % train, the rest is replayed with the attacks)
RECORDS_PER_DEVICE = 500
TRAIN_SHARE = 0.7
#: attacks in a replay file, as a share of its normal records (every attack kind appears)
ATTACK_SHARE = 0.15
MAX_DEVICES = 1000

#: the conn.log columns written, and their Zeek types
ZEEK_COLUMNS = (
    ("ts", "time"), ("uid", "string"), ("id.orig_h", "addr"), ("id.orig_p", "port"), ("id.resp_h", "addr"),
    ("id.resp_p", "port"), ("proto", "enum"), ("service", "string"), ("duration", "interval"),
    ("orig_bytes", "count"), ("resp_bytes", "count"), ("conn_state", "string"), ("missed_bytes", "count"),
    ("history", "string"), ("orig_pkts", "count"), ("orig_ip_bytes", "count"), ("resp_pkts", "count"),
    ("resp_ip_bytes", "count"),
)
#: conn.log's number fields and the feature each becomes (edge_agent.sources.ZEEK_FIELDS, reversed)
_ZEEK_NUMBERS = {
    "duration": "duration", "orig_bytes": "src_bytes", "resp_bytes": "dst_bytes", "missed_bytes": "missed_bytes",
    "orig_pkts": "src_pkts", "orig_ip_bytes": "src_ip_bytes", "resp_pkts": "dst_pkts", "resp_ip_bytes": "dst_ip_bytes",
}
START = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC: the first flow's time (fixed, so that files are reproducible)
_UID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SERVERS = "198.51.100"  # documentation ranges (RFC 5737): the devices' cloud services
_ATTACKER = "203.0.113"  # and the attackers


def device_ids(devices: int) -> list[str]:
    return [f"dev-{i}" for i in range(1, devices + 1)]


def write_sample(out: str | Path, devices: int = 3, seed: int = 0) -> list[Path]:
    """Write the sample set for `devices` devices into `out` (created if needed); the paths written."""
    if not 1 <= devices <= MAX_DEVICES:
        raise ValueError(f"devices must be between 1 and {MAX_DEVICES}, got {devices}")
    if seed < 0:
        raise ValueError(f"the seed must be 0 or more, got {seed}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    traffic = generate_traffic(n_devices=devices, records_per_device=RECORDS_PER_DEVICE, attack_fraction=0.25,
                               seed=seed)
    rng = np.random.default_rng([seed, 28])
    written = []
    for dev, name in enumerate(device_ids(devices)):
        normal = traffic.X_normal[traffic.device_normal == dev]
        normal = normal[rng.permutation(len(normal))]
        n_train = int(round(TRAIN_SHARE * len(normal)))
        train, replay_normal = _varied(normal[:n_train], rng), _varied(normal[n_train:], rng)
        mine = traffic.device_attack == dev
        attacks, kinds = _some_attacks(rng, traffic.X_attack[mine], traffic.attack_names[mine],
                                       max(len(ATTACKS), int(round(ATTACK_SHARE * len(replay_normal)))))
        X = np.vstack([replay_normal, attacks])
        label = np.r_[np.zeros(len(replay_normal), int), np.ones(len(attacks), int)]
        kind = np.r_[np.full(len(replay_normal), ""), kinds]
        order = rng.permutation(len(X))
        X, label, kind = X[order], label[order], kind[order]
        train, X = _exact(train), _exact(X)
        written.append(_write_csv(out / f"{name}-train.csv", train, None))
        written.append(_write_csv(out / f"{name}-replay.csv", X, label))
        written.append(_write_conn_log(out / f"{name}-conn.log", X, kind, dev, rng))
        # the training records as Zeek writes them too (their own generator: the other files stay as they were)
        written.append(_write_conn_log(out / f"{name}-train-conn.log", train, np.full(len(train), ""), dev,
                                       np.random.default_rng([seed, 29, dev])))
    readme = out / "README.txt"
    readme.write_text(readme_text(devices, seed))
    written.append(readme)
    return written


def _some_attacks(rng: np.random.Generator, X: np.ndarray, names: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """About n attack records, each kind present as far as the device has it."""
    picks = []
    per_kind = -(-n // len(ATTACKS))
    for a in ATTACKS:
        rows = np.flatnonzero(names == a)
        picks.append(rng.permutation(rows)[:per_kind])
    idx = np.sort(np.concatenate(picks))
    return X[idx], names[idx]


def _varied(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The normal records with at least one that missed bytes and one rejected (each 1 % of normal flows), so
    that no column of a file is constant (a loader would drop it with a warning)."""
    X = X.copy()
    missed, rejected, src = (FEATURES.index(f) for f in ("missed_bytes", "conn_rejected", "src_bytes"))
    if len(X) and not X[:, missed].any():
        r = int(rng.integers(len(X)))
        X[r, missed] = max(1.0, np.rint(X[r, src] * rng.uniform(0.01, 0.1)))
    if len(X) and not X[:, rejected].any():
        X[int(rng.integers(len(X))), rejected] = 1.0
    return X


def _exact(X: np.ndarray) -> np.ndarray:
    """The numbers as the files write them (durations to the microsecond, as Zeek does; counts whole), so
    that a record reads back the same from the CSV and from the conn.log."""
    out = np.rint(X)
    d = FEATURES.index("duration")
    out[:, d] = np.round(X[:, d], 6)
    return out


def _cell(value: float, column: str) -> str:
    return f"{value:.6f}" if column == "duration" else str(int(value))


def _write_csv(path: Path, X: np.ndarray, label: np.ndarray | None) -> Path:
    header = [*FEATURES, *(["label"] if label is not None else [])]
    lines = [",".join(header)]
    for i, row in enumerate(X):
        cells = [_cell(v, c) for v, c in zip(row, FEATURES)]
        if label is not None:
            cells.append(str(int(label[i])))
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


def _zeek_time(t: float) -> str:
    """A time as Zeek writes #open and #close (UTC here, so that files are the same everywhere)."""
    return time.strftime("%Y-%m-%d-%H-%M-%S", time.gmtime(t))


def _state(tcp: bool, rejected: bool, answered: bool) -> tuple[str, str]:
    """A conn_state and history matching the record's flags (the Zeek reader's conn_rejected is 1 exactly for
    REJ, S0, RSTOS0, RSTRH, SH and SHR)."""
    if rejected:
        return ("REJ", "Sr") if tcp and answered else ("S0", "S" if tcp else "D")
    if not answered:
        return "OTH", "D"
    return "SF", "ShADadFf" if tcp else "Dd"


def _endpoints(rng: np.random.Generator, kind: str, dev: int, tcp: bool) -> tuple[str, int, str, int, str]:
    """orig_h, orig_p, resp_h, resp_p and service of a flow of the device (an attack's when `kind` is one)."""
    device = f"192.168.1.{10 + dev % 240}"
    ephemeral = int(rng.integers(49152, 65536))
    attacker = f"{_ATTACKER}.{7 + dev % 200}"
    if kind == "scan":
        return attacker, ephemeral, device, int(rng.integers(1, 1025)), "-"
    if kind == "flood":
        return attacker, ephemeral, device, 80 if tcp else 53, "-"
    if kind == "exfiltration":
        return device, ephemeral, f"{_ATTACKER}.250", 443, "ssl"
    if kind == "brute_force":
        return attacker, ephemeral, device, 22, "ssh"
    server = f"{_SERVERS}.{1 + int(rng.integers(0, 20))}"
    if tcp:
        return device, ephemeral, server, 443, "ssl"
    port = int(rng.choice([53, 123]))
    return device, ephemeral, server, port, "dns" if port == 53 else "ntp"


def _write_conn_log(path: Path, X: np.ndarray, kinds: np.ndarray, dev: int, rng: np.random.Generator) -> Path:
    """The records as Zeek writes a conn.log: TSV under #separator, #fields and #types headers."""
    col = {f: j for j, f in enumerate(FEATURES)}
    ts = START + dev * 3600 + np.cumsum(rng.exponential(2.0, len(X)))
    uids = rng.integers(0, len(_UID_ALPHABET), (len(X), 17))
    lines = []
    for i, row in enumerate(X):
        tcp, rejected = bool(row[col["proto_tcp"]]), bool(row[col["conn_rejected"]])
        orig_h, orig_p, resp_h, resp_p, service = _endpoints(rng, str(kinds[i]), dev, tcp)
        state, history = _state(tcp, rejected, row[col["dst_pkts"]] > 0)
        numbers = {z: _cell(row[col[f]], f) for z, f in _ZEEK_NUMBERS.items()}
        fields = {"ts": f"{ts[i]:.6f}", "uid": "C" + "".join(_UID_ALPHABET[u] for u in uids[i]),
                  "id.orig_h": orig_h, "id.orig_p": str(orig_p), "id.resp_h": resp_h, "id.resp_p": str(resp_p),
                  "proto": "tcp" if tcp else "udp", "service": service, "conn_state": state, "history": history,
                  **numbers}
        lines.append("\t".join(fields[name] for name, _ in ZEEK_COLUMNS))
    header = ["#separator \\x09", "#set_separator\t,", "#empty_field\t(empty)", "#unset_field\t-", "#path\tconn",
              f"#open\t{_zeek_time(ts[0] if len(ts) else START)}",
              "#fields\t" + "\t".join(name for name, _ in ZEEK_COLUMNS),
              "#types\t" + "\t".join(t for _, t in ZEEK_COLUMNS)]
    close = f"#close\t{_zeek_time((ts[-1] if len(ts) else START) + 1)}"
    path.write_text("\n".join([*header, *lines, close]) + "\n")
    return path


def readme_text(devices: int, seed: int) -> str:
    ids = device_ids(devices)
    kinds = ", ".join(f"{d} a {DEVICE_KINDS[i % len(DEVICE_KINDS)].replace('_', ' ')}" for i, d in enumerate(ids))
    first = ids[0]
    return f"""FedSentry sample traffic: {devices} device{'s' if devices > 1 else ''}, seed {seed}
(written by `fedsentry sample --out DIR --devices {devices} --seed {seed}`; the same command writes the same bytes)

Synthetic IoT flows from FedSentry's traffic generator: {kinds}.
Each device has its own normal behaviour; the attacks are port scans, floods, exfiltration
and brute-force logins.

For each device ID:

  ID-train.csv    normal records only, to learn from:
                  fedsentry agent --train DIR/ID-train.csv ...
  ID-replay.csv   other normal records of the device with attacks mixed in, to replay:
                  fedsentry agent --csv DIR/ID-replay.csv --label-column label ...
                  Its `label` column is 0 for a normal record and 1 for an attack; --label-column
                  label keeps it out of the model (it is there to judge the alerts).
  ID-conn.log     the same records as ID-replay.csv, in the same order, as a Zeek conn.log
                  (TSV, with Zeek's #separator, #fields and #types headers): the N-th record of
                  the log is the N-th row of the CSV. Follow it instead of the CSV with
                  fedsentry agent --zeek DIR/ID-conn.log --train DIR/ID-train.csv --no-learn ...
                  (--no-learn: the log has attacks; learn from the normal training records only).
  ID-train-conn.log
                  the records of ID-train.csv as a Zeek conn.log: learn from Zeek's own fields,
                  text ones included (proto, service, conn_state, history), with
                  fedsentry agent --zeek DIR/ID-conn.log --train DIR/ID-train-conn.log --no-learn ...
                  and a job that encodes them:
                  fedsentry job create --categorical proto,service,conn_state --flags history

The CSVs share these numeric feature names (the conn.log's fields become the same ones:
orig_* as src_*, resp_* as dst_*, proto as proto_tcp and proto_udp, conn_state as conn_rejected):

  {",".join(FEATURES)}

so a training job over all of them is:

  fedsentry job create --features {",".join(FEATURES)}

Example, device {first}, with `fedsentry serve --enrol {first}` running:

  fedsentry agent --broker-file fedsentry-server/broker.url --id {first} \\
      --mqtt-password-file fedsentry-server/{first}.password \\
      --train DIR/{first}-train.csv --csv DIR/{first}-replay.csv --label-column label --wait-for-model
"""

"""Built-in synthetic IoT traffic: flows in the vocabulary of Zeek's conn.log, seeded.

Devices of several kinds (cameras, thermostats, smart plugs, voice assistants, hubs) each have their
own normal behaviour, with per-device variation, so clients are naturally non-i.i.d. Labelled attacks
are injected: port scans, floods, exfiltration and brute-force logins. Features are the numeric
conn.log fields (``orig_*`` named ``src_*`` and ``resp_*`` named ``dst_*``, as TON-IoT does) plus the
protocol and a flag for rejected or unanswered connections.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FEATURES = [
    "duration", "src_bytes", "dst_bytes", "missed_bytes", "src_pkts", "src_ip_bytes",
    "dst_pkts", "dst_ip_bytes", "proto_tcp", "proto_udp", "conn_rejected",
]
DEVICE_KINDS = ("camera", "thermostat", "smart_plug", "voice_assistant", "hub")
ATTACKS = ("scan", "flood", "exfiltration", "brute_force")

# kind: (p_tcp, log duration mean/sd, log src pkts mean/sd, src bytes per pkt, dst pkts ratio, dst bytes per pkt)
_PROFILES = {
    "camera": (0.95, np.log(20.0), 0.6, np.log(400.0), 0.5, 1100.0, 0.3, 60.0),
    "thermostat": (0.9, np.log(0.6), 0.4, np.log(8.0), 0.3, 70.0, 1.0, 160.0),
    "smart_plug": (0.3, np.log(0.05), 0.5, np.log(2.0), 0.3, 60.0, 1.0, 60.0),
    "voice_assistant": (0.6, np.log(3.0), 0.9, np.log(20.0), 0.8, 120.0, 3.0, 900.0),
    "hub": (0.7, np.log(1.5), 0.8, np.log(12.0), 0.6, 200.0, 1.2, 350.0),
}


@dataclass
class SyntheticTraffic:
    feature_names: list[str]
    X_normal: np.ndarray
    device_normal: np.ndarray
    X_attack: np.ndarray
    device_attack: np.ndarray
    attack_names: np.ndarray


def _flows(rng: np.random.Generator, n: int, p_tcp: float, dur: float, dur_sd: float, pk: float, pk_sd: float,
           bpp: float, dratio: float, dbpp: float, scale: float) -> np.ndarray:
    tcp = rng.random(n) < p_tcp
    duration = np.exp(rng.normal(dur, dur_sd, n))
    src_pkts = np.maximum(1, np.rint(np.exp(rng.normal(pk, pk_sd, n)))).astype(float)
    src_bytes = src_pkts * bpp * scale * np.exp(rng.normal(0, 0.25, n))
    dst_pkts = np.rint(src_pkts * dratio * np.exp(rng.normal(0, 0.3, n)))
    dst_bytes = dst_pkts * dbpp * scale * np.exp(rng.normal(0, 0.3, n))
    missed = np.where(rng.random(n) < 0.01, src_bytes * rng.random(n) * 0.1, 0.0)
    rejected = (rng.random(n) < 0.01).astype(float)
    return _assemble(duration, src_bytes, dst_bytes, missed, src_pkts, dst_pkts, tcp, rejected)


def _assemble(duration: np.ndarray, src_bytes: np.ndarray, dst_bytes: np.ndarray, missed: np.ndarray,
              src_pkts: np.ndarray, dst_pkts: np.ndarray, tcp: np.ndarray, rejected: np.ndarray) -> np.ndarray:
    header = np.where(tcp, 52.0, 28.0)
    return np.column_stack([
        duration, np.rint(src_bytes), np.rint(dst_bytes), np.rint(missed), src_pkts,
        np.rint(src_bytes + src_pkts * header), dst_pkts, np.rint(dst_bytes + dst_pkts * header),
        tcp.astype(float), (~tcp).astype(float), rejected,
    ])


def _attack(rng: np.random.Generator, kind: str, n: int, scale: float) -> np.ndarray:
    if kind == "scan":
        tcp = rng.random(n) < 0.9
        src_pkts = rng.integers(1, 3, n).astype(float)
        dst_pkts = rng.integers(0, 2, n).astype(float)
        return _assemble(np.abs(rng.normal(0, 1e-3, n)), np.zeros(n), np.zeros(n), np.zeros(n), src_pkts,
                         dst_pkts, tcp, (rng.random(n) < 0.85).astype(float))
    if kind == "flood":
        tcp = rng.random(n) < 0.5
        src_pkts = np.rint(np.exp(rng.normal(np.log(3000), 0.7, n)))
        return _assemble(np.exp(rng.normal(np.log(2.0), 0.5, n)), src_pkts * rng.uniform(0, 40, n),
                         np.zeros(n), np.zeros(n), src_pkts, np.zeros(n), tcp, (rng.random(n) < 0.5).astype(float))
    if kind == "exfiltration":
        src_pkts = np.rint(np.exp(rng.normal(np.log(8000), 0.6, n)))
        dst_pkts = np.rint(src_pkts * 0.5)
        return _assemble(np.exp(rng.normal(np.log(120.0), 0.5, n)), src_pkts * 1400 * scale, dst_pkts * 60,
                         np.zeros(n), src_pkts, dst_pkts, np.ones(n, bool), np.zeros(n))
    if kind == "brute_force":
        src_pkts = np.rint(np.exp(rng.normal(np.log(14), 0.3, n)))
        dst_pkts = np.rint(src_pkts * 0.9)
        return _assemble(np.exp(rng.normal(np.log(2.5), 0.4, n)), src_pkts * 45, dst_pkts * 70, np.zeros(n),
                         src_pkts, dst_pkts, np.ones(n, bool), (rng.random(n) < 0.3).astype(float))
    raise ValueError(f"unknown attack {kind!r}")


def generate_traffic(
    n_devices: int = 40, records_per_device: int = 500, attack_fraction: float = 0.25, seed: int = 0
) -> SyntheticTraffic:
    """Normal flows of n_devices devices and, per device, attack flows (attack_fraction of its normals)."""
    if n_devices < 1 or records_per_device < 1:
        raise ValueError("n_devices and records_per_device must be positive")
    rng = np.random.default_rng(seed)
    Xn, dn, Xa, da, names = [], [], [], [], []
    for dev in range(n_devices):
        kind = DEVICE_KINDS[dev % len(DEVICE_KINDS)]
        scale = float(np.exp(rng.normal(0, 0.3)))
        n = int(records_per_device * np.exp(rng.normal(0, 0.3)))
        Xn.append(_flows(rng, max(n, 10), *_PROFILES[kind], scale))
        dn.append(np.full(len(Xn[-1]), dev))
        n_att = int(round(attack_fraction * len(Xn[-1])))
        kinds = rng.choice(ATTACKS, n_att)
        for a in ATTACKS:
            m = int((kinds == a).sum())
            if m:
                Xa.append(_attack(rng, a, m, scale))
                da.append(np.full(m, dev))
                names.append(np.full(m, a))
    def cat(parts: list[np.ndarray], w: int) -> np.ndarray:
        return (np.concatenate(parts) if parts else np.zeros((0, w)))
    return SyntheticTraffic(
        list(FEATURES), np.vstack(Xn), np.concatenate(dn),
        cat(Xa, len(FEATURES)).reshape(-1, len(FEATURES)),
        np.concatenate(da) if da else np.zeros(0, int),
        np.concatenate(names) if names else np.zeros(0, str),
    )

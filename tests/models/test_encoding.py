import json

import numpy as np
import pytest

from models.detection.encoding import (
    MAX_REPORTED,
    MISSING,
    FeatureEncoder,
    RecordSchema,
    agree_vocabulary,
    binary_moments,
    binary_standardisation,
    check_counts,
    local_counts,
)

NAN = float("nan")
SCHEMA = RecordSchema(numeric=["duration", "src_bytes"], categorical=["proto", "service"], flags=["history"])


def records(proto, service, history, numeric):
    return np.array(numeric, dtype=float), {"proto": np.array(proto, dtype=object),
                                            "service": np.array(service, dtype=object),
                                            "history": np.array(history, dtype=object)}


def device(service="dns", extra=()):
    """A device's counts: 10 records (6 tcp, 4 udp; 5 of `service`, 5 unset; a third of the durations
    unset), then one tcp record for each service in `extra`."""
    proto = ["tcp"] * 6 + ["udp"] * 4 + ["tcp"] * len(extra)
    services = [service] * 5 + [None] * 5 + list(extra)
    history = ["ShADadfF", "Dd", "S", "", None] * 2 + ["S"] * len(extra)
    numeric = [[NAN if i % 3 == 0 else 0.5, 100.0] for i in range(10)] + [[0.5, 100.0]] * len(extra)
    return local_counts(SCHEMA, *records(proto, services, history, numeric))


def test_local_counts_counts_values_missing_numbers_and_case_sensitive_flags():
    X, text = records(["tcp", "tcp", "udp", "tcp"], ["dns", None, "", "x\x00y"], ["ShADadfF", "S", None, "(empty)"],
                      [[NAN, 1.0], [0.2, NAN], [NAN, 3.0], [0.1, 4.0]])
    c = local_counts(SCHEMA, X, text)
    assert c["n"] == 4
    assert c["numeric"] == {"duration": {"present": 2, "missing": 2}, "src_bytes": {"present": 3, "missing": 1}}
    assert c["categorical"]["proto"] == {"tcp": 3, "udp": 1}
    # None and "" are the category MISSING; a value that is not printable is left out
    assert c["categorical"]["service"] == {MISSING: 2, "dns": 1}
    # each record counts once per letter it holds; S and s, D and d are different flags
    assert c["flags"]["history"]["S"] == 2 and c["flags"]["history"]["d"] == 1 and c["flags"]["history"]["D"] == 1
    assert "s" not in c["flags"]["history"]
    json.dumps(c)  # it travels as JSON


def test_local_counts_reports_the_most_frequent_values_only():
    values = [f"svc{i}" for i in range(100) for _ in range(100 - i)] + ["y" * 65] * 500
    X, text = records(["tcp"] * len(values), values, [""] * len(values), [[1.0, 1.0]] * len(values))
    c = local_counts(SCHEMA, X, text, max_values=10)
    assert list(c["categorical"]["service"]) == [f"svc{i}" for i in range(10)]  # too long a value is left out
    assert c["categorical"]["service"]["svc0"] == 100
    assert len(local_counts(SCHEMA, X, text)["categorical"]["service"]) == MAX_REPORTED


def test_vocabulary_needs_two_devices_and_enough_count():
    a, b = device(service="dns"), device(service="dns", extra=["ntp"] * 9)
    lone = device(service="mqtt")  # only this device speaks mqtt
    enc = agree_vocabulary([a, b, lone], min_count=3)
    assert enc.categorical["proto"] == ["tcp", "udp"]
    assert enc.categorical["service"] == [MISSING, "dns"]  # not ntp (one device), not mqtt (one device)
    assert enc.missing_indicators == ["duration"]  # src_bytes is never missing
    assert sorted(enc.flags["history"]) == ["A", "D", "F", "S", "a", "d", "f", "h"]
    # one device alone: its own values (default min_devices is 1)
    assert "mqtt" in agree_vocabulary([lone], min_count=3).categorical["service"]


def test_one_lying_device_cannot_add_a_value_nor_push_one_in():
    honest = [device(), device()]
    liar = device()
    liar["n"] = 10**9
    liar["numeric"] = {f: {"present": 10**9, "missing": 0} for f in SCHEMA.numeric}
    liar["categorical"]["service"] = {"evil": 5 * 10**8, "rare": 5 * 10**8}
    honest[0]["categorical"]["service"] = {"dns": 4, MISSING: 5, "rare": 1}  # one honest record of "rare"
    enc = agree_vocabulary([*honest, liar], min_count=5)
    assert "evil" not in enc.categorical["service"]  # seen on one device only
    assert "rare" not in enc.categorical["service"]  # the liar's count does not count: 1 < 5
    assert enc.categorical["service"] == agree_vocabulary(honest, min_count=5).categorical["service"]


def test_vocabulary_is_capped_and_other_is_never_a_value():
    big = {f"v{i}": 20 for i in range(60)} | {"other": 50}
    counts = [{"n": 2000, "numeric": {}, "categorical": {"service": dict(big)}, "flags": {}} for _ in range(3)]
    enc = agree_vocabulary(counts, max_values=8)
    assert len(enc.categorical["service"]) == 8 and "other" not in enc.categorical["service"]
    assert enc.feature_names[-1] == "service=other"


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c.update(n=-1), "'n' must be the device's record count"),
    (lambda c: c.update(n=True), "'n' must be the device's record count"),
    (lambda c: c.update(rogue={}), "unknown keys: rogue"),
    (lambda c: c["categorical"]["proto"].update(tcp=10**6), "'tcp'.*not a count between 0 and the device's 10"),
    (lambda c: c["categorical"]["proto"].update(tcp=2.5), "not a count"),
    (lambda c: c["categorical"]["service"].update({"a\nb": 1}), "'a\\\\nb' is not a valid value"),
    (lambda c: c["categorical"]["service"].update({"x" * 65: 1}), "is not a valid value"),
    (lambda c: c["categorical"]["service"].update({f"s{i}": 0 for i in range(MAX_REPORTED)}),
     f"reports {MAX_REPORTED + 2} values, at most {MAX_REPORTED}"),
    (lambda c: c["categorical"]["proto"].update(icmp=9), "values count 19 records, more than the device's 10"),
    (lambda c: c["flags"]["history"].update(SH=1), "'SH' is not a valid flag"),
    (lambda c: c["numeric"]["duration"].update(present=0), "present 0 \\+ missing 4 != n 10"),
    (lambda c: c["categorical"].pop("service"), "categorical fields \\['proto'\\] are not the schema's"),
    (lambda c: c.update(categorical=[]), "'categorical' must be an object"),
])
def test_malformed_counts_are_refused_saying_what_is_wrong(mutate, message):
    good = device()
    check_counts(good, SCHEMA)
    bad = json.loads(json.dumps(good))
    mutate(bad)
    with pytest.raises(ValueError, match=message):
        check_counts(bad, SCHEMA)
    with pytest.raises(ValueError, match="device 1: "):
        agree_vocabulary([good, bad], schema=SCHEMA)


def test_devices_must_report_the_same_fields_and_arguments_are_checked():
    a, b = device(), device()
    b["flags"] = {}
    with pytest.raises(ValueError, match="device 1 disagrees with device 0: counts: flags fields"):
        agree_vocabulary([a, b])
    with pytest.raises(ValueError, match="no device counts"):
        agree_vocabulary([])
    with pytest.raises(ValueError, match="max_values must be a positive integer"):
        agree_vocabulary([a], max_values=0)
    with pytest.raises(ValueError, match="counts must be an object, got list"):
        agree_vocabulary([[1, 2]])


ENC = FeatureEncoder(numeric=["duration", "src_bytes"], categorical={"proto": ["tcp", "udp"], "service": ["dns"]},
                     flags={"history": ["S", "h", "D", "d"]}, missing_indicators=["duration"])


def test_feature_names_and_encoding():
    assert ENC.feature_names == ["duration", "src_bytes", "duration_missing", "proto=tcp", "proto=udp",
                                 "proto=other", "service=dns", "service=other", "history:S", "history:h",
                                 "history:D", "history:d"]
    X, text = records(["tcp", "icmp", "udp"], ["dns", "mqtt-unknown", None], ["ShADadfF", None, "Dd"],
                      [[NAN, 10.0], [0.5, NAN], [1.5, 20.0]])
    E = ENC.encode(X, text)
    assert E.shape == (3, ENC.n_features) == (3, 12)
    assert np.isnan(E[0, 0]) and E[0, 2] == 1 and E[1, 0] == 0.5 and E[1, 2] == 0  # missing: NaN + indicator
    assert np.isnan(E[1, 1])  # no indicator for src_bytes: stays NaN, imputed by the preprocessing
    np.testing.assert_array_equal(E[:, 3:8], [[1, 0, 0, 1, 0], [0, 0, 1, 0, 1], [0, 1, 0, 0, 1]])
    np.testing.assert_array_equal(E[:, 8:], [[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 1, 1]])
    np.testing.assert_array_equal(ENC.binary, [False, False] + [True] * 10)


def test_a_missing_category_has_its_own_column_when_agreed():
    enc = FeatureEncoder(["duration"], {"service": [MISSING, "dns"]}, {}, [])
    E = enc.encode(np.zeros((3, 1)), {"service": np.array([None, "", "dns"], dtype=object)})
    np.testing.assert_array_equal(E[:, 1:], [[1, 0, 0], [1, 0, 0], [0, 1, 0]])


def test_encode_refuses_records_that_do_not_fit():
    X, text = records(["tcp"], ["dns"], ["S"], [[1.0, 2.0]])
    with pytest.raises(ValueError, match="expected shape \\(n, 2\\)"):
        ENC.encode(X[:, :1], text)
    with pytest.raises(ValueError, match="lack the text fields: history"):
        ENC.encode(X, {k: v for k, v in text.items() if k != "history"})
    with pytest.raises(ValueError, match="'proto' has 2 values for 1 records"):
        ENC.encode(X, {**text, "proto": np.array(["tcp", "udp"], dtype=object)})


def test_encoder_round_trips_as_json_and_refuses_bad_definitions():
    again = FeatureEncoder.from_dict(json.loads(json.dumps(ENC.to_dict())))
    assert again == ENC and again.feature_names == ENC.feature_names
    d = ENC.to_dict()
    d["categorical"] = {"service": ["dns"], "proto": ["tcp", "udp"]}  # columns in another order
    with pytest.raises(ValueError, match="feature_names do not match"):
        FeatureEncoder.from_dict(d)
    with pytest.raises(ValueError, match="unsupported feature encoding version"):
        FeatureEncoder.from_dict({**ENC.to_dict(), "version": 99})
    with pytest.raises(ValueError, match="'other' is reserved"):
        FeatureEncoder(["a"], {"p": ["other"]}, {}, [])
    with pytest.raises(ValueError, match="not numeric: b"):
        FeatureEncoder(["a"], {}, {}, ["b"])
    with pytest.raises(ValueError, match="single characters"):
        FeatureEncoder(["a"], {}, {"history": ["S", "S"]}, [])
    with pytest.raises(ValueError, match="named more than once"):
        FeatureEncoder(["a"], {"a": []}, {}, [])


def test_binary_columns_statistics_from_counts_equal_those_of_the_encoded_records():
    rng = np.random.default_rng(0)
    devices, encoded = [], []
    for _ in range(3):
        n = 200
        X = rng.random((n, 2))
        X[rng.random((n, 2)) < 0.2] = NAN
        X, text = records(rng.choice(["tcp", "udp", "icmp"], n).tolist(),
                          rng.choice(["dns", "http", "mqtt", None], n).tolist(),
                          rng.choice(["ShADadfF", "S", "Dd", "", None, "ShR"], n).tolist(), X)
        devices.append(local_counts(SCHEMA, X, text))
        encoded.append(ENC.encode(X, text)[:, ENC.binary])
    pooled = np.vstack(encoded)
    mean, scale, zero = binary_standardisation(ENC, devices)
    np.testing.assert_allclose(mean, pooled.mean(axis=0))
    np.testing.assert_allclose(scale, pooled.std(axis=0))
    assert not zero.any()
    n, total, sumsq = binary_moments(ENC, devices[0])
    assert n == 200
    np.testing.assert_allclose(total, encoded[0].sum(axis=0))
    np.testing.assert_allclose(sumsq, (encoded[0] ** 2).sum(axis=0))

"""What every anomaly-detection job family shares: the feature list, the preprocessing, the label-free
threshold and how far one device is trusted. PCA (`models.pca.spec`) and mixtures (`models.mixture.spec`)
add their own settings."""

from __future__ import annotations

from dataclasses import dataclass

from models.detection.encoding import RecordSchema
from models.detection.screening import Guard
from models.jobspec import JobSpec, check, setting


@dataclass
class DetectorJobSpec(JobSpec):
    #: no features: the numeric features every agent taking part announces (resolved when the job starts)
    features: list[str] = setting(factory=list, help="numeric feature names the agents provide (none: those "
                                  "every agent taking part announces)")
    #: text fields one-hot encoded with a vocabulary the statistics phase agrees (e.g. Zeek's proto, service,
    #: conn_state) and flag-string fields whose letters become columns (Zeek's history): models.detection.encoding
    categorical: list[str] = setting(factory=list, help="text fields one-hot encoded with a vocabulary the devices "
                                     "agree, e.g. proto, service, conn_state (Zeek)")
    flags: list[str] = setting(factory=list, help="flag-string fields whose letters become columns, e.g. history "
                               "(Zeek)")
    quantile: float = setting(0.99, help="threshold quantile of normal errors")
    log_transform: bool = setting(True, help="signed log1p before standardising")
    # how far one device is trusted (models.detection.screening.Guard)
    max_records: int = setting(Guard.max_records, help="refuse a device claiming more records")
    count_cap: float = setting(Guard.count_cap, help="cap counts at this multiple of the median count")
    max_share: float = setting(Guard.max_share, help="no device weighs more than this share")
    influence: float = setting(Guard.influence, help="one device raises a feature's pooled variance by at most "
                               "1 + this factor")
    device_trim: float = setting(Guard.device_trim, help="share of the devices' error quantiles left out on either "
                                 f"side of the threshold ({Guard.colluders} more at the top: devices that may act "
                                 "together)")
    private: bool = setting(False, help="private mode: the coordinator learns only sums of the devices' statistics "
                            "(secure aggregation, SecAgg+; numeric, log-scaled features)")
    dp_epsilon: float | None = setting(None, help="differential privacy: the budget epsilon for each device's whole "
                                       "contribution, Gaussian noise on every sum (none: off; jobs: pca and "
                                       "gmm)")
    dp_delta: float = setting(1e-5, help="differential privacy: the budget delta (below 1 / the fleet's records)")

    def check_family(self) -> None:
        check(not self.features or 2 <= len(self.features) <= 1000, "features", f"a {self.family} job needs 2 to "
              "1000 feature names its agents provide (or none: those the online agents share)")
        check(len(set(self.features)) == len(self.features) and all(0 < len(f) <= 128 for f in self.features),
              "features", "must be distinct non-empty names of at most 128 characters")
        check(len(self.categorical) + len(self.flags) <= 16, "categorical", "at most 16 text fields")
        check(len({*self.features, *self.categorical, *self.flags}) == len(self.features) + len(self.categorical)
              + len(self.flags) and all(0 < len(f) <= 128 for f in [*self.categorical, *self.flags]), "categorical",
              "text fields must be distinct non-empty names of at most 128 characters, none of them a feature")
        check(0 < self.quantile < 1, "quantile", "must be in (0, 1)")
        check(1 <= self.max_records <= 10**12, "max_records", "must be between 1 and 10^12")
        check(1 <= self.count_cap <= 1e6, "count_cap", "must be between 1 and 10^6 (times the median count)")
        check(0 < self.max_share <= 1, "max_share", "must be in (0, 1]")
        check(0 < self.influence <= 1e6, "influence", "must be in (0, 10^6] (how much one device may raise a "
              "feature's pooled variance, as a factor minus 1)")
        check(0 <= self.device_trim < 0.5, "device_trim", "must be in [0, 0.5)")
        check(self.dp_epsilon is None or 0 < self.dp_epsilon <= 100, "dp_epsilon", "must be in (0, 100] (the "
              "privacy budget; 1 to 8 are usual), or none for no differential privacy")
        check(0 < self.dp_delta < 0.01, "dp_delta", "must be in (0, 0.01): well below 1 / the fleet's devices, "
              "e.g. 1e-5")

    def validate(self) -> None:
        if self.features:
            super().validate()
        else:  # the algorithm's settings are checked once the agents' features are known (with_features)
            self.check_common()
            self.check_family()
        if self.private:
            self.check_private()
        if self.dp_epsilon is not None:
            self.check_dp()

    def check_dp(self) -> None:
        """What differential privacy in a job takes (coordinator.noisy_detector): a PCA or mixture job trained on
        sums as the simulator's private mode trains it (numeric, log-scaled features; FedMM's statistic whole, or the
        summed FedEM), the noise added by the devices in private mode, by the coordinator otherwise."""
        check(self.family in ("pca", "gmm"), "dp_epsilon", f"differential privacy runs PCA and gmm jobs; a "
              f"{self.family} job has no noisy sums")
        if self.family == "gmm":
            check(not self.algorithm_params.get("splits"), "algorithm_params.splits", "differential privacy makes "
                  "no swaps (their decisions on noisy sums are not measured): leave splits out or 0")
        if not self.private:
            self.check_private()

    def check_private(self) -> None:
        """What private mode over MQTT takes (coordinator.private_detector): numeric features, every one log-scaled;
        for PCA, FedMM's statistic summed whole (the mixture's own checks: models.mixture.spec)."""
        if self.family == "gmm":
            check(self.algorithm == "fedem", "algorithm", "private mode trains the summed FedEM: the algorithm must be "
                  "fedem")
        if self.family == "pca":
            check(self.algorithm == "fedmm", "algorithm", "private mode and differential privacy sum FedMM's statistic "
                  "whole: the algorithm must be fedmm")
        check(not self.categorical and not self.flags, "categorical", "private mode and differential privacy train on "
              "numeric features only (the value counts of text fields would be each device's own)")
        check(self.log_transform, "log_transform", "private mode and differential privacy log-scale every feature "
              "(their bounds assume it)")
        check(getattr(self, "kernel", "none") == "none", "kernel", "private mode and differential privacy sum the "
              "second moment of the features themselves: no kernel")

    def with_features(self, features: list[str]) -> None:
        """Name the features a job that named none trains on (those its agents share), and check again: the
        algorithm's settings may depend on them (a PCA rank below their number). SettingError otherwise."""
        self.features = list(features)
        self.validate()

    def schema(self) -> RecordSchema:
        """The fields a device reports counts of in the statistics phase (models.detection.encoding)."""
        return RecordSchema(list(self.features), list(self.categorical), list(self.flags))

    def guard(self) -> Guard:
        return Guard(self.max_records, self.count_cap, self.max_share, self.influence, self.device_trim)

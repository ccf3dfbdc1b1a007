"""Shared fixtures. Real data tests skip (saying so) where ../shared/data is absent."""

from __future__ import annotations

import numpy as np
import pytest

from fedsentry.data import datasets


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def needs_dataset(name: str):
    return pytest.mark.skipif(not datasets.shared_data_available(name),
                              reason=f"shared dataset {name!r} not found under {datasets.data_dir()}")

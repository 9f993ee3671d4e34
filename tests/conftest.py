"""Shared fixtures: the embedded default model's folder, converted once per machine."""

from pathlib import Path

import pytest

from worker.model.loader import resolve_model_dir


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    return resolve_model_dir(None)

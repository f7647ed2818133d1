"""Shared fixtures: the default model, opened once per test session."""

import os

import pytest

import lql

MODEL = os.environ.get("LQL_TEST_MODEL", "smollm2-135m-instruct")


def require(module: str):
    """Imports ``module``; without it the test fails under CI (CI=true) and skips elsewhere."""
    try:
        return __import__(module)
    except ImportError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is required under CI and is not importable: {e}")
        pytest.skip(f"{module} is not installed")


@pytest.fixture(scope="session")
def db():
    return lql.Database(MODEL)


@pytest.fixture
def con(db):
    c = db.connect()
    yield c
    c.close()

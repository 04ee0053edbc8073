"""Fixtures shared across test modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def engine():
    """The embedded default checkpoint behind a serve batcher, one per test module, closed after it
    (:func:`serve_helpers.load_test_engine`: skips, or fails in CI, without the checkpoint)."""
    from serve_helpers import load_test_engine

    eng = load_test_engine()
    yield eng
    eng.close(wait=False)

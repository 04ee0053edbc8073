"""Fixtures shared across test modules."""

from __future__ import annotations

import os
import pathlib
import sys
import textwrap
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import torch

if not torch.cuda.is_available() and "triton" not in sys.modules:
    # Triton's interpreter for the kernel tests: TRITON_INTERPRET is read when triton is first imported, and
    # model modules (via transformers) may import it before tests/test_kernels_sampling.py is collected.
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module")
def engine():
    """The embedded default checkpoint behind a serve batcher, one per test module, closed after it
    (:func:`serve_helpers.load_test_engine`: skips, or fails in CI, without the checkpoint)."""
    from serve_helpers import load_test_engine

    eng = load_test_engine()
    yield eng
    eng.close(wait=False)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Callable[..., pathlib.Path]:
    """A maker of tiny random-weight checkpoints: ``tiny_checkpoint(name, steps, **options)`` sets torch to one
    thread, writes one (:func:`model.testing.make_tiny_checkpoint`, canvas 16, ``max_denoising_steps=steps``,
    ``options`` such as ``copy_head`` or ``seed`` passed on) in a fresh temporary folder named after ``name`` and
    returns its path."""

    def make(name: str, steps: int, **options: Any) -> pathlib.Path:
        import torch

        from model.testing import make_tiny_checkpoint

        torch.set_num_threads(1)
        return make_tiny_checkpoint(
            tmp_path_factory.mktemp(name),
            canvas_length=16,
            generation={"max_denoising_steps": steps},
            **options,
        )

    return make


@pytest.fixture
def tools_module(tmp_path) -> Callable[[str, str], str]:
    """A writer of uniquely named Python modules next to a test's bundles (bundles import from their folder):
    ``tools_module(prefix, source)`` writes the dedented ``source`` to ``tmp_path/<prefix>_<8 hex>.py`` and
    returns the module's name."""

    def write(prefix: str, source: str) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    return write

"""Shared test set-up: one torch thread per process (2-core CI). Built models are cached under $TOKENROUTER_CACHE."""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Iterator

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True, scope="session")
def _torch_threads() -> None:
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover
        pass


@pytest.fixture(autouse=True)
def _sigint_disposition(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test leaves the worker's SIGINT handling as it found it: an ignored SIGINT is inherited by every
    process a later test starts (a front end that would then ignore Ctrl-C). A change is put back and named
    in the warnings summary."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        try:
            signal.signal(signal.SIGINT, before)
        except ValueError:  # not the main thread: say so, without restoring
            pass
        warnings.warn(f"{request.node.nodeid} left SIGINT handled by {after!r}; restored", stacklevel=1)

"""Shared test settings.

The suite runs on 2-core machines, often beside other work: one torch thread per process avoids the threads of
one process waiting on each other (measured 3-15x slower on a busy 2-core machine). Reset before every test, so
a test that changes the count cannot slow the next.
"""

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)

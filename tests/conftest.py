"""Shared test settings.

The suite runs on 2-core machines, often beside other work: one torch thread per process avoids the threads of
one process waiting on each other (measured 3-15x slower on a busy 2-core machine). Reset before every test, so
a test that changes the count cannot slow the next.

`OCTLM_REQUIRE_ALL=1` (set by scripts/test, so in CI): a test skipped because an import failed
(`pytest.importorskip("transformers")` with the dev extras missing) fails instead, naming the module. Without
it such tests skip, so a checkout without the extras still runs the rest. Skips for any other reason (no gloo,
say) are left alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

REQUIRE_ALL = os.environ.get("OCTLM_REQUIRE_ALL") == "1"
MISSING_IMPORT = "could not import "  # how pytest.importorskip words its skip reason


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)


def _skip_reason(report: Any) -> str:
    """The message of a skip report (`longrepr` is (path, line, message) for skips)."""
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")


def _fail_missing_import(report: Any) -> None:
    """Turn a skip caused by a failed import into a failure, when OCTLM_REQUIRE_ALL=1."""
    if REQUIRE_ALL and report.skipped:
        reason = _skip_reason(report)
        if MISSING_IMPORT in reason:
            report.outcome = "failed"
            report.longrepr = (
                f"{reason}\nOCTLM_REQUIRE_ALL=1: a missing dependency fails the run instead of skipping "
                "(install the dev extras: bash scripts/setup)"
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield  # an importorskip in a test or a fixture (tests/test_benchmarks.py's `benchmarks`)
    _fail_missing_import(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    report = yield  # a module-level importorskip (tests/interop/test_hf.py and others) skips the whole file
    _fail_missing_import(report)
    return report

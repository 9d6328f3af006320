"""The settings the hypothesis properties share (tests/*/test_*_fuzz.py): how many examples each runs, and the
count each reports and checks, so that a property that silently ran nothing fails."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

EXAMPLES = 400
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def report(name: str, count: int) -> None:
    print(f"\n[fuzz] {name}: {count} examples")
    assert count >= EXAMPLES // 2, f"{name} ran only {count} examples"

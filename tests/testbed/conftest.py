"""Fixtures for the testbed and launcher tests.

Every test session uses its own namespace base (AUTOBYTE_TESTBED_PREFIX, set in tb_helpers), so
these tests only ever see, sweep or delete namespaces they created, never another engineer's;
at start, a session also deletes the testbeds of earlier test sessions whose process is dead.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tb_helpers import IS_ROOT, nothing_left_behind, sweep_crashed_sessions


@pytest.fixture(scope="session", autouse=True)
def crashed_sessions_cleared() -> None:
    """Namespaces left by a test session that was killed are deleted before this one starts."""
    if IS_ROOT:
        sweep_crashed_sessions()


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """Fail the test if it leaves a namespace, a state record or a root-namespace link."""
    with nothing_left_behind():
        yield

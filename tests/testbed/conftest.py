"""Fixtures for the testbed and launcher tests.

Every test session uses its own namespace base (AUTOBYTE_TESTBED_PREFIX, set in tb_helpers), so
these tests only ever see, sweep or delete namespaces they created, never another engineer's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tb_helpers import nothing_left_behind


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """Fail the test if it leaves a namespace, a state record or a root-namespace link."""
    with nothing_left_behind():
        yield

import pytest

from common.errors import ConfigError
from common.units import format_bytes, format_rate, parse_bytes, parse_rate


@pytest.mark.parametrize(("text", "expected"), [
    (4096, 4096), ("4096", 4096), ("4MB", 4_000_000), ("4MiB", 4 * 2**20), ("4M", 4 * 2**20),
    ("512KiB", 512 * 1024), ("160KB", 160_000), ("1.5KiB", 1536), (" 2 GiB ", 2 * 2**30),
])
def test_parse_bytes(text: object, expected: int) -> None:
    assert parse_bytes(text) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["4 parsecs", "MB", "", "1.3B", True, None, [1]])
def test_parse_bytes_rejects_and_names_the_value(bad: object) -> None:
    with pytest.raises(ConfigError, match="partition_bytes"):
        parse_bytes(bad, "partition_bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "bits"), [
    ("10gbit", 1e10), ("100mbit", 1e8), ("2.5Gbps", 2.5e9), (1e9, 1e9), ("800kbit", 8e5),
])
def test_parse_rate(text: object, bits: float) -> None:
    assert parse_rate(text) == pytest.approx(bits)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["0gbit", "-1", "fast", 0])
def test_parse_rate_rejects(bad: object) -> None:
    with pytest.raises(ConfigError, match="bandwidth"):
        parse_rate(bad)  # type: ignore[arg-type]


def test_format_round_trips() -> None:
    assert format_bytes(4 * 2**20) == "4MiB"
    assert format_bytes(160 * 1024) == "160KiB"
    assert format_bytes(100) == "100B"
    assert format_rate(1e10) == "10gbit"
    assert parse_bytes(format_bytes(512 * 1024)) == 512 * 1024

import logging
import re

import pytest

from common.config import (
    COORDINATOR_ENV,
    COORDINATOR_TIMEOUT_ENV,
    NUM_WORKERS_ENV,
    RANK_ENV,
    ROLE_ENV,
    SECRET_ENV,
    TESTBED_PREFIX_ENV,
    VERBOSE_ENV,
    Config,
    environment,
    known_env_vars,
)
from common.errors import ConfigError


def test_defaults_are_valid_and_credit_holds_a_partition() -> None:
    config = Config()
    assert config.credit_bytes >= config.partition_bytes
    assert config.credit_multiple == config.credit_bytes / config.partition_bytes


def test_the_grace_period_is_a_minute_by_default() -> None:
    """The README's default (AUTOBYTE_GRACE_S overrides it: tests/control)."""
    assert Config().grace_s == 60.0


def test_sizes_accept_strings() -> None:
    config = Config(partition_bytes="512KiB", credit_bytes="2MiB")
    assert (config.partition_bytes, config.credit_bytes) == (512 * 1024, 2 * 2**20)
    assert config.credit_multiple == 4


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"partition_bytes": -1},
     r"partition_bytes must be positive, between 4096 .* got partition_bytes=-1"),
    ({"partition_bytes": "-4MiB"}, r"partition_bytes must be positive, .*='-4MiB'"),
    ({"partition_bytes": 0}, "partition_bytes=0"),
    ({"partition_bytes": "2GiB"}, "partition_bytes='2GiB'"),
    ({"partition_bytes": "1MiB", "credit_bytes": "512KiB"}, "credit_bytes must be >= partition"),
    ({"credit_bytes": "1TiB"}, "credit_bytes"),
    ({"tuner": "genetic"}, r"tuner must be one of \['none', 'observe', 'default'"),
    ({"scheduling": "maybe"}, "scheduling must be true/false"),
    ({"window_steps": 0}, "window_steps must be between 1"),
    ({"gain_threshold": "x"}, "gain_threshold must be a float"),
])
def test_invalid_values_name_the_value_and_the_range(kwargs: dict[str, object],
                                                     message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config(**kwargs)  # type: ignore[arg-type]


def test_env_overlay_then_keywords_win() -> None:
    env = {"AUTOBYTE_PARTITION_BYTES": "256KiB", "AUTOBYTE_CREDIT_BYTES": "1MiB",
           "AUTOBYTE_SCHEDULING": "off", "AUTOBYTE_TUNER": "Bayesian", "PATH": "/bin"}
    config = Config.from_env(env)
    assert config.partition_bytes == 256 * 1024
    assert config.credit_bytes == 2**20
    assert config.scheduling is False
    assert config.tuner == "bayesian"
    assert Config.from_env(env, credit_bytes="4MiB", tuner=None).credit_bytes == 4 * 2**20


def test_an_adapters_start_is_under_the_environment_and_keywords() -> None:
    from common.plan import START

    start = Config.from_env({}, start=START["allreduce"])
    assert (start.partition_bytes, start.credit_bytes, start.scheduling) == \
        (4 << 20, 16 << 20, False)  # jobs start native
    env = {"AUTOBYTE_PARTITION_BYTES": "256KiB"}
    config = Config.from_env(env, start=START["allreduce"], credit_bytes="1MiB")
    assert (config.partition_bytes, config.credit_bytes) == (256 << 10, 1 << 20)
    assert config.scheduling  # knobs set by hand mean scheduling
    off = Config.from_env({**env, "AUTOBYTE_SCHEDULING": "0"}, start=START["allreduce"])
    assert not off.scheduling and off.partition_bytes == 256 << 10
    assert Config.from_env({}, start=START["ps"]) == Config(scheduling=False)


@pytest.mark.parametrize(("env", "message"), [
    ({"AUTOBYTE_PARTITION_BYTES": "lots"},
     r"^AUTOBYTE_PARTITION_BYTES must be a number .* got AUTOBYTE_PARTITION_BYTES='lots'$"),
    ({"AUTOBYTE_PARTITION_BYTES": "-5"},
     r"^AUTOBYTE_PARTITION_BYTES must be positive, .* got AUTOBYTE_PARTITION_BYTES='-5'$"),
    ({"AUTOBYTE_TUNER": "genetic"}, r"^AUTOBYTE_TUNER must be one of .*='genetic'$"),
    ({"AUTOBYTE_SCHEDULING": "maybe"}, r"^AUTOBYTE_SCHEDULING must be true/false"),
    ({"AUTOBYTE_WINDOW_STEPS": "0"}, r"^AUTOBYTE_WINDOW_STEPS must be between 1 and"),
    ({"AUTOBYTE_GAIN_THRESHOLD": "x"}, r"^AUTOBYTE_GAIN_THRESHOLD must be a float"),
    ({"AUTOBYTE_CREDIT_BYTES": "512KiB"},
     r"^AUTOBYTE_CREDIT_BYTES must be >= partition_bytes .* got AUTOBYTE_CREDIT_BYTES=524288 "
     r"\(512KiB\) < partition_bytes=1048576"),
])
def test_env_errors_name_the_variable_and_its_value(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.from_env(env)


def test_keywords_name_the_keyword_or_the_flag_they_came_from() -> None:
    with pytest.raises(ConfigError, match=r"^partition_bytes must be a number .*='lots'$"):
        Config.from_env({}, partition_bytes="lots")
    flags = {"partition_bytes": "--partition", "credit_bytes": "--credit"}
    with pytest.raises(ConfigError, match=r"^--partition must be .* got --partition='lots'$"):
        Config.from_env({}, partition_bytes="lots", flags=flags)
    with pytest.raises(ConfigError, match=r"^--credit must be >= AUTOBYTE_PARTITION_BYTES"):
        Config.from_env({"AUTOBYTE_PARTITION_BYTES": "2MiB"}, credit_bytes="1MiB", flags=flags)
    with pytest.raises(ConfigError, match="unknown option"):
        Config.from_env({}, flags={"partition": "--partition"})


def test_a_keyword_replaces_an_invalid_variable_unread() -> None:
    env = {"AUTOBYTE_PARTITION_BYTES": "lots"}
    assert Config.from_env(env, partition_bytes="2MiB").partition_bytes == 2 << 20


def test_unknown_env_variable_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        Config.from_env({"AUTOBYTE_PARTITON_BYTES": "1MiB"})
    assert "AUTOBYTE_PARTITON_BYTES" in caplog.text
    assert "AUTOBYTE_PARTITION_BYTES" in known_env_vars()


def test_unknown_keyword_is_an_error() -> None:
    with pytest.raises(ConfigError, match="unknown option"):
        Config.from_env({}, partition=1)
    with pytest.raises(ConfigError, match="unknown option"):
        Config().replace(credit=1)


def test_dict_round_trip_and_replace_validates() -> None:
    config = Config(partition_bytes="2MiB", credit_bytes="8MiB", scheduling=False)
    assert Config.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError):
        config.replace(credit_bytes="1MiB")
    assert config.describe() == "native (the framework's own path)"
    scheduled = config.replace(scheduling=True).describe()
    assert "2MiB" in scheduled and "4x" in scheduled


@pytest.mark.parametrize(("name", "raw", "value"), [
    (RANK_ENV, "3", 3), (NUM_WORKERS_ENV, " 8 ", 8), (ROLE_ENV, "Server", "server"),
    (VERBOSE_ENV, "0", False), (VERBOSE_ENV, "yes", True), (SECRET_ENV, "s3cret", "s3cret"),
    (COORDINATOR_ENV, "tcp://10.0.0.1:5599", "tcp://10.0.0.1:5599"),
    (TESTBED_PREFIX_ENV, "ci7", "ci7"), (COORDINATOR_TIMEOUT_ENV, "2.5", 2.5),
    (RANK_ENV, "", None), (SECRET_ENV, None, None)])
def test_every_job_variable_is_parsed_in_one_place(name: str, raw: str | None,
                                                   value: object) -> None:
    assert environment(name, {} if raw is None else {name: raw}) == value
    assert name in known_env_vars()


@pytest.mark.parametrize(("name", "raw", "allowed"), [
    (RANK_ENV, "-1", "between 0"), (NUM_WORKERS_ENV, "two", "must be a int"),
    (ROLE_ENV, "boss", "one of"), (VERBOSE_ENV, "loud", "true/false"),
    (COORDINATOR_ENV, "10.0.0.1:5599", "tcp://<host>:<port>"),
    (TESTBED_PREFIX_ENV, "Toolong7", "2-5 lowercase"),
    (COORDINATOR_TIMEOUT_ENV, "0", "between 1.0 and 3600.0")])
def test_a_malformed_job_variable_names_itself_and_what_it_allows(name: str, raw: str,
                                                                   allowed: str) -> None:
    with pytest.raises(ConfigError, match=f"{name}.*{re.escape(allowed)}"):
        environment(name, {name: raw})
    with pytest.raises(ValueError, match="not one of AutoByte's job variables"):
        environment("AUTOBYTE_NOPE", {})

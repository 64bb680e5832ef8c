"""Unit tests of the testbed and launcher logic: no root, no network, milliseconds."""

from __future__ import annotations

import json
import shlex

import pytest

from common.errors import ConfigError
from common.launch import default_placement, plan
from common.launch._ports import reserve_ports
from common.launch._ssh import remote_argv, remote_script
from common.testbed import RateStep, ScheduleRunner, Testbed, parse_schedule, parse_seconds
from common.testbed import _testbed as testbed_module
from common.testbed._measure import Flow


def test_parse_schedule_steps_and_directions() -> None:
    steps = parse_schedule("10gbit:20, 3gbit:20,1gbit/100mbit:0.5")
    assert steps == (RateStep(1e10, 1e10, 20.0), RateStep(3e9, 3e9, 20.0),
                     RateStep(1e9, 1e8, 0.5))
    assert str(steps[2]) == "1gbit/100mbit:0.5"


@pytest.mark.parametrize("text", ["", "10gbit", "10gbit:0", "fast:2", "1gbit:x"])
def test_parse_schedule_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="schedule"):
        parse_schedule(text)


def test_parse_seconds() -> None:
    assert parse_seconds("5ms", "latency") == pytest.approx(0.005)
    assert parse_seconds("200us", "latency") == pytest.approx(0.0002)
    assert parse_seconds(0.25, "latency") == 0.25
    assert parse_seconds(None, "latency") is None
    with pytest.raises(ConfigError, match="latency must be between 0 and 10 s"):
        parse_seconds("20s", "latency")
    with pytest.raises(ConfigError, match="latency must be a duration"):
        parse_seconds("soon", "latency")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"hosts": 0}, "hosts must be an int between 1 and 150, got hosts=0"),
    ({"hosts": 2, "prefix": "Bad-Name"}, "prefix must be 2-10 lowercase"),
    ({"hosts": 2, "loss": 120}, "loss must be a percentage"),
    ({"hosts": 2, "rate": "-1gbit"}, "rate"),
])
def test_testbed_validates_at_the_boundary(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Testbed(**kwargs)  # type: ignore[arg-type]


def test_non_root_falls_back_to_loopback_with_a_clear_message(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(testbed_module, "_euid", lambda: 1000)
    with pytest.warns(RuntimeWarning, match=r"not running as root \(euid=1000\).*loopback"):
        tb = Testbed(hosts=3, rate="1gbit")
    with tb:
        assert not tb.shaped
        assert [h.address for h in tb.hosts] == ["127.0.0.1"] * 3
        assert all(h.netns is None for h in tb.hosts)
        assert tb.wrap(1, ["python", "x.py"]) == ["python", "x.py"]
        with pytest.warns(RuntimeWarning, match="set_rate ignored"):
            tb.set_rate("100mbit")
        assert tb.rates(0) == (None, None)
        assert "NOT shaped" in tb.describe()
    assert tb.closed


def test_schedule_runner_applies_in_order_and_stops_promptly() -> None:
    applied: list[RateStep] = []
    steps = parse_schedule("1gbit:0.01,2gbit:0.01,3gbit:3600")
    runner = ScheduleRunner(apply=applied.append, steps=steps, repeat=True).start()
    while len(applied) < 3:
        runner.wait(0.01)
    runner.stop(timeout=5)
    assert not runner.running
    assert [s.up for s in applied] == [1e9, 2e9, 3e9]


def test_schedule_runner_once_ends_by_itself() -> None:
    applied: list[RateStep] = []
    runner = ScheduleRunner(apply=applied.append, steps=parse_schedule("1gbit:0.01,2gbit:0.01"),
                            repeat=False).start()
    assert runner.wait(5)
    assert len(applied) == 2


def test_flow_rate_and_settle_time() -> None:
    # 1 s at 100 Mbit/s then 1 s at 1 Gbit/s, 50 ms bins, change at t=1.0
    low, high = int(1e8 / 8 * 0.05), int(1e9 / 8 * 0.05)
    flow = Flow(start=0.0, bin_s=0.05, bins=(low,) * 20 + (high,) * 21, total_bytes=0,
                changed_at=1.0)
    assert flow.rate(0.3, 1.0) == pytest.approx(1e8)
    assert flow.rate(1.0, 2.0) == pytest.approx(1e9)
    assert flow.settle_time(1e9) == pytest.approx(0.2)


def test_mxnet_plan_sets_dmlc_variables_and_places_servers_apart() -> None:
    specs = plan(framework="mxnet", workers=2, servers=2, addresses=["z", "y", "x"],
                 ports=[9000, 9001, 9002, 9003, 9004])
    by = {s.name: s for s in specs}
    assert list(by) == ["scheduler", "server0", "server1", "worker0", "worker1"]
    assert [by[n].address for n in by] == ["z", "z", "z", "y", "x"]
    w1 = by["worker1"].env
    assert w1["DMLC_ROLE"] == "worker" and w1["DMLC_WORKER_ID"] == "1"
    assert w1["DMLC_PS_ROOT_URI"] == "z" and w1["DMLC_PS_ROOT_PORT"] == "9000"
    assert w1["DMLC_NUM_SERVER"] == "2" and w1["DMLC_NUM_WORKER"] == "2"
    assert w1["DMLC_NODE_HOST"] == "x" and w1["PORT"] == "9004"
    assert w1["AUTOBYTE_RANK"] == "1" and w1["AUTOBYTE_NUM_WORKERS"] == "2"
    assert by["server1"].env["PORT"] == "9002" and by["server1"].env["DMLC_ROLE"] == "server"
    assert "PORT" not in by["scheduler"].env
    assert by["scheduler"].env["AUTOBYTE_ROLE"] == "scheduler"


def test_mxnet_worker_ids_follow_pslite_rank_order() -> None:
    # ps-lite ranks by address descending, then port ascending: worker i must be rank i.
    same_host = plan(framework="mxnet", workers=3, servers=1, addresses=["h"],
                     ports=[1, 2, 9, 5, 7])
    assert [s.port for s in same_host if s.role == "worker"] == [5, 7, 9]
    ascending = plan(framework="mxnet", workers=2, servers=1, addresses=["a", "b", "c"],
                     ports=[1, 2, 3, 4])
    workers = [s for s in ascending if s.role == "worker"]
    assert [(s.name, s.address, s.env["DMLC_WORKER_ID"]) for s in workers] == [
        ("worker0", "c", "0"), ("worker1", "b", "1")]


def test_tensorflow_plan_sets_tf_config() -> None:
    specs = plan(framework="tensorflow", workers=3, servers=0, addresses=["a", "b"],
                 ports=[1, 2, 3])
    configs = [json.loads(s.env["TF_CONFIG"]) for s in specs]
    assert configs[2] == {"cluster": {"worker": ["a:1", "b:2", "a:3"]},
                          "task": {"type": "worker", "index": 2}}
    assert all("DMLC_ROLE" not in s.env for s in specs)


def test_placement_defaults_and_override() -> None:
    assert default_placement("mxnet", 2, 1, 2) == {"scheduler": 0, "server0": 0,
                                                   "worker0": 0, "worker1": 1}
    specs = plan(framework="mxnet", workers=1, servers=1, addresses=["a", "b"], ports=[1, 2, 3],
                 placement={"server0": 1})
    assert [s.address for s in specs] == ["a", "b", "b"]
    with pytest.raises(ConfigError, match="unknown process 'server7'"):
        plan(framework="mxnet", workers=1, servers=1, addresses=["a"], ports=[1, 2, 3],
             placement={"server7": 0})
    with pytest.raises(ConfigError, match="framework must be one of"):
        plan(framework="torch", workers=1, servers=1, addresses=["a"], ports=[1])


def test_reserved_ports_are_distinct_and_below_the_ephemeral_range() -> None:
    first, second = reserve_ports(8), reserve_ports(8)
    try:
        ports = first.ports + second.ports
        assert len(set(ports)) == 16
        assert all(20000 <= p < 32000 for p in ports)
    finally:
        first.release()
        second.release()


def test_remote_command_passes_env_and_kills_the_group_when_the_channel_closes() -> None:
    script = remote_script(["python", "train.py", "--lr", "0.1 x"],
                           {"DMLC_ROLE": "worker", "TF_CONFIG": '{"a": [1]}'}, "/work dir")
    assert "cd '/work dir' || exit 127" in script
    assert "env DMLC_ROLE=worker TF_CONFIG='{\"a\": [1]}' setsid python train.py --lr '0.1 x' <" \
        in script
    assert "kill -TERM -$pid" in script
    secret = remote_script(["true"], {}, None, stdin_vars=("AUTOBYTE_SECRET",))
    assert "IFS= read -r AUTOBYTE_SECRET <&3 || exit 126\nexport AUTOBYTE_SECRET\n" in secret
    argv = remote_argv(["ssh", "-p", "22"], "node1", ["true"], {}, None)
    assert argv[:4] == ["ssh", "-p", "22", "node1"]
    assert argv[4:6] == ["sh", "-c"] and "\nsetsid true </dev/null" in shlex.split(argv[6])[0]


"""The real testbed (root): namespaces, links, shaping, cleanup in every way a run can end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from tb_helpers import BASE, our_netns, our_records, root_only, sweep_crashed_sessions

from common.errors import TestbedError
from common.testbed import Testbed, sweep
from common.testbed._measure import measure_flow, measure_message
from common.testbed._net import list_netns

pytestmark = [*root_only, pytest.mark.usefixtures("no_leaks")]


def _tc(tb: Testbed, netns: str, dev: str) -> str:
    return subprocess.run(["ip", "netns", "exec", netns, "tc", "qdisc", "show", "dev", dev],
                          capture_output=True, text=True, check=True).stdout


def test_up_and_down_leave_nothing_behind() -> None:
    with Testbed(hosts=3, rate="100mbit") as tb:
        assert tb.shaped and tb.name.startswith(BASE)
        assert our_netns() == sorted([f"{tb.name}-sw", *(f"{tb.name}-h{i}" for i in range(3))])
        assert our_records() == [f"{tb.name}.json"]
        addresses = [h.address for h in tb.hosts]
        assert len(set(addresses)) == 3 and all(a.startswith("10.2") for a in addresses)
        bind = subprocess.run(tb.wrap(0, [sys.executable, "-c", textwrap.dedent(f"""
            import socket
            s = socket.create_server(("{tb.hosts[0].address}", 7000))
            print("ok")
        """)]), capture_output=True, text=True, timeout=30)
        assert bind.stdout.strip() == "ok", bind.stderr
        assert "rate 100Mbit" in _tc(tb, tb.hosts[1].netns or "", "eth0")
        assert "rate 100Mbit" in _tc(tb, tb.switch_netns, "p1")
    assert tb.closed


def test_failure_inside_the_context_still_tears_down() -> None:
    with pytest.raises(RuntimeError, match="boom"), Testbed(hosts=2, rate="1gbit"):
        raise RuntimeError("boom")


def test_processes_left_in_a_namespace_are_stopped_at_close() -> None:
    with Testbed(hosts=2) as tb:
        proc = subprocess.Popen(tb.wrap(1, ["sleep", "300"]), start_new_session=True)
    try:
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode is not None


def test_set_rate_changes_one_host_or_all() -> None:
    with Testbed(hosts=3, rate="1gbit") as tb:
        tb.set_rate("100mbit", host="h1")
        assert tb.rates(1) == (1e8, 1e8) and tb.rates(0) == (1e9, 1e9)
        assert "rate 100Mbit" in _tc(tb, tb.hosts[1].netns or "", "eth0")
        assert "rate 1Gbit" in _tc(tb, tb.hosts[0].netns or "", "eth0")
        tb.set_rate(up="200mbit", down="300mbit")
        assert all(tb.rates(i) == (2e8, 3e8) for i in range(3))
        assert "rate 300Mbit" in _tc(tb, tb.switch_netns, "p2")


def test_schedule_changes_rates_in_the_background() -> None:
    with Testbed(hosts=2, rate="1gbit") as tb:
        runner = tb.run_schedule("100mbit:0.05,500mbit:0.05", repeat=False)
        assert runner.wait(10) and runner.error is None
        assert tb.rates(0) == (5e8, 5e8)
        assert "rate 500Mbit" in _tc(tb, tb.hosts[0].netns or "", "eth0")
        endless = tb.run_schedule("100mbit:60")
    assert not endless.running


def test_latency_needs_netem_or_says_why() -> None:
    try:
        tb = Testbed(hosts=2, rate="1gbit", latency="2ms")
    except TestbedError as exc:
        assert "netem" in str(exc) and "CONFIG_NET_SCH_NETEM" in str(exc)
        return
    with tb:
        assert "netem" in _tc(tb, tb.hosts[0].netns or "", "eth0")


def _crash_script(how: str) -> str:
    return textwrap.dedent(f"""
        import os, signal, sys, time
        from common.testbed import Testbed
        tb = Testbed(hosts=2, rate="1gbit")
        print(tb.name, flush=True)
        if "{how}" == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    """)


def test_crashed_run_leftovers_are_swept_by_the_next_run() -> None:
    proc = subprocess.run([sys.executable, "-c", _crash_script("kill")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    name = proc.stdout.strip()
    assert f"{name}-h0" in our_netns(), "the crash should have left namespaces behind"
    with Testbed(hosts=1) as tb:
        assert not any(ns.startswith(name) for ns in our_netns())
        assert tb.name != name
    assert sweep(BASE) == []


def test_a_named_testbed_sweeps_crashed_unnamed_runs_too() -> None:
    """`autobyte demo` killed outright leaves unnamed namespaces and processes; the next
    `testbed up --name X` clears them."""
    proc = subprocess.run([sys.executable, "-c", _crash_script("kill")], capture_output=True,
                          text=True, timeout=60)
    name = proc.stdout.strip()
    assert f"{name}-h0" in our_netns(), "the crash should have left namespaces behind"
    with Testbed(hosts=1, prefix=BASE + "named") as tb:
        assert tb.name == BASE + "named"
        assert not any(ns.startswith(name) for ns in our_netns())


def test_a_test_session_clears_the_testbeds_of_a_killed_one() -> None:
    other = "tzzzz" if BASE != "tzzzz" else "tyyyy"  # another session's base
    proc = subprocess.run([sys.executable, "-c", _crash_script("kill")], capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "AUTOBYTE_TESTBED_PREFIX": other})
    name = proc.stdout.strip()
    try:
        assert name.startswith(other) and f"{name}-h0" in list_netns()
        assert name in sweep_crashed_sessions()
        assert not [ns for ns in list_netns() if ns.startswith(name)]
    finally:
        sweep(other)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 128 + signal.SIGTERM),
                                           (signal.SIGINT, -signal.SIGINT)])
def test_sigterm_or_ctrl_c_to_the_owner_tears_down(sig: signal.Signals, code: int) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _crash_script("term")],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        name = proc.stdout.readline().strip()
        assert f"{name}-sw" in our_netns()
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == code
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not any(ns.startswith(name) for ns in our_netns())


@pytest.mark.parametrize("ending", ["sys.exit(0)", "raise RuntimeError('crash')"])
def test_exit_without_close_tears_down(ending: str) -> None:
    script = ("import sys\nfrom common.testbed import Testbed\n"
              "tb = Testbed(hosts=2, rate='1gbit')\nprint(tb.name, flush=True)\n" + ending)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    name = proc.stdout.strip()
    assert name.startswith(BASE), proc.stderr
    assert not any(ns.startswith(name) for ns in our_netns())


def test_explicit_prefix_in_use_is_refused() -> None:
    name = f"{BASE}fix"
    with Testbed(hosts=1, prefix=name), pytest.raises(TestbedError, match="in use"):
        Testbed(hosts=1, prefix=name)


@pytest.mark.parametrize("rate", [100e6, 1e9], ids=["100mbit", "1gbit"])
def test_achieved_tcp_throughput_within_10_percent(rate: float) -> None:
    with Testbed(hosts=2, rate=rate) as tb:
        flow = measure_flow(tb, 0, 1, seconds=3.0)
    achieved = flow.rate()
    print(f"\nset {rate / 1e6:g} Mbit/s, achieved {achieved / 1e6:.1f} Mbit/s "
          f"({achieved / rate:.3f})")
    assert abs(achieved - rate) <= 0.10 * rate


@pytest.mark.parametrize("rate", [100e6, 1e9], ids=["100mbit", "1gbit"])
def test_a_message_after_a_pause_goes_no_faster_than_the_rate(rate: float) -> None:
    nbytes = 1 << 20
    with Testbed(hosts=2, rate=rate) as tb:
        took = measure_message(tb, 0, 1, nbytes=nbytes)
    print(f"\n{nbytes} B after a pause at {rate / 1e6:g} Mbit/s: {took * 1e3:.1f} ms, "
          f"{nbytes * 8 / took / rate:.3f} of the rate")
    assert took >= 0.9 * nbytes * 8 / rate


@pytest.mark.parametrize(("old", "new"), [(100e6, 1e9), (1e9, 100e6)], ids=["up", "down"])
def test_rate_change_takes_effect_within_one_second(old: float, new: float) -> None:
    with Testbed(hosts=2, rate=old) as tb:
        flow = measure_flow(tb, 0, 1, seconds=3.0, change_after=1.2,
                            change=lambda: tb.set_rate(new))
    before = flow.rate(t1=flow.changed_at)
    settle = flow.settle_time(new)
    print(f"\n{old / 1e6:g} -> {new / 1e6:g} Mbit/s: before {before / 1e6:.1f}, "
          f"settled after {settle}")
    assert abs(before - old) <= 0.15 * old
    assert settle is not None and settle <= 1.0


def test_every_host_reaches_every_other_through_the_switch() -> None:
    with Testbed(hosts=4, rate="1gbit") as tb:
        server = subprocess.Popen(tb.wrap(0, [sys.executable, "-c", textwrap.dedent(f"""
            import socket
            s = socket.create_server(("{tb.hosts[0].address}", 7001))
            s.settimeout(20)
            print("ready", flush=True)
            peers = sorted(s.accept()[1][0] for _ in range(3))
            print(" ".join(peers), flush=True)
        """)]), stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            for host in tb.hosts[1:]:
                subprocess.run(tb.wrap(host, [sys.executable, "-c", (
                    f"import socket; socket.create_connection(('{tb.hosts[0].address}', 7001),"
                    " timeout=10)")]), check=True, timeout=30)
            peers = server.stdout.readline().split()
        finally:
            server.kill()
            server.wait()
        assert peers == sorted(h.address for h in tb.hosts[1:])

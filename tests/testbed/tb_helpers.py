"""Helpers shared by the testbed and launcher tests (imported by name: tests have no
packages, and pytest puts this folder on sys.path)."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import string
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.testbed import Testbed, _registry

BASE = "t" + "".join(secrets.choice(string.ascii_lowercase) for _ in range(4))
os.environ["AUTOBYTE_TESTBED_PREFIX"] = BASE

IS_ROOT = os.geteuid() == 0
root_only = [
    pytest.mark.testbed,
    pytest.mark.skipif(not IS_ROOT, reason="needs root: network namespaces and tc (run the "
                       "testbed tests as root to cover shaped links)"),
]


# Records its pid and a forked grandchild's pid, then behaves as EXIT_<name> says:
# "sleep" (default) sleeps; a number waits until EXPECT pid files exist, then exits with it.
CHILD = textwrap.dedent("""
    import os, subprocess, sys, time
    from pathlib import Path
    d = Path(os.environ["PIDS"])
    role, rank = os.environ["AUTOBYTE_ROLE"], os.environ["AUTOBYTE_RANK"]
    name = role if role == "scheduler" else role + rank
    kid = subprocess.Popen(["sleep", "300"])
    (d / f"{name}.pid").write_text(f"{os.getpid()} {kid.pid}")
    print(f"hello from {name}", flush=True)
    action = os.environ.get("EXIT_" + name, "sleep")
    if action == "sleep":
        time.sleep(300)
    deadline = time.time() + 20
    while len(list(d.glob("*.pid"))) < int(os.environ["EXPECT"]) and time.time() < deadline:
        time.sleep(0.05)
    sys.exit(int(action))
""")


def child_pids(directory: Path) -> list[int]:
    return [int(p) for f in directory.glob("*.pid") for p in f.read_text().split()]


def our_netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return sorted(line.split()[0] for line in out.splitlines() if line.startswith(BASE))


def sweep_crashed_sessions() -> list[str]:
    """Testbeds of earlier test sessions (bases like ours) whose process is dead: a session
    killed outright (SIGKILL, a machine restart) never reached its own clean-up. Returns the
    names cleared."""
    pattern = re.compile(r"^t[a-z]{4}[a-z0-9]+$")
    dead = [str(r["name"]) for r in _registry.records()
            if pattern.match(str(r["name"])) and not str(r["name"]).startswith(BASE)
            and not _registry.owner_alive(r)]
    return [name for name in dead if not _registry.destroy(name)]


def our_records() -> list[str]:
    return sorted(p.name for p in _registry.RUN_DIR.glob(f"{BASE}*.json"))


def root_links() -> set[str]:
    """Links in the root namespace that look like ours (names the testbed uses inside its
    namespaces, or our base); other engineers' links are ignored."""
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}
    return {n for n in names if n.startswith(BASE) or re.fullmatch(r"eth0|br0|p\d+", n)}


@contextlib.contextmanager
def nothing_left_behind() -> Iterator[None]:
    """Fail if the block leaves a namespace, a testbed record or a root-namespace link."""
    links = root_links()
    yield
    assert our_netns() == [], "namespaces left behind"
    assert our_records() == [], "testbed records left behind"
    assert root_links() == links, "links in the root namespace changed"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


SSHD = "/usr/sbin/sshd"
SSH_PORT = 2222


@contextlib.contextmanager
def sshd_on(tb: Testbed, hosts: list[int], directory: Path) -> Iterator[list[str]]:
    """Run a throwaway sshd (own host and user keys, port 2222) inside each host's namespace.

    Yields the ssh client command line, run from host 0's namespace, that logs in with the
    throwaway user key. Every sshd is stopped afterwards.
    """
    for key in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                        str(directory / key)], check=True)
    (directory / "authorized_keys").write_text((directory / "user_key.pub").read_text())
    config = directory / "sshd_config"
    config.write_text(textwrap.dedent(f"""\
        Port {SSH_PORT}
        HostKey {directory}/host_key
        AuthorizedKeysFile {directory}/authorized_keys
        PermitRootLogin prohibit-password
        PasswordAuthentication no
        KbdInteractiveAuthentication no
        UsePAM no
        StrictModes no
        PidFile none
    """))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    daemons = [subprocess.Popen(tb.wrap(h, [SSHD, "-D", "-e", "-f", str(config)]),
                                stderr=subprocess.DEVNULL, start_new_session=True)
               for h in hosts]
    ssh = tb.wrap(0, ["ssh", "-i", str(directory / "user_key"), "-p", str(SSH_PORT),
                      "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                      "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"])
    try:
        for h in hosts:
            deadline = time.monotonic() + 20
            while subprocess.run([*ssh, tb.hosts[h].address, "true"],
                                 capture_output=True).returncode != 0:
                assert time.monotonic() < deadline, f"sshd on host {h} did not come up"
                time.sleep(0.1)
        yield ssh
    finally:
        for daemon in daemons:
            os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in daemons:
            try:
                daemon.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()

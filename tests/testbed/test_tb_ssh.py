"""``launch(hosts=...)`` over real ssh, against sshd running inside testbed namespaces (root).

Host 0 plays the machine the user types on; hosts 1-3 are the "cluster", each with its own
sshd. Remote processes must land in the right namespace, get the launcher's variables, and
all die when the job stops, although only the local ssh clients are signalled.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pytest
from tb_helpers import CHILD, SSHD, child_pids, pid_alive, root_only, sshd_on

from common.launch import launch
from common.testbed import Testbed

pytestmark = [
    *root_only,
    pytest.mark.skipif(not Path(SSHD).exists() or shutil.which("ssh") is None,
                       reason="needs openssh-server and ssh (scripts/setup.sh installs them)"),
    pytest.mark.usefixtures("no_leaks"),
]


def _marked(output: str) -> list[str]:
    """The words of the line the job printed; root's login shell may add its own lines (pyenv's
    rehash in ~/.bashrc races with the other sessions and says "rm: cannot remove ...")."""
    lines = [line.split()[1:] for line in output.splitlines() if line.startswith("seen: ")]
    assert len(lines) == 1, output
    return lines[0]


def test_launch_over_ssh_places_processes_and_propagates_failure(tmp_path: Path) -> None:
    with Testbed(hosts=4, rate="1gbit") as tb, sshd_on(tb, [1, 2, 3], tmp_path) as ssh:
        cluster = [h.address for h in tb.hosts[1:]]
        where = launch(
            framework="mxnet", workers=2, hosts=cluster, ssh=ssh, stream=None, timeout=60,
            env={"GREETING": "hi there", "AUTOBYTE_SECRET": "not-on-the-command-line"},
            command=["sh", "-c", 'echo "seen: $(ip netns identify) $DMLC_NODE_HOST '
                     '$DMLC_PS_ROOT_URI $GREETING $AUTOBYTE_SECRET '
                     '$(ps -eo args | grep -c "[n]ot-on-the-command")"'])
        assert where.returncode == 0, {n: p.output for n, p in where.processes.items()}
        seen = {name: _marked(p.output) for name, p in where.processes.items()}
        assert seen["scheduler"][0] == tb.hosts[1].netns
        assert seen["server0"][:3] == [tb.hosts[1].netns, cluster[0], cluster[0]]
        assert seen["worker0"][:3] == [tb.hosts[2].netns, cluster[1], cluster[0]]
        assert seen["worker1"][:2] == [tb.hosts[3].netns, cluster[2]]
        # the secret arrived, and no command line on the machine shows it
        assert seen["worker1"][3:] == ["hi", "there", "not-on-the-command-line", "0"]

        pids = tmp_path / "pids"
        pids.mkdir()
        failed = launch(framework="mxnet", workers=2, hosts=cluster, ssh=ssh, stream=None,
                        timeout=60, grace=2.0, command=[sys.executable, "-c", CHILD],
                        env={"PIDS": str(pids), "EXPECT": "4", "EXIT_worker1": "3"})
        assert failed.returncode == 3 and failed.failed == "worker1"
        remote = child_pids(pids)
        assert len(remote) == 8
        deadline = time.monotonic() + 5  # the remote watchdogs act once the channels close
        while [p for p in remote if pid_alive(p)] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in remote if pid_alive(p)], "remote processes survived"

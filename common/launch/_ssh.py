"""Run a process on another machine over ssh, the way horovodrun -H and MXNet's launcher do.

The environment the launcher sets is passed on the remote command line (``env K=V ...``), the
working directory is the same path as here (a shared file system, as on most clusters). The
remote job runs in its own session; a watchdog on the remote side waits for the ssh channel's
stdin to close and then kills the job's whole process group, so stopping the local ssh client
(or losing the connection) never leaves remote processes behind. When the job's main process
exits, whatever it left in its group is stopped too: a leftover holding the channel's stdout
would otherwise keep the ssh session (and the launch) open.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

__all__ = ["DEFAULT_SSH", "remote_argv", "remote_script"]

DEFAULT_SSH = ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR")

# A non-interactive sh gives background jobs /dev/null as stdin, so the watchdog reads the
# channel through fd 3, saved before anything is put in the background.
_TEMPLATE = """\
exec 3<&0
{reads}{cd}{env}setsid {argv} </dev/null 3<&- &
pid=$!
( while read -r _; do :; done; kill -TERM -$pid 2>/dev/null; sleep 3; \
kill -KILL -$pid 2>/dev/null ) <&3 >/dev/null 2>&1 &
watchdog=$!
exec 3<&-
wait $pid
rc=$?
kill $watchdog 2>/dev/null
kill -TERM -$pid 2>/dev/null
( sleep 2; kill -KILL -$pid 2>/dev/null ) </dev/null >/dev/null 2>&1 &
exit $rc
"""


def remote_script(argv: Sequence[str], env: Mapping[str, str], cwd: str | None,
                  stdin_vars: Sequence[str] = ()) -> str:
    """POSIX sh that runs ``argv`` with ``env`` in ``cwd`` and dies with the channel.

    ``stdin_vars`` are read, one line each, from the channel first (secrets stay off the
    command line) and exported to the job.
    """
    cd = f"cd {shlex.quote(cwd)} || exit 127\n" if cwd else ""
    reads = "".join(f"IFS= read -r {name} <&3 || exit 126\nexport {name}\n"
                    for name in stdin_vars)
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return _TEMPLATE.format(reads=reads, cd=cd, env=f"env {assignments} " if assignments else "",
                            argv=shlex.join(argv))


def remote_argv(ssh: Sequence[str], host: str, argv: Sequence[str], env: Mapping[str, str],
                cwd: str | None, stdin_vars: Sequence[str] = ()) -> list[str]:
    """The local command line: ``ssh ... HOST sh -c '<script>'``."""
    script = remote_script(argv, env, cwd, stdin_vars)
    return [*ssh, host, "sh", "-c", shlex.quote(script)]

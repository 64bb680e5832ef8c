"""``autobyte launch``: start a distributed job and wait for it.

    autobyte launch --framework mxnet --workers 2 --servers 1 -- python train.py
    autobyte launch --framework tensorflow --workers 4 --testbed abt3k9x2 -- python train.py
    autobyte launch --framework mxnet --workers 2 --hosts a,b,c --ssh-port 2222 -- python t.py

Starts the framework's processes (MXNet: scheduler, servers and workers; TensorFlow: workers),
each with the variables AutoByte and the framework need, streams their output with a prefix and
stops them all when one fails. Without --testbed or --hosts every process runs on this machine's
loopback. Exit status: 0, the first failing process's exit code, 124 on timeout, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from common.errors import ConfigError
from common.launch import DEFAULT_SSH, FRAMEWORKS, launch
from common.testbed import Testbed

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "launch", help="run a distributed job (scheduler/servers/workers) and wait for it",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=FRAMEWORKS, required=True,
                        help="which processes to start: " + " or ".join(FRAMEWORKS))
    parser.add_argument("--workers", type=int, required=True, help="worker processes")
    parser.add_argument("--servers", type=int, default=1,
                        help="parameter servers (mxnet only, default 1)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--testbed", help="testbed name or state file (autobyte testbed up)")
    where.add_argument("--hosts", help="comma-separated remote hosts, reached over ssh")
    parser.add_argument("--ssh-port", type=int, help="ssh port on the remote hosts")
    parser.add_argument("--ssh-identity", help="ssh private key file")
    parser.add_argument("--ssh-option", action="append", default=[], metavar="OPT",
                        help="extra ssh -o option, e.g. StrictHostKeyChecking=no (repeatable)")
    parser.add_argument("--place", action="append", default=[], metavar="NAME=HOST",
                        help="put a process on a host index, e.g. server0=2 (repeatable)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment variable for every process (repeatable)")
    parser.add_argument("--timeout", type=float, help="stop the job after this many seconds")
    parser.add_argument("--quiet", action="store_true", help="do not stream process output")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command every process runs (after --)")
    parser.set_defaults(func=_run)


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} must be KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def ssh_command(args: argparse.Namespace) -> list[str]:
    ssh = list(DEFAULT_SSH)
    if args.ssh_port:
        ssh += ["-p", str(args.ssh_port)]
    if args.ssh_identity:
        ssh += ["-i", args.ssh_identity]
    for option in args.ssh_option:
        ssh += ["-o", option]
    return ssh


def _run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise ConfigError("give the command to run after --, e.g. -- python train.py")
    if args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, but got --workers={args.workers}")
    if args.framework == "mxnet" and args.servers < 1:
        raise ConfigError(f"--servers must be >= 1 for mxnet, but got --servers={args.servers}")
    if args.framework == "tensorflow" and args.servers not in (0, 1):
        raise ConfigError(f"--servers applies to mxnet only (tensorflow uses all-reduce), but "
                          f"got --servers={args.servers}")
    if args.timeout is not None and not args.timeout > 0:
        raise ConfigError(f"--timeout must be > 0 seconds, but got --timeout={args.timeout:g}")
    placement = {}
    for name, value in _pairs(args.place, "--place").items():
        if not value.isdigit():
            raise ConfigError(f"--place must be NAME=HOST_INDEX, got {name}={value!r}")
        placement[name] = int(value)
    testbed = Testbed.attach(args.testbed) if args.testbed else None
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()] if args.hosts else None
    result = launch(framework=args.framework, command=command, workers=args.workers,
                    servers=args.servers, env=_pairs(args.env, "--env"), testbed=testbed,
                    timeout=args.timeout, stream=None if args.quiet else sys.stdout,
                    hosts=hosts, ssh=ssh_command(args), placement=placement)
    if result.timed_out:
        print(f"autobyte launch: timed out after {args.timeout:g} s", file=sys.stderr)
    elif result.failed:
        print(f"autobyte launch: {result.failed} failed with exit code {result.returncode}",
              file=sys.stderr)
    return result.returncode

"""Start a distributed job's processes on testbed hosts, on loopback or on remote hosts (ssh).

    result = launch(framework="mxnet", command=[sys.executable, "train.py"], workers=2,
                    testbed=tb, timeout=300)

Every role runs ``command`` (MXNet convention: with DMLC_ROLE=scheduler/server, ``import
mxnet`` runs that node and exits). See ``common.launch._plan`` for placement and variables.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

from common.config import CONTROL_ENDPOINT_ENV, COORDINATOR_ENV, SECRET_ENV
from common.control import ensure_secret
from common.errors import ConfigError
from common.launch._plan import FRAMEWORKS, ProcessSpec, default_placement, plan
from common.launch._ports import reserve_ports
from common.launch._run import STDOUT, Job, LaunchResult, ProcessResult, Writable, run_job
from common.launch._ssh import DEFAULT_SSH, remote_argv
from common.testbed import Testbed

__all__ = [
    "CONTROL_ENDPOINT_ENV",
    "DEFAULT_SSH",
    "FRAMEWORKS",
    "STDOUT",
    "LaunchResult",
    "ProcessResult",
    "ProcessSpec",
    "Writable",
    "default_placement",
    "launch",
    "plan",
]

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


def launch(*, framework: str, command: Sequence[str], workers: int, servers: int = 1,
           env: Mapping[str, str] | None = None, testbed: Testbed | None = None,
           timeout: float | None = None, stream: Writable | None = STDOUT,
           hosts: Sequence[str] | None = None, ssh: Sequence[str] = DEFAULT_SSH,
           placement: Mapping[str, int] | None = None, cwd: str | None = None,
           grace: float = 5.0, linger: float = 30.0) -> LaunchResult:
    """Run one job to completion and return every process's exit code and output.

    Where: ``testbed`` hosts (inside their namespaces), else remote ``hosts`` over ``ssh``
    (the command line, e.g. ``["ssh", "-p", "2222"]``), else loopback. ``env`` is added to
    every process's environment (remote processes get only ``env`` plus the launcher's
    variables, not this shell's environment). The first process to fail stops the job and its
    exit code is returned; ``timeout`` (s) stops it with 124; Ctrl-C stops it and re-raises.

    Besides the framework's variables every process gets AUTOBYTE_RANK, AUTOBYTE_ROLE,
    AUTOBYTE_NUM_WORKERS, the job's AUTOBYTE_SECRET and, unless AUTOBYTE_COORDINATOR names an
    external coordinator, AUTOBYTE_CONTROL_ENDPOINT (``tcp://<worker0's address>:<free port>``)
    for the control plane that rank 0 hosts.
    """
    if not command:
        raise ConfigError("command must not be empty, e.g. ['python', 'train.py']")
    if timeout is not None and not timeout > 0:
        raise ConfigError(f"timeout must be > 0 seconds, got {timeout=}")
    if testbed is not None and hosts:
        raise ConfigError("give testbed or hosts, not both")
    if testbed is not None and testbed.closed:
        raise ConfigError(f"testbed {testbed.name} is closed; launch inside its `with` block")
    if hosts is not None and not hosts:
        raise ConfigError("hosts must name at least one host")
    if framework == "tensorflow":
        if servers not in (0, 1):
            raise ConfigError(f"servers apply to mxnet only (tensorflow uses all-reduce), got "
                              f"{servers=}")
        servers = 0
    cwd = cwd or os.getcwd()
    if testbed is not None:
        addresses = [h.address for h in testbed.hosts]
    elif hosts:
        addresses = list(hosts)
    else:
        addresses = [LOOPBACK]
    job_env = _job_env(env)
    names_count = workers + (1 + servers if framework == "mxnet" else 0)
    reservation = reserve_ports(names_count + 1)
    try:
        *ports, control_port = reservation.ports
        specs = plan(framework=framework, workers=workers, servers=servers,
                     addresses=addresses, ports=ports, placement=placement)
        if COORDINATOR_ENV not in job_env:
            rank0 = next(s for s in specs if s.name == "worker0")
            job_env[CONTROL_ENDPOINT_ENV] = f"tcp://{rank0.address}:{control_port}"
        jobs = [_job(spec, command, job_env, testbed, ssh if hosts else None, cwd)
                for spec in specs]
        for spec in specs:
            log.info("launch: %s on %s:%d", spec.name, spec.address, spec.port)
        if (testbed is None and not hosts) or (testbed is not None and not testbed.shaped):
            reservation.release()  # on loopback the job itself binds them
        return run_job(jobs, cwd=cwd, timeout=timeout, stream=stream, grace=grace,
                       linger=linger)
    finally:
        reservation.release()


def _job_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The caller's ``env`` plus this job's control-plane secret.

    The secret is the caller's, else this shell's AUTOBYTE_SECRET, else a fresh one per job, so
    concurrent jobs never accept each other's messages.
    """
    job_env = dict(env or {})
    for name in (SECRET_ENV, COORDINATOR_ENV):
        if not job_env.get(name) and os.environ.get(name):
            job_env[name] = os.environ[name]
    ensure_secret(job_env)
    return job_env


def _job(spec: ProcessSpec, command: Sequence[str], env: Mapping[str, str],
         testbed: Testbed | None, ssh: Sequence[str] | None, cwd: str) -> Job:
    extra = {**env, **spec.env}
    primary = spec.role == "worker"
    if ssh is not None:
        secret = extra.pop(SECRET_ENV)  # over stdin: a command line is visible in `ps`
        return Job(spec.name, remote_argv(ssh, spec.address, command, extra, cwd,
                                          stdin_vars=(SECRET_ENV,)),
                   {**os.environ}, primary, stdin_text=f"{secret}\n")
    argv = list(command) if testbed is None else testbed.wrap(spec.host, command)
    return Job(spec.name, argv, {**os.environ, **extra}, primary)

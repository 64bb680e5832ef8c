"""The control plane: workers report statistics, a coordinator decides, the adapters apply.

For adapter authors, the whole API on each worker::

    from common.control import TuningAgent
    agent = TuningAgent(rank=rank, num_workers=n, config=config, model="resnet50",
                        arch="ps")                          # or "allreduce"
    agent.set_layer_bytes(grad_bytes_in_forward_order)      # once
    # every step, after it finished (microseconds; layer times only on sampled steps):
    agent.record_step(step, samples, step_time_s, layer_backward_s=times_or_None,
                      bytes_up=sent, bytes_down=received)
    decision = agent.poll()                # Decision(id, step, config) or None; never blocks
    # (or, where the adapter agrees at its own boundaries: config = agent.due(step), rank 0
    # broadcasts it)
    # ... agree on (decision.id, decision.step, decision.config) through the adapter's own
    # channel, switch at decision.step on every worker, then:
    agent.set_config(decision.config, step=decision.step)   # or agent.applied(decision)
    agent.close()                          # optional: also runs at exit; idempotent

Where the coordinator is: ``endpoint=`` if given, else ``AUTOBYTE_COORDINATOR`` (a standalone
``autobyte coordinator --bind ...``; nobody hosts), else ``AUTOBYTE_CONTROL_ENDPOINT`` (set by
``autobyte launch`` to ``tcp://<worker0's address>:<port>``): rank 0 hosts the coordinator
there, in a child process at a lower CPU priority, and the others connect. A single worker
needs none of these.

Messages are JSON with a schema version, HMAC-SHA256-signed with
``AUTOBYTE_SECRET`` (``ensure_secret()`` makes one per job for launchers); forged, replayed,
stale and malformed messages are dropped and logged. Decisions name a step at least
``lead_steps`` plus ``lead_s`` (at the measured step time) after the window they were decided on,
on a window boundary; each worker's hello says what its adapter needs (TensorFlow sends a
decision half a window before the boundary it applies at, MXNet's statistics lag the steps
Python runs), and a decision heard late applies a boundary later, which the loop waits for.
If the coordinator goes away, ``poll`` keeps returning None, training keeps the configuration
in force, and the agent says so once. Nothing here blocks the training thread or keeps the
process alive at exit.
"""

from common.control._agent import (
    CONTROL_ENDPOINT_ENV,
    COORDINATOR_ENV,
    Tuned,
    TuningAgent,
    adapter_options,
)
from common.control._coordinator import Coordinator
from common.control._decision import Decision
from common.control._loop import TunerLike, TuningLoop
from common.control._tuners import make_tuner
from common.control._wire import (
    SECRET_ENV,
    WIRE_VERSION,
    Message,
    Signer,
    Verifier,
    ensure_secret,
    secret_from_env,
)

__all__ = [
    "CONTROL_ENDPOINT_ENV",
    "COORDINATOR_ENV",
    "SECRET_ENV",
    "WIRE_VERSION",
    "Coordinator",
    "Decision",
    "Message",
    "Signer",
    "Tuned",
    "TunerLike",
    "TuningAgent",
    "TuningLoop",
    "Verifier",
    "adapter_options",
    "ensure_secret",
    "make_tuner",
    "secret_from_env",
]

"""AutoByte for MXNet Gluon: the parameter-server kvstore registered as 'autobyte'.

    import autobyte_mx                      # registers kvstore 'autobyte'
    trainer = gluon.Trainer(net.collect_params(), "sgd", {...}, kvstore="autobyte")

Set MXNET_EXEC_BULK_EXEC_TRAIN=0 and hybridize with static_alloc=True, static_shape=True so
gradients become ready per layer (AutoByte warns otherwise). Knobs: ``common.config.Config``
fields as keyword arguments of ``AutoByte(...)`` or AUTOBYTE_* variables.

Tuning is live by default: every worker reports its steps to a tuning coordinator (rank 0
hosts it when the job is started with ``autobyte launch``; or run ``autobyte coordinator`` and
set AUTOBYTE_COORDINATOR), which runs the tuner (AUTOBYTE_TUNER, default ``meta``) and switches
partition and credit sizes on every worker at the same step, without a restart. Turn it off
with ``tuner='none'`` or AUTOBYTE_TUNER=none; without a coordinator address or AUTOBYTE_SECRET
it turns itself off with a warning and training goes on. ``AutoByte(model_name="resnet50", ...)``
names the model for the tuner, ``tuning={...}`` passes ``common.control.TuningAgent`` options.
"""

from __future__ import annotations

from autobyte_mx._compat import INSTALL_HINT, import_mxnet

_mx = import_mxnet()

from autobyte_mx._checks import OverlapWarning, install_hybridize_check  # noqa: E402
from autobyte_mx._patches import install as _install_trainer  # noqa: E402
from autobyte_mx._stats import ChunkTiming, StepStats  # noqa: E402
from autobyte_mx.kvstore import AutoByte  # noqa: E402
from common.stats import TrainingStats  # noqa: E402

_install_trainer(_mx.gluon.trainer, AutoByte)
install_hybridize_check(_mx.gluon.HybridBlock)

__all__ = ["INSTALL_HINT", "AutoByte", "ChunkTiming", "OverlapWarning", "StepStats",
           "TrainingStats"]

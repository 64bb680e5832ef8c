"""The AutoByte meta-network: predicts training speed for every candidate (partition, credit)
from a job's runtime statistics, so one batched inference replaces a search (DESIGN.md §3).

    from common.meta import MetaInput, MetaModel
    model = MetaModel.load()                       # the pretrained model shipped here
    speeds = model.predict(job, partitions, credits)

Only this package of ``common`` uses Keras, and only to train or save a model: loading a
model file and scoring run in NumPy, so a job's tuner imports it only to keep its adapted
model when the job ends. Importing this package registers the ``meta`` tuner with
``common.tuners`` (falling back to Bayesian optimisation when no model can be loaded).
"""

from common.meta._dataset import (
    DATASET_VERSION,
    HOLDOUT_BANDWIDTH_BPS,
    HOLDOUT_MODELS,
    Dataset,
    generate,
)
from common.meta._features import (
    FEATURE_VERSION,
    SEQ_LEN,
    EncodedJob,
    JobTracker,
    MetaInput,
    Sample,
    encode_candidates,
    encode_job,
    speed_from_target,
    target_from_speed,
)
from common.meta._model import FORMAT_VERSION, PRETRAINED, MetaModel, build_network
from common.meta._train import (
    Adaptation,
    EvalReport,
    HeldOut,
    adapt,
    evaluate,
    evaluate_online,
    fine_tune,
    leave_models_out,
    train,
)
from common.meta._tuner import MetaTuner, Predictor, create_meta_tuner
from common.tuners import register as _register

__all__ = [
    "DATASET_VERSION",
    "FEATURE_VERSION",
    "FORMAT_VERSION",
    "HOLDOUT_BANDWIDTH_BPS",
    "HOLDOUT_MODELS",
    "PRETRAINED",
    "SEQ_LEN",
    "Adaptation",
    "Dataset",
    "EncodedJob",
    "EvalReport",
    "HeldOut",
    "JobTracker",
    "MetaInput",
    "MetaModel",
    "MetaTuner",
    "Predictor",
    "Sample",
    "adapt",
    "build_network",
    "create_meta_tuner",
    "encode_candidates",
    "encode_job",
    "evaluate",
    "evaluate_online",
    "fine_tune",
    "generate",
    "leave_models_out",
    "speed_from_target",
    "target_from_speed",
    "train",
]

_register("meta", create_meta_tuner)

"""Test fakes shipped with the package, so the core's tests (and users' tests of code built on
AutoByte) run in milliseconds without TensorFlow, MXNet or a network. ``common.testing.meta``
holds a fixed predictor for the meta tuner (it imports ``common.meta``), ``common.testing.mx``
fakes of MXNet's native store (made with the MXNet adapter)."""

from common.testing.agent import RecordingAgent
from common.testing.agreement import peers_agree
from common.testing.fake_transport import FakeTransport
from common.testing.tuners import PredictingTuner, ScriptedTuner

__all__ = ["FakeTransport", "PredictingTuner", "RecordingAgent", "ScriptedTuner", "peers_agree"]

"""Test fakes shipped with the package, so the core's tests (and users' tests of code built on
AutoByte) run in milliseconds without TensorFlow, MXNet or a network. ``common.testing.meta``
holds a fixed predictor for the meta tuner (it imports ``common.meta``)."""

from common.testing.agreement import peers_agree
from common.testing.fake_transport import FakeTransport
from common.testing.tuners import PredictingTuner, ScriptedTuner

__all__ = ["FakeTransport", "PredictingTuner", "ScriptedTuner", "peers_agree"]

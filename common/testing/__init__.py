"""Test fakes shipped with the package, so the core's tests (and users' tests of code built on
AutoByte) run in milliseconds without TensorFlow, MXNet or a network."""

from common.testing.agreement import peers_agree
from common.testing.fake_transport import FakeTransport

__all__ = ["FakeTransport", "peers_agree"]

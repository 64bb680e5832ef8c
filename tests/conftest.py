"""Session-wide test setup."""

from __future__ import annotations

import signal

# A test run started in the background by a shell without job control (`cmd &` in a script,
# nohup) inherits SIGINT ignored, and an ignored signal stays ignored across exec: the
# children of the Ctrl-C tests would never see their SIGINT. A handler, unlike SIG_IGN, is
# reset to the default in every child, so install Python's own.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

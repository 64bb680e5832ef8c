"""The emulated cluster: hosts in network namespaces on one shaped switch (root), or loopback.

    with Testbed(hosts=3, rate="1gbit") as tb:
        subprocess.run(tb.wrap(tb.hosts[1], ["python", "train.py"]))
        tb.set_rate("100mbit", host=1)
"""

from common.testbed._measure import Flow, measure_flow, measure_message
from common.testbed._registry import destroy, records, sweep
from common.testbed._schedule import RateStep, ScheduleRunner, parse_schedule
from common.testbed._testbed import MAX_HOSTS, Host, Testbed
from common.testbed._values import DEFAULT_BASE, parse_seconds

__all__ = [
    "DEFAULT_BASE",
    "MAX_HOSTS",
    "Flow",
    "Host",
    "RateStep",
    "ScheduleRunner",
    "Testbed",
    "destroy",
    "measure_flow",
    "measure_message",
    "parse_schedule",
    "parse_seconds",
    "records",
    "sweep",
]

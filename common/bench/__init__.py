"""Real jobs on the testbed, side by side: the paper's evaluation (``autobyte bench``,
``_experiments``), and the meta-network's real training data (``autobyte meta collect``,
``_collect``).
"""

from common.bench._jobs import JobRun, JobSpec, Window, knobs_label, run_jobs

__all__ = ["JobRun", "JobSpec", "Window", "knobs_label", "run_jobs"]

"""The paper's evaluation on the testbed (issue 8): real jobs, side by side, CSV + PNG + table.

``autobyte bench <experiment> [--quick]``; see ``common.bench._experiments`` for what each
experiment runs and measures.
"""

from common.bench._jobs import JobRun, JobSpec, Window, knobs_label, run_jobs

__all__ = ["JobRun", "JobSpec", "Window", "knobs_label", "run_jobs"]

"""The benchmark report: run the maintained benchmarks and write docs/benchmarks.md with its figures.

    python -m benchmarks.report --quick              # <= 15 minutes on 2 cores: fewer tasks, rounds, requests
    python -m benchmarks.report                      # the full run (an hour or more)
    python -m benchmarks.report --quick --render-only   # the page again from the last run's outputs

Each benchmark runs as a subprocess (the allocator settings of docs/decisions.md #3 set before it
starts; the CLI times one thread) and writes JSON to the work folder (``runs/benchmarks/<mode>/``,
not committed): plan quality (``autoshard evaluate SUITE --measure``), planning time
(``benchmarks/planning_speed.py``), the judges side by side (``benchmarks/sharding_4d.py`` on a
small task: cost_greedy's and TorchRec's plans under our model and TorchRec's estimator at the
declared and at the measured links), the cost model's accuracy (``autoshard cost eval``), the
service's latency and throughput (``benchmarks/load_test.py``), re-planning
(``benchmarks/replan_measured.py``) and one plan's per-device cost (``autoshard plan``). Then the
page is rendered from those files alone, with the machine, the versions, the command and the
date: every number on it comes from the run. Where a goal is missed the page says so beside the
figure. A stage that fails leaves its section saying so, and the command exits 1.
"""

# One module a job: ``settings`` (the modes and goals), ``running`` (a stage's subprocess and its
# record), ``machine`` (the header's machine and versions), ``page`` (lines, goals, verdicts),
# one module a section (``plan_quality``, ``judges``, ``planning_time``, ``cost_accuracy``, ``service``,
# ``replan``, ``plan_devices``: each its stage, its reading of the outputs, its figure and its
# text), ``render`` (the page in order) and ``cli`` (the flags; ``__main__`` runs it).

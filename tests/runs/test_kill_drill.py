"""The kill drill (`make drill`, tests/kill_drill.py) in small: three moments drawn over a smoke run, each
killed and resumed to the uninterrupted run's exact weights and validations, and the runs killed in stage 3 and
changed before the resume (swapped finals, a hard link out), each refused by name, then put right and resumed to
the same results. `make drill` draws 20 and more."""

from __future__ import annotations

import pytest

from tests.kill_drill import TAMPERING, drill

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run


@pytest.mark.slow
def test_kills_drawn_over_a_run_each_resume_to_the_uninterrupted_runs_results(tmp_path, cache_dir):
    summary = drill(tmp_path / "drill", kills=2, seed=3, startup_kills=1, cache_dir=cache_dir)
    assert summary["identical"] == summary["kills"] == 3 + len(TAMPERING), summary["results"]

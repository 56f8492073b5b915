"""The run lock: one process per run directory, even when two start in the same instant."""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
import time

import pytest

from core.rundir.files import RunLock, RunLockedError
from tests.conftest import ROOT

TRIALS = 200


def _race(run_dirs: list[str], barrier, results) -> None:
    """One racer: for each directory, start together with the other racer, try the lock, report."""
    for run_dir in run_dirs:
        barrier.wait()  # both processes reach the lock at the same moment
        lock = RunLock(run_dir)
        try:
            lock.__enter__()
            won = True
        except RunLockedError:
            won = False
        barrier.wait()  # the winner holds the lock until the other has tried
        if won:
            lock.__exit__(None, None, None)
        results.put((run_dir, won))


def test_two_processes_racing_for_a_fresh_run_directory_never_both_win(tmp_path):
    context = multiprocessing.get_context("spawn")
    run_dirs = [str(tmp_path / f"run{i}") for i in range(TRIALS)]
    barrier, results = context.Barrier(2), context.Queue()
    racers = [context.Process(target=_race, args=(run_dirs, barrier, results)) for _ in range(2)]
    for racer in racers:
        racer.start()
    outcomes = [results.get(timeout=120) for _ in range(2 * TRIALS)]
    for racer in racers:
        racer.join(timeout=60)
    winners = dict.fromkeys(run_dirs, 0)
    for run_dir, won in outcomes:
        winners[run_dir] += won
    assert set(winners.values()) == {1}, "exactly one of the two racers wins every directory"


HOLD_LOCK = """
import sys, time
from core.rundir.files import RunLock
with RunLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def hold_lock(run_dir) -> subprocess.Popen:
    """A real process holding the run lock of `run_dir` (until it is killed)."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(run_dir)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_live_holder_refuses_others_and_its_death_releases_the_lock(tmp_path):
    holder = hold_lock(tmp_path)
    try:
        with pytest.raises(RunLockedError, match=rf"already running \(pid {holder.pid} holds .*run.lock\)"), \
                RunLock(tmp_path):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)  # no cleanup runs: the kernel alone releases the lock
        holder.wait()
    started = time.monotonic()
    with RunLock(tmp_path):
        assert time.monotonic() - started < 1, "taken at once, no stale lock to wait out"

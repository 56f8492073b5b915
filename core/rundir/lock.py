"""The run lock: one writing process per run directory."""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock, Timeout

from core.rundir.confine import check_links, refuse_link, write_text_regular

# The lock and its holder's pid: bookkeeping of who writes, not of what the run holds (taking the lock truncates
# LOCK_FILE, so its mtime says when a process last tried the run, not when the run changed).
LOCK_FILE, OWNER_FILE = "run.lock", "run.owner"

# One process per run directory: a kernel lock (flock) on `run.lock`, held for the life of the run.
# Two writers would interleave metrics and fight over checkpoints. The kernel grants the lock to one
# process only, even when two start in the same instant, and releases it when its holder exits or is
# killed, so a crashed run never leaves a lock to clean up by hand. `run.owner` names the holder's pid
# for the refusal message only; the lock itself is the kernel's.


class RunLockedError(RuntimeError):
    """Another live process is running in this run directory."""


class RunLock:
    """Context manager: hold `<run_dir>/run.lock` for the life of the run; refuse at once if it is held.

    Held again by the process that holds it (the app takes it before Hydra writes into the directory,
    the run takes it once more); the holder checks the directory has no link out of it (`check_links`).
    """

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self.owner = Path(run_dir) / OWNER_FILE
        self._lock = FileLock(self.path, timeout=0, is_singleton=True)

    def __enter__(self) -> RunLock:
        return self.hold()

    def hold(self) -> RunLock:
        """Take the lock (see the class); a context manager's `__enter__`, or for the life of the process."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        refuse_link(self.path)  # the lock file is opened (and truncated) by filelock, which follows links
        try:
            self._lock.acquire()
        except Timeout:
            raise RunLockedError(f"{self.path.parent}: already running ({self._holder()} holds {self.path}); "
                                 "wait for it to finish, or stop it, before resuming") from None
        try:
            check_links(self.path.parent)
            write_text_regular(self.owner, str(os.getpid()))
        except BaseException:
            self._lock.release()
            raise
        return self

    def _holder(self) -> str:
        try:
            return f"pid {int(self.owner.read_text())}"
        except (OSError, ValueError):  # the holder has not written its pid yet
            return "another process"

    def __exit__(self, *exc) -> None:
        if self._lock.lock_counter == 1:  # the process lets go of the directory (not a nested hold)
            self.owner.unlink(missing_ok=True)
        self._lock.release()

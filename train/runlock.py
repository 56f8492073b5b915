"""One process per run directory: `run.lock` holds the owner's pid.

A lock whose pid is alive refuses a second run (two writers would interleave metrics and fight
over checkpoints); a lock left by a dead process (a kill, a crash) is taken over.
"""

from __future__ import annotations

import os
from pathlib import Path


class RunLockedError(RuntimeError):
    """Another live process is running in this run directory."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class RunLock:
    """Context manager: hold `<run_dir>/run.lock` for the life of the run."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / "run.lock"

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                self._take_over_if_stale()
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(str(os.getpid()))
            return self

    def _take_over_if_stale(self) -> None:
        try:
            owner = int(self.path.read_text().strip() or 0)
        except (OSError, ValueError):
            owner = 0
        if owner and owner != os.getpid() and _alive(owner):
            raise RunLockedError(f"{self.path.parent}: already running (pid {owner} holds {self.path})")
        self.path.unlink(missing_ok=True)  # stale: its process is gone

    def __exit__(self, *exc) -> None:
        self.path.unlink(missing_ok=True)

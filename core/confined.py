"""A run directory's files stay inside it: the run writes and truncates only regular files there.

A run folder may be someone else's (sent, shared, crafted): `metrics.jsonl` replaced by a link to a file
elsewhere would be truncated and appended to by a resume that followed it. So whoever takes a run's lock
first refuses a directory holding a symbolic link that leads out of it (`check_links`), and the run's
writers (`core/rundir.py`) open their files without following a link (`open_regular`).
"""

from __future__ import annotations

import os
from pathlib import Path


class OutsideRunError(RuntimeError):
    """A write or a path that would leave the run directory (a symbolic link, a path in run.json)."""


def refuse_link(path: Path) -> None:
    """An error naming `path` if it is a symbolic link: a run folder may be someone else's, and
    `metrics.jsonl` replaced by a link to a file outside would otherwise be truncated and appended to."""
    if Path(path).is_symlink():
        raise OutsideRunError(f"{path}: a symbolic link (to {os.readlink(path)}); the run writes only regular "
                              "files inside its directory: replace the link with the file")


def open_regular(path: Path, flags: int, mode: int = 0o644) -> int:
    """`os.open` that never follows a symbolic link at `path` (O_NOFOLLOW): one there is `refuse_link`'s error."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError:
        refuse_link(path)
        raise


def write_text_regular(path: Path, text: str) -> None:
    """`path.write_text(text)`, refusing a symbolic link at `path` (`open_regular`)."""
    with os.fdopen(open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as fh:
        fh.write(text)


def inside_run(run_dir: Path, path: Path | str) -> bool:
    """Whether `path` (relative to `run_dir`, or absolute), links resolved, lies inside `run_dir`.

    >>> run = Path("/o/run")
    >>> inside_run(run, "stages/1-a/final"), inside_run(run, "../x"), inside_run(run, "/etc")
    (True, False, False)
    """
    root = Path(run_dir).resolve()
    return (root / path).resolve().is_relative_to(root)


TRACKER_DIR = "wandb"  # wandb.init(dir=<run>) keeps its files here


def check_links(run_dir: Path) -> None:
    """Refuse a run directory holding a symbolic link that leads out of it (the run would write through it).

    Links inside that stay inside are left alone, and so is `wandb/`: the wandb library's own folder, where
    it links its debug logs to its cache (`logs/debug-core.log`) and the run writes nothing itself. The
    run's own files are opened without following any link (`open_regular`).
    """
    run_dir = Path(run_dir)
    for folder, dirs, files in os.walk(run_dir):
        if Path(folder) == run_dir:
            dirs[:] = [d for d in dirs if d != TRACKER_DIR]
        for name in (*dirs, *files):
            path = Path(folder) / name
            if path.is_symlink() and not inside_run(run_dir, path):
                raise OutsideRunError(f"{path}: a symbolic link out of the run directory (to {os.readlink(path)}); "
                                      "the run writes only inside its directory: replace the link with what it "
                                      "points to, or remove it")

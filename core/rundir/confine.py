"""A run directory's files stay inside it: the run writes and truncates only regular files it created there,
and a report reads a run folder without following a link out of it.

A run folder may be someone else's (sent, shared, crafted): `metrics.jsonl` replaced by a link to a file
elsewhere would be truncated and appended to by a resume that followed it. A hard link is the same file
under two names, one of them possibly outside the run, so writing it writes the outside file; a symbolic
link to a folder (`wandb/`, `samples/`, `stages/`) sends every file written under it elsewhere. So whoever
takes a run's lock first refuses a directory holding a symbolic link that leads out of it or a file with
more than one name (`check_links`), and the run's writers open their files without following a link,
refusing one with another name (`open_regular`). A report reads a received run folder through
`read_inside`: a file reached through a link out of the folder is not read. JSON the run rewrites whole
(run.json) is written atomically here too (`write_json_atomic`), through the same confined open.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from core.rundir.layout import TRACKER_DIR


class OutsideRunError(RuntimeError):
    """A write or a path that would leave the run directory (a symbolic or hard link, a path in run.json)."""


def refuse_link(path: Path) -> None:
    """An error naming `path` if it is a symbolic link or a regular file with another name (a hard link): a run
    folder may be someone else's, and `metrics.jsonl` linked to a file outside would otherwise be truncated and
    appended to."""
    if Path(path).is_symlink():
        raise OutsideRunError(f"{path}: a symbolic link (to {os.readlink(path)}); the run writes only regular "
                              "files inside its directory: replace the link with the file")
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    _refuse_other_names(path, found)


def _refuse_other_names(path: Path, found: os.stat_result) -> None:
    if stat.S_ISREG(found.st_mode) and found.st_nlink > 1:
        raise OutsideRunError(f"{path}: a hard link ({found.st_nlink} names for one file, maybe one outside the run); "
                              f"the run writes only files it created: replace it with a copy of its own "
                              f"(cp {path} {path}.copy && mv {path}.copy {path})")


def open_regular(path: Path, flags: int, mode: int = 0o644) -> int:
    """`os.open` that never follows a symbolic link at `path` (O_NOFOLLOW) nor writes a file with another name:
    either is `refuse_link`'s error. O_TRUNC is applied only once the file is known to be the run's own."""
    try:
        fd = os.open(path, (flags & ~os.O_TRUNC) | os.O_NOFOLLOW, mode)
    except OSError:
        refuse_link(path)
        raise
    try:
        _refuse_other_names(path, os.fstat(fd))
        if flags & os.O_TRUNC:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_text_regular(path: Path, text: str) -> None:
    """`path.write_text(text)`, refusing a symbolic or hard link at `path` (`open_regular`)."""
    with os.fdopen(open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as fh:
        fh.write(text)


def write_json_atomic(path: Path, payload) -> None:
    """Write JSON so that readers (and a resumed run after a kill) never see a partial file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with os.fdopen(open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as fh:
        json.dump(payload, fh, indent=2, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def inside_run(run_dir: Path, path: Path | str) -> bool:
    """Whether `path` (relative to `run_dir`, or absolute), links resolved, lies inside `run_dir`.

    >>> run = Path("/o/run")
    >>> inside_run(run, "stages/1-a/final"), inside_run(run, "../x"), inside_run(run, "/etc")
    (True, False, False)
    """
    root = Path(run_dir).resolve()
    return (root / path).resolve().is_relative_to(root)


def read_inside(folder: Path, path: Path) -> bytes | None:
    """The bytes of the regular file `path` inside `folder`, reached without leaving it; None when it is missing,
    not a file, or reached through a link that leads out of `folder` (a received run's `config.yaml` linked to
    a file elsewhere is not read)."""
    if not inside_run(folder, path):
        return None
    try:
        fd = os.open(Path(path).resolve(), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read()



def check_links(run_dir: Path) -> None:
    """Refuse a run directory holding a symbolic link that leads out of it, or a file with another name (a hard
    link): the run would write through either.

    Symbolic links that stay inside are left alone, and so are those inside `wandb/`: the wandb library links its
    debug logs to its cache (`logs/debug-core.log`), and the run writes nothing there itself. `wandb/` itself
    a link out is refused: wandb would write every file of the run's tracking through it. The run's own files
    are opened without following any link (`open_regular`).
    """
    run_dir = Path(run_dir)
    tracker = run_dir / TRACKER_DIR
    for folder, dirs, files in os.walk(run_dir):  # never into a linked folder: each link is checked as an entry
        wandbs = Path(folder) == tracker or tracker in Path(folder).parents
        for path in (Path(folder) / name for name in (*dirs, *files)):
            if path.is_symlink() and not wandbs and not inside_run(run_dir, path):
                raise OutsideRunError(f"{path}: a symbolic link out of the run directory (to {os.readlink(path)}); "
                                      "the run writes only inside its directory: replace the link with what it "
                                      "points to, or remove it")
            _refuse_other_names(path, os.lstat(path))

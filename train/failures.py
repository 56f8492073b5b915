"""How `python -m train` ends when it does not finish: the one line it ends with, and what a failed run records
(error.txt, run.json's stage error): the failure that started it, never one that only followed from it. With many
processes a rank that lost a peer records a follow-on naming the ranks gone, which any rank's own error replaces;
error.txt is created exclusively, so the first record stays.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import traceback
from collections.abc import Sequence
from pathlib import Path

import psutil

from conf.errors import config_error_line
from core.distributed import Processes
from core.model_cache import ModelUnavailableError
from core.rundir.files import RUN_JSON, open_regular, read_mapping, write_text_regular
from core.rundir.records import stage_records

FOLLOW_ON = "follow-on:"
# How gloo and NCCL report a peer whose process ended (read only with many processes)
PEER_LOST = ("Connection closed by peer", "Connection reset by peer",
             "remote process exited or there was a network error", "NCCL communicator was aborted")


def lost_peer(err: BaseException) -> bool:
    """Whether `err` (or what it was raised from) is a collective that lost a peer process.

    >>> lost_peer(RuntimeError("[gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:3947"))
    True
    >>> lost_peer(ValueError("a reward raised"))
    False
    """
    seen: BaseException | None = err
    while seen is not None:
        if any(phrase in str(seen) for phrase in PEER_LOST):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def gone_ranks(peers: Sequence[tuple[str, int]], host: str) -> list[int]:
    """The ranks (index in `peers`: each rank's host and pid) whose process on `host` has ended (or is a zombie)."""
    return [rank for rank, (where, pid) in enumerate(peers) if where == host and not _running(pid)]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def failure_line(err: BaseException, many: bool, gone: Sequence[int] = ()) -> str:
    """One line for `err`, or for one of `many` processes that lost a peer a follow-on naming the `gone` ranks.

    >>> failure_line(KeyError("x"), many=True)
    "KeyError: 'x'"
    >>> lost = RuntimeError("[pair.cc:534] Connection closed by peer [127.0.0.1]:3947")
    >>> print(failure_line(lost, many=True, gone=[1]))  # doctest: +NORMALIZE_WHITESPACE
    follow-on: lost rank 1 mid-collective (RuntimeError: [pair.cc:534] Connection closed by peer
    [127.0.0.1]:3947); the cause is rank 1's: its own record in error.txt, or the signal in the launcher's summary
    """
    if not (many and lost_peer(err)):
        return f"{type(err).__name__}: {err}"
    own = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"  # gloo's message runs on
    who = f"rank{'s' if len(gone) > 1 else ''} {', '.join(map(str, gone))}" if gone else "another rank"
    return (f"{FOLLOW_ON} lost {who} mid-collective ({own}); the cause is {who}'s: its own record in error.txt, "
            "or the signal in the launcher's summary")


def record_error(path: Path, err: BaseException, processes: Processes, peers: Sequence[tuple[str, int]] = ()) -> None:
    """Write a failure's traceback to error.txt, unless an earlier record holds it; with many processes headed by
    the rank (`peers`: each rank's host and pid). The failing rank writes it: the main one may not outlive it."""
    line = failure_line(err, processes.many, gone_ranks(peers, os.uname().nodename) if processes.many else ())
    head = f"{processes.label()}: {line}\n\n" if processes.many else ""
    text = head + "".join(traceback.format_exception(err))
    if processes.many and not line.startswith(FOLLOW_ON):
        replace_follow_on(path, text)
    else:
        _create(path, text)


def record_refusal(path: Path, line: str) -> None:
    """A refused run's one line (`config error: ...`) in error.txt, unless a record is there."""
    _create(path, line + "\n")


def replace_follow_on(path: Path, text: str) -> bool:
    """Write `text` (a cause) to error.txt when it is absent or holds a follow-on; False when a cause is there."""
    if _create(path, text):
        return True
    with os.fdopen(open_regular(path, os.O_RDONLY), errors="replace") as fh:
        if not re.match(rf"rank \d+ of \d+: {FOLLOW_ON}", fh.readline()):
            return False
    write_text_regular(path, text)
    return True


def _create(path: Path, text: str) -> bool:
    try:
        with os.fdopen(open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w") as fh:
            fh.write(text)
    except FileExistsError:
        return False
    return True


def killed_line(who: str, signum: int) -> str:
    """error.txt's record of a process that a signal ended (`who`: "rank 1 of 2", or "the run's process").

    >>> killed_line("rank 1 of 2", 9)
    "rank 1 of 2: killed by SIGKILL (signal 9); a killed process records nothing itself (SIGKILL: the kernel's \
out-of-memory killer, or kill -9)\\n"
    """
    try:
        name = signal.Signals(signum).name
    except ValueError:  # a real-time signal has no name of its own
        name = f"signal {signum}"
    why = " (SIGKILL: the kernel's out-of-memory killer, or kill -9)" if signum == signal.SIGKILL else ""
    return f"{who}: killed by {name} (signal {signum}); a killed process records nothing itself{why}\n"





def refusal_line(err: BaseException) -> str | None:
    """The one line a run refused before it starts ends with (a config error, a model unavailable), else None.

    >>> refusal_line(ModelUnavailableError("model.id='x': the Hugging Face hub is unreachable"))
    "model unavailable: model.id='x': the Hugging Face hub is unreachable"
    >>> refusal_line(ValueError("a bug")) is None
    True
    """
    line = config_error_line(err)
    if line is not None:
        return f"config error: {line}"
    if isinstance(err, ModelUnavailableError):
        return f"model unavailable: {err}"
    return None


def interrupted_line(run_dir: Path, overrides: Sequence[str]) -> str:
    """The one line a Ctrl-C ends with: what is kept in `run_dir` and the command that resumes it.

    >>> interrupted_line(Path("/nonexistent/run"), ["+curriculum=kk_ladder"])
    'interrupted: nothing kept (the run had not started); /nonexistent/run'
    """
    stages = stage_records(read_mapping(run_dir / RUN_JSON)) if (run_dir / RUN_JSON).exists() else []
    if not stages:
        return f"interrupted: nothing kept (the run had not started); {run_dir}"
    done = [s for s in stages if s.done]
    finals = ", ".join(s.name for s in stages if s.checkpoint and (run_dir / s.checkpoint).is_dir()) or "none"
    args = [a for a in overrides if not a.startswith(("resume=", "hydra."))]
    resume = shlex.join(["python", "-m", "train", *args, f"resume={run_dir}"])
    return (f"interrupted: kept {run_dir} ({len(done)}/{len(stages)} stages done; finals: {finals}; "
            f"run.json, metrics and validation so far); go on with: {resume}")

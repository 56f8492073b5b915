"""`python -m train.launch.agent <error.txt> <processes> torchrun|accelerate <the launcher's arguments>`: torchrun
or accelerate launch run in this process, so that a rank killed by a signal (which records nothing itself) is named
in the run's error.txt in place of another rank's follow-on.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from train.failures import killed_line, replace_follow_on


def _torchrun(args: Sequence[str]) -> None:
    from torch.distributed.run import parse_args, run

    run(parse_args(list(args)))


def _accelerate(args: Sequence[str]) -> None:
    from accelerate.commands.launch import launch_command, launch_command_parser

    launch_command(launch_command_parser().parse_args(list(args)))


LAUNCHERS: dict[str, Callable[[Sequence[str]], None]] = {"torchrun": _torchrun, "accelerate": _accelerate}


def run_ranks(error_txt: Path, processes: int, launcher: str, args: Sequence[str]) -> int:
    """Run `launcher` with `args` here; 0, or 1 after recording a rank that a signal ended (0 < its signal)."""
    try:
        LAUNCHERS[launcher](args)
    except ChildFailedError as failed:
        print(failed.format_msg(), file=sys.stderr)  # the summary the launcher itself prints
        rank, first = failed.get_first_failure()  # the first the agent saw end: the others it stopped after it
        if first.exitcode < 0:
            replace_follow_on(error_txt, killed_line(f"rank {rank} of {processes}", -first.exitcode))
        return 1
    except subprocess.CalledProcessError as failed:  # accelerate launch of one process runs it as a child
        if failed.returncode < 0:
            replace_follow_on(error_txt, killed_line("the run's process", -failed.returncode))
        return 1
    return 0


if __name__ == "__main__":
    error_path, count, name, *rest = sys.argv[1:]
    raise SystemExit(run_ranks(Path(error_path), int(count), name, rest))

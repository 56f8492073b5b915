"""The command a run, or a sweep, names for its report.

`python -m eval.report <dir>` rather than `make report RUN=<dir>`: the report needs only the installed package,
and make's `report` target first checks (and for a user who installed with pip, runs) the whole `make install`.
"""

from __future__ import annotations

import shlex
from pathlib import Path


def report_command(folder: Path | str) -> str:
    """The shell command for `folder`'s report, quoted for a shell where it needs it.

    >>> report_command(Path("outputs/runs/x")), report_command("my runs/x")
    ('python -m eval.report outputs/runs/x', "python -m eval.report 'my runs/x'")
    """
    return f"python -m eval.report {shlex.quote(str(folder))}"

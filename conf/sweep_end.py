"""A multirun's last line: the command for the sweep's report (every job compared, `eval.report.sweep`).

Each job ends by naming its own report; without this, the last thing a sweep printed was its last job's command,
and the sweep folder's report was never named.
"""

from __future__ import annotations

from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepReportCommand(Callback):
    """Prints, once the sweep's jobs are done, where they are and the command for their report."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep = Path(config.hydra.sweep.dir)
        print(f"sweep done: {sweep}\nreport of every job compared: make report RUN={sweep}", flush=True)

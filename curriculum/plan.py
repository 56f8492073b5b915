"""The stage plan: a curriculum config turned into checked, plain `Stage` records.

Every check here runs before any model or data is loaded, and every error names the config key,
so a typo in a sweep costs a second, not a GPU hour.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf

from core.checks import ConfigError, is_number, plain, whole_number
from core.rundir import stage_dirname
from curriculum.adaptive import Guard, Promote, mixed_weights, parse_guard, parse_promote, replay_weights

# People per puzzle that the grammar and the published data cover.
KNOWN_PPL = range(2, 9)
# `eval.subsets_after_stage`: every subset after every stage, or the stage's own and the next stage's
VALIDATION_PLANS = ("all", "near")


@dataclass(frozen=True)
class Stage:
    """One stage of a curriculum, with every budget already resolved."""

    index: int  # 1-based position in the plan
    name: str
    kind: str  # grpo | sft
    ppl_weights: dict[int, float]  # ppl -> share of the pool (sums to 1)
    steps: int  # optimizer steps
    pool: int  # training puzzles
    overrides: dict = field(default_factory=dict)  # GRPO (or SFT) fields: the stage's own, then stage_overrides.<name>
    promote: Promote | None = None  # end early on held-out accuracy (steps stays the ceiling)
    replay: dict[int, float] = field(default_factory=dict)  # ppl of earlier stages -> share of the pool
    guard: Guard | None = None  # collapse guard (the stage's own, else curriculum.guard)

    @property
    def pool_weights(self) -> dict[int, float]:
        """ppl -> share of the training pool: the stage's own mix, with the replay shares made room for."""
        return mixed_weights(self.ppl_weights, self.replay)

    @property
    def dirname(self) -> str:
        """`<k>-<name>`: the stage's folder under `stages/` of a run directory."""
        return stage_dirname(self.index, self.name)

    @property
    def ppl_label(self) -> str:
        """'3' for a single ppl, '2-6' for a mix (for plots and tables)."""
        ppls = sorted(self.ppl_weights)
        return str(ppls[0]) if len(ppls) == 1 else f"{ppls[0]}-{ppls[-1]}"


def build_plan(cfg: DictConfig, world_size: int = 1) -> list[Stage]:
    """Check `cfg.curriculum` and return its stages, with `cfg.limits` applied; `world_size` processes
    train each step (a stage given in `epochs` takes fewer steps with more of them).

    A stage's keys and their types are the schema's (conf/schema.py StageConfig); what is checked here
    is what a type cannot say: ranges, rules across keys, names that must exist.

    >>> from conf.schema import StageConfig
    >>> stages = [OmegaConf.structured(StageConfig(name="a", ppl=2, steps=3, pool=9))]
    >>> cfg = OmegaConf.create({"curriculum": {"stages": stages}, "limits": {"max_steps": 2}, "grpo": {}})
    >>> build_plan(cfg)[0].steps
    2
    """
    if OmegaConf.select(cfg, "curriculum") is None:
        raise ConfigError("curriculum: missing; choose one with +curriculum=kk_ladder "
                          "(or kk_adaptive, kk_logicrl, kk_mixed, kk_r1)")
    stages_cfg = cfg.curriculum.stages
    if not stages_cfg:
        raise ConfigError("curriculum.stages: must be a non-empty list of stages")
    limits = cfg.get("limits") or {}
    _check_limits(limits)
    plan = [_build_stage(i, plain(s), cfg, limits, world_size) for i, s in enumerate(stages_cfg, start=1)]
    plan = [_with_replay(stage, stages_cfg[stage.index - 1], plan[: stage.index - 1]) for stage in plan]
    names = [s.name for s in plan]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"curriculum.stages: stage name {name!r} appears twice; names must be unique")
    for key, named in (("limits.stage_steps", limits.get("stage_steps")), ("stage_overrides", _named_overrides(cfg))):
        for name in named or {}:
            if name not in names:
                raise ConfigError(f"{key}.{name}: no stage of that name; stages: {', '.join(names)}")
    return plan


def _named_overrides(cfg: DictConfig) -> dict[str, dict]:
    """`stage_overrides`: {stage name: {GRPOConfig or SFTConfig field: value}}, applied over a stage's own.

    Keyed by name because a list index (`curriculum.stages.2.overrides...`) is awkward on a command line,
    and Hydra's grammar refuses a key that starts with a digit (`stage_overrides.2ppl.x=1`): give the
    mapping whole, `'stage_overrides={2ppl: {learning_rate: 1e-6}}'` (a sweep: several, comma-separated).
    """
    named = OmegaConf.select(cfg, "stage_overrides")
    if named is None:
        return {}
    if not isinstance(named, DictConfig):
        raise ConfigError(f"stage_overrides: must be a mapping of stage name -> fields (got {named!r})")
    out = {}
    for name, fields in named.items():
        if not isinstance(fields, DictConfig):
            raise ConfigError(f"stage_overrides.{name}: must be a mapping of trainer fields, e.g. "
                              f"{{learning_rate: 1.0e-6}} (got {fields!r})")
        out[str(name)] = OmegaConf.to_container(fields, resolve=True)
    return out


def _check_limits(limits: Mapping) -> None:
    """Each cap is null (the stage's own value) or a whole number > 0; 0 and -1 are not "no cap"."""
    for name in ("max_steps", "max_sft_steps", "max_pool"):
        if limits.get(name) is not None:
            whole_number(limits[name], f"limits.{name}")


def _build_stage(index: int, block: dict, cfg: DictConfig, limits: Mapping, world_size: int) -> Stage:
    key = f"curriculum.stages[{index - 1}]"
    name, kind = block["name"], block["kind"]
    if not name or "/" in name:
        raise ConfigError(f"{key}.name: must be a non-empty name without '/' (got {name!r})")
    ppl_weights = parse_ppl(block["ppl"], f"{key}.ppl")
    pool = whole_number(block["pool"], f"{key}.pool")
    overrides = {**(block["overrides"] or {}), **_named_overrides(cfg).get(name, {})}  # by stage name, win
    steps = _stage_steps(block, key, pool, cfg, overrides, world_size)
    if limits.get("max_pool"):
        pool = min(pool, int(limits["max_pool"]))
    cap = limits.get("max_sft_steps") if kind == "sft" else limits.get("max_steps")
    if cap:
        steps = min(steps, int(cap))
    named = (limits.get("stage_steps") or {}).get(name)
    if named is not None:  # a CPU twin giving one stage more (or fewer) steps than the caps
        steps = whole_number(named, f"limits.stage_steps.{name}")
    for own in ("promote", "guard"):
        if block[own] is not None and kind != "grpo":
            raise ConfigError(f"{key}.{own}: only a grpo stage has one (this stage is {kind})")
    promote = parse_promote(block["promote"], f"{key}.promote")
    guard = parse_guard(block["guard"], f"{key}.guard")
    if guard is None and kind == "grpo":  # the curriculum-wide guard watches every GRPO stage
        guard = parse_guard(OmegaConf.select(cfg, "curriculum.guard"), "curriculum.guard")
    return Stage(index, name, kind, ppl_weights, steps, pool, overrides, promote, guard=guard)


def _with_replay(stage: Stage, stage_cfg, earlier: list[Stage]) -> Stage:
    """Resolve `replay: share` over the ppl of the stages before this one."""
    share = stage_cfg.get("replay")
    if share is None:
        return stage
    key = f"curriculum.stages[{stage.index - 1}].replay"
    return dataclasses.replace(stage, replay=replay_weights(share, [p for s in earlier for p in s.ppl_weights], key))


def parse_ppl(value, key: str) -> dict[int, float]:
    """A stage's `ppl` as normalised weights: 3, [2, 3] (uniform) or {2: 1, 3: 3}.

    >>> parse_ppl({2: 1, 3: 3}, "ppl")
    {2: 0.25, 3: 0.75}
    """
    value = plain(value)
    if isinstance(value, Mapping):
        raw = {_ppl(k, key): w for k, w in value.items()}
    elif isinstance(value, Sequence) and not isinstance(value, str):
        raw = {_ppl(k, key): 1.0 for k in value}
    else:
        raw = {_ppl(value, key): 1.0}
    if not raw or not all(is_number(w, finite=True) and w >= 0 for w in raw.values()) or sum(raw.values()) <= 0:
        raise ConfigError(f"{key}: weights must be numbers >= 0 with a positive sum (got {value!r})")
    total = sum(raw.values())
    return {p: w / total for p, w in sorted(raw.items()) if w > 0}


def _ppl(value, key: str) -> int:
    try:
        ppl = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: {value!r} is not a number of people") from None
    if ppl not in KNOWN_PPL:
        raise ConfigError(f"{key}: unknown ppl {ppl}; puzzles exist for {KNOWN_PPL.start}..{KNOWN_PPL.stop - 1}")
    return ppl


def _stage_steps(block: dict, key: str, pool: int, cfg: DictConfig, overrides: Mapping, world_size: int) -> int:
    """Steps from `steps`, or from `epochs` over the pool at the stage's prompts per step."""
    if block["steps"] is not None:
        if block["epochs"] is not None:
            raise ConfigError(f"{key}: give steps or epochs, not both")
        return whole_number(block["steps"], f"{key}.steps")
    if block["epochs"] is None or block["epochs"] <= 0:
        raise ConfigError(f"{key}.steps: missing or <= 0 (give steps > 0, or epochs > 0)")
    return max(1, math.ceil(block["epochs"] * pool / prompts_per_step(cfg, overrides, world_size)))


def validation_subsets(mode: str, subsets: Sequence[int], plan: Sequence[Stage], index: int) -> list[int]:
    """The subsets validated after stage `index` (0: the baseline) under `eval.subsets_after_stage`.

    `all`: every subset, every time. `near`: every subset at the baseline and after the last stage;
    in between, the stage's own ppl and the next stage's, among `subsets` (a stage near none of
    them is validated on all, never on nothing).

    >>> ladder = [Stage(i, f"{p}ppl", "grpo", {p: 1.0}, steps=10, pool=9) for i, p in enumerate(range(2, 7), 1)]
    >>> [validation_subsets("near", range(2, 8), ladder, i) for i in range(6)]
    [[2, 3, 4, 5, 6, 7], [2, 3], [3, 4], [4, 5], [5, 6], [2, 3, 4, 5, 6, 7]]
    >>> validation_subsets("near", [2, 3], ladder, 3), validation_subsets("all", [3, 2], ladder, 2)
    ([2, 3], [2, 3])
    """
    if mode not in VALIDATION_PLANS:
        raise ConfigError(f"eval.subsets_after_stage: {mode!r} is not one of {VALIDATION_PLANS}")
    every = sorted(int(p) for p in subsets)
    if mode == "all" or index == 0 or index >= len(plan):
        return every
    near = {*plan[index - 1].ppl_weights, *plan[index].ppl_weights}
    return [p for p in every if p in near] or every


def validation_completions(mode: str, subsets: Sequence[int], plan: Sequence[Stage], n: int) -> int:
    """Greedy completions a whole run's validations generate: the baseline and every stage, `n` per subset.

    The README's arithmetic for kk_ladder (5 stages, 6 subsets of 100): `all` 3600, `near` 2000.

    >>> ladder = [Stage(i, f"{p}ppl", "grpo", {p: 1.0}, steps=10, pool=9) for i, p in enumerate(range(2, 7), 1)]
    >>> [validation_completions(mode, range(2, 8), ladder, 100) for mode in ("all", "near")]
    [3600, 2000]
    """
    return n * sum(len(validation_subsets(mode, subsets, plan, i)) for i in range(len(plan) + 1))


def prompts_per_step(cfg: DictConfig, overrides: Mapping | None = None, world_size: int = 1) -> float:
    """Distinct prompts one optimizer step consumes, from `cfg.grpo`, a stage's overrides and the processes.

    >>> cfg = OmegaConf.create({"grpo": {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 8,
    ...                                  "num_generations": 8}})
    >>> prompts_per_step(cfg), prompts_per_step(cfg, world_size=4)
    (8.0, 32.0)
    """
    grpo = {**OmegaConf.to_container(cfg.get("grpo") or OmegaConf.create({}), resolve=True), **(overrides or {})}
    return grpo_batch(grpo, "grpo", world_size).prompts_per_step


@dataclass(frozen=True)
class GrpoBatch:
    """TRL 1.16's batch arithmetic (GRPOConfig.__post_init__). The per-device batch counts completions.

    A generation batch of `generation_batch` completions (`prompts_per_generation` prompts x
    `num_generations`, over all `processes`) is generated once and used for `steps_per_generation x
    num_iterations` micro-batches per process; an optimizer step takes `gradient_accumulation_steps`
    micro-batches on every process. So one step consumes per-device batch x gradient accumulation x
    processes / num_generations prompts (with num_iterations 1 and steps_per_generation at its default).
    """

    generation_batch: int
    steps_per_generation: int
    num_iterations: int
    gradient_accumulation_steps: int
    num_generations: int
    processes: int = 1

    @property
    def prompts_per_generation(self) -> int:
        return self.generation_batch // self.num_generations

    @property
    def prompts_per_step(self) -> float:
        """New prompts per optimizer step: a generation's prompts over the steps that consume it."""
        micro_batches_per_generation = self.steps_per_generation * self.num_iterations
        return self.prompts_per_generation * self.gradient_accumulation_steps / micro_batches_per_generation

    @property
    def ratio_is_one(self) -> bool:
        """Each generation feeds exactly one optimizer step, once: the importance ratio is 1 and never clips."""
        return self.num_iterations == 1 and self.steps_per_generation == self.gradient_accumulation_steps


def grpo_batch(grpo: Mapping, key: str, world_size: int = 1) -> GrpoBatch:
    """The batch arithmetic of GRPOConfig fields on `world_size` processes; ConfigError (naming
    `key`.<field>) when TRL would refuse them.

    >>> b = grpo_batch({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 8,
    ...                 "num_generations": 8, "num_iterations": 2}, "grpo")
    >>> b.prompts_per_generation, b.prompts_per_step, b.ratio_is_one
    (8, 4.0, False)
    >>> grpo_batch({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2}, "grpo", 4).prompts_per_step
    8.0
    """
    def count(name: str, default: int | None, least: int = 1) -> int | None:  # null is TRL's default
        value = default if grpo.get(name) is None else grpo[name]
        return None if value is None else whole_number(value, f"{key}.{name}", least=least)

    micro, accumulation = count("per_device_train_batch_size", 8), count("gradient_accumulation_steps", 1)
    iterations = count("num_iterations", 1)
    generations = count("num_generations", 8, least=2)  # GRPO normalises within a group of >= 2
    explicit_batch, explicit_steps = count("generation_batch_size", None), count("steps_per_generation", None)
    if explicit_batch is not None and explicit_steps is not None:
        raise ConfigError(f"{key}.generation_batch_size: give it or steps_per_generation, not both (TRL)")
    per_round = micro * world_size  # one micro-batch on every process
    if explicit_batch is not None and explicit_batch % per_round:
        raise ConfigError(f"{key}.generation_batch_size: {explicit_batch} is not a multiple of "
                          f"per_device_train_batch_size {micro} x {world_size} process(es)")
    steps = explicit_steps or (explicit_batch // per_round if explicit_batch else accumulation)
    batch = per_round * steps
    if batch % generations:
        raise ConfigError(
            f"{key}.num_generations: {generations} does not divide the generation batch {batch} "
            f"(per_device_train_batch_size x {world_size} process(es) x steps_per_generation, which defaults to "
            "gradient_accumulation_steps)"
        )
    return GrpoBatch(batch, steps, iterations, accumulation, generations, world_size)

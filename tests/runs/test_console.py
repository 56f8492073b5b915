"""What `python -m train` prints, run as a user runs it: its size and folder first, a banner per stage, one
compact line per step (the full dict only in metrics.jsonl), its end with the report command; no library
noise (bitsandbytes on a CPU, wandb's offline URL warning); a config error leaves no folder; Ctrl-C ends
with one line saying what was kept."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import ROOT, run_cli

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run

SMOKE = ("+curriculum=kk_ladder", "experiment=smoke")
# the smoke stack's four components (format, answer, overlong, the probe low_tokens) fit no one-line form within 80
# columns: the step's line with its total, then a line of the components by their keys
STEP_LINE = re.compile(r"^  (\dppl) (\d)/2  reward -?\d\.\d{3}  len \d+  kl \S+  zero-std \d\.\d\d  ETA .+$")
COMPONENTS_LINE = re.compile(r"^    format -?\d\.\d\d  answer -?\d\.\d\d  overlong -?\d\.\d\d  low_tokens -?\d\.\d\d$")


@pytest.fixture(scope="module")
def smoke_console(tmp_path_factory, cache_dir):
    """One smoke ladder through the real CLI, logged to wandb offline: (run_dir, stdout + stderr)."""
    run_dir = tmp_path_factory.mktemp("console") / "run"
    done = run_cli("train", *SMOKE, "logger=wandb", f"paths.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}",
                   env={"WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}, merged=True)
    assert done.returncode == 0, done.stdout[-3000:]
    return run_dir, done.stdout


def test_the_console_says_the_size_and_folder_first_and_the_report_command_at_both_ends(smoke_console):
    run_dir, console = smoke_console
    size = console.index("size: 5 stages; training 10 GRPO steps, 40 completions of <= 16 tokens")
    start = console.index(f"run directory {run_dir}")
    first_step = console.index("stage 1/5 · 2ppl · 2 steps")
    assert size < start < first_step, "what it costs and where it writes, before any training"
    # the command a pip install runs too (make's report target first checks the whole install)
    assert console.count(f"python -m eval.report {run_dir}") == 2  # at the start and at the end
    assert console.rstrip().endswith(f"report: python -m eval.report {run_dir}")
    assert "run done objective mean_final_accuracy = " in console


def test_one_banner_per_stage_with_its_reward_and_a_compact_step_line_with_each_component(smoke_console):
    run_dir, console = smoke_console
    for index, name in enumerate(("2ppl", "3ppl", "4ppl", "5ppl", "6ppl"), start=1):
        assert f"stage {index}/5 · {name} · 2 steps" in console  # K&K's level label says itself: no "level"
    lines = console.splitlines()
    steps = [(STEP_LINE.match(line), lines[i + 1]) for i, line in enumerate(lines[:-1])]
    assert [(m[1], m[2]) for m, _ in steps if m] == [(f"{p}ppl", s) for p in range(2, 7) for s in "12"]
    assert all(COMPONENTS_LINE.match(below) for m, below in steps if m), "each component's mean, by its key"
    assert all(len(m[0]) <= 80 and len(below) <= 80 for m, below in steps if m), "within a terminal's 80 columns"
    # under each banner, the reward TRL sums from the run's stack (run.json's reward_stack), probe included
    assert console.count("  reward = 0.5 format + 2 answer + 0.5 overlong + 1 low_tokens\n") == 5
    # transformers' ~40-key dict per step (and its stage summary) stays out of the console, in metrics.jsonl only
    assert "'loss':" not in console and "train_runtime" not in console and "clip_ratio/low_mean" not in console
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum("clip_ratio/low_mean" in r for r in rows) == 10 and sum("train_runtime" in r for r in rows) == 5


def test_no_library_noise_on_a_cpu_start(smoke_console):
    _, console = smoke_console
    # bitsandbytes (imported by peft, imported by transformers.trainer) is left unloaded without CUDA
    assert "gemm_4bit_forward" not in console and "bitsandbytes" not in console
    # TRL's per-checkpoint model card read wandb.run.url, which warns in an offline run at every checkpoint
    assert "URL not available in offline run" not in console
    assert "Run history" not in console  # wandb's 30-line panel at the end


def test_a_config_error_refused_inside_the_run_leaves_no_folder(tmp_path, cache_dir):
    # a range error is ours to check (the schema only types keys), after Hydra has made the run folder
    run_dir = tmp_path / "run"
    refused = run_cli("train", *SMOKE, "grpo.learning_rate=-1", f"paths.cache_dir={cache_dir}",
                      f"hydra.run.dir={run_dir}")
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1].startswith("config error: grpo.learning_rate: must be > 0")
    assert "Traceback" not in refused.stderr
    assert not run_dir.exists(), sorted(p.name for p in run_dir.iterdir())


def test_a_config_error_on_resume_keeps_the_run_it_was_given(tmp_path, cache_dir, smoke_console):
    # the same refusal against a folder that holds a run: nothing written there is touched
    run_dir, _ = smoke_console
    before = sorted(p.name for p in run_dir.iterdir())
    refused = run_cli("train", *SMOKE, "logger=wandb", "grpo.learning_rate=-1", f"paths.cache_dir={cache_dir}",
                      f"resume={run_dir}")
    assert refused.returncode == 1 and "config error: grpo.learning_rate" in refused.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == before


def interrupt_when(args: list[str], ready: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python -m <args>`, send Ctrl-C (SIGINT) once `ready` appears in its output, wait for its end.

    The child gets SIGINT's default back first: a shell without job control starts a background job (`make test &`)
    with SIGINT ignored, every process under it inherits that, and Python then installs no Ctrl-C handler."""
    proc = subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen, deadline = [], time.monotonic() + 300
    for line in proc.stdout:
        seen.append(line)
        if ready in line:
            proc.send_signal(signal.SIGINT)
            break
        assert time.monotonic() < deadline, "".join(seen)[-2000:]
    rest, _ = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(args, proc.returncode, "".join(seen) + rest, "")


def test_ctrl_c_ends_a_run_with_one_line_naming_what_was_kept(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    done = interrupt_when(["train", *SMOKE, f"paths.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}"],
                          ready="stage 2/5 · 3ppl")
    assert done.returncode == 130
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(f"interrupted: kept {run_dir} (1/5 stages done; finals: 2ppl")
    assert last.endswith(f"python -m train +curriculum=kk_ladder experiment=smoke paths.cache_dir={cache_dir} "
                         f"resume={run_dir}")
    assert "Traceback" not in done.stdout and "KeyboardInterrupt" not in done.stdout
    assert (run_dir / "stages" / "1-2ppl" / "final" / "stage.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the warning is for a machine without CUDA")
def test_the_default_recipe_on_a_cpu_warns_with_its_size_and_an_unreachable_hub_is_one_line(tmp_path):
    # port 9 (discard) refuses at once: the hub is unreachable, and nothing is in this empty hub cache
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "0"}
    run_dir = tmp_path / "run"
    done = run_cli("train", "+curriculum=kk_ladder", "logger=none", f"hydra.run.dir={run_dir}", env=env, merged=True)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 1
    warning = next(line for line in lines if "no CUDA GPU: this recipe is GPU-sized" in line)
    # the default recipe: 250 GRPO steps x 64 completions x 4096 tokens, and its validation plan
    assert "model qwen2.5-0.5b-instruct, up to 73.7M generated tokens" in warning
    assert "experiment=cpu_demo" in warning and "experiment=smoke" in warning
    assert lines[-1].startswith("model unavailable: model.id='Qwen/Qwen2.5-0.5B-Instruct': the Hugging Face hub is "
                                "unreachable and the model is not in the local hub cache. Offline choices: ")
    assert "Traceback" not in done.stdout and "Retry" not in done.stdout  # no 5 retries with backoff
    assert not run_dir.exists()
    refused = run_cli("eval", "model=qwen2.5-0.5b-instruct", f"hydra.run.dir={tmp_path / 'eval'}", env=env)
    assert refused.stderr.strip().splitlines()[-1].startswith("model unavailable: model.id='Qwen/")
    assert "Traceback" not in refused.stderr


def test_wandb_gets_the_rollouts_and_the_graded_validation_samples_as_tables(smoke_console):
    run_dir, _ = smoke_console
    tables = run_dir / "wandb" / "latest-run" / "files" / "media" / "table"
    rollouts = sorted(tables.glob("rollouts/samples_*.table.json"))
    assert len(rollouts) == 10  # a table per sampled step: 5 stages x (first, last)
    table = json.loads(rollouts[0].read_text())
    # one column per reward component, as TRL's log_completions table, not one column of JSON
    components = {"format", "answer", "overlong", "low_tokens"}  # their keys, as TRL logs them
    assert {"prompt", "completion", "reward", "advantage", *components} <= set(table["columns"])
    assert "rewards" not in table["columns"]
    assert len(table["data"]) == 4  # one group of 4 completions
    validation = sorted(tables.glob("val/*ppl/samples_*.table.json"))
    assert {p.parent.name for p in validation} == {"2ppl", "3ppl"}
    table = json.loads(validation[0].read_text())
    assert {"id", "correct", "format_ok", "tokens", "reasoning_agrees", "question", "answer", "reference",
            "completion"} <= set(table["columns"])
    # GRPO's metrics under TRL's own keys (tests/runs/test_tracker.py holds them to TRL's), validation rates with their
    # interval bounds, a group
    record = next(run_dir.glob("wandb/offline-run-*/run-*.wandb")).read_bytes()
    assert b"train/reward" in record and b"train/grpo/" not in record
    assert b"val/2ppl/accuracy_low" in record and f"{run_dir.parent.name}/{run_dir.name}".encode() in record

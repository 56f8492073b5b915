"""Many processes on this CPU: `torchrun --nproc_per_node 2 -m train` (gloo, the tiny model) runs the plan of one
process, into one run directory that the main process alone writes.

torchrun starts the two processes here, which accelerate runs as MULTI_CPU on gloo (the trainer is on the CPU);
`accelerate launch` with a launch file starts its ranks through the same torchrun agent (only `--cpu` makes it one
process). Each test drives the real launcher and the real `python -m train`; the processes are found and
signalled through psutil, as an operator would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from transformers import AutoModelForCausalLM

from core.rundir.files import RunLock, read_jsonl
from core.weights import fingerprint
from tests.conftest import ROOT, run_cli

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
# The command. eval.batch_size=2 splits each subset's 4 puzzles into two batches, so that each
# rank generates one of them and the gathered rows are compared with one process's.
# the smoke ladder's first three stages: handoffs, a stage killed between two others, each further stage a repeat
SMOKE = ["+curriculum=kk_ladder", "model=tiny", "experiment=smoke", "eval.batch_size=2",
         "curriculum.stages=[{name: 2ppl, ppl: 2, steps: 10, pool: 299}, {name: 3ppl, ppl: 3, steps: 20, pool: 1000},"
         " {name: 4ppl, ppl: 4, steps: 10, pool: 1000}]"]
STAGES = ["1-2ppl", "2-3ppl", "3-4ppl"]
ONE_STAGE = "curriculum.stages=[{name: a, ppl: 2, steps: 2, pool: 8}]"
METRICS_OF_A_ROW = ("stage", "stage_name", "global_step", "cost")  # what differs between a run's row and eval's


def torchrun(*args: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*TORCHRUN, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def finals(run_dir: Path) -> list[str]:
    """The fingerprint of each stage's final, loaded from disk as the next stage loads it."""
    return [fingerprint(AutoModelForCausalLM.from_pretrained(run_dir / "stages" / s / "final")) for s in STAGES]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, cache_dir):
    """The smoke ladder under torchrun with 2 processes: (output dir, the finished process, its run dir)."""
    out = tmp_path_factory.mktemp("two-processes")
    done = torchrun("-m", "train", *SMOKE, f"paths.cache_dir={cache_dir}", f"paths.output_dir={out}")
    runs = sorted((out / "runs").iterdir()) if (out / "runs").is_dir() else []
    return out, done, runs


def test_two_processes_train_the_ladder_into_one_run_directory(two_processes):
    out, done, runs = two_processes
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(runs) == 1, f"one run directory for both ranks: {runs}"
    run_dir = runs[0]
    manifest = json.loads((run_dir / "run.json").read_text())
    assert (manifest["status"], manifest["world_size"]) == ("done", 2)
    assert [(s["status"], s["steps_done"]) for s in manifest["stages"]] == [("done", 2)] * len(STAGES)
    for stage in STAGES:  # one final per stage, nothing half-published, trainer checkpoints pruned once
        assert sorted(p.name for p in (run_dir / "stages" / stage).iterdir()) == ["final"]
    steps = [r["global_step"] for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "step"]
    assert steps == list(range(1, 7)), "every step logged once, by one writer, in order"
    validated = [(r["stage"], r["ppl"]) for r in read_jsonl(run_dir / "validation.jsonl")]
    assert len(validated) == len(set(validated)) and {k for k, _ in validated} == set(range(4)), "each row once"
    assert done.stdout.count("validation after baseline") == 1, "the main process alone prints the table"
    # each rank generates its own per-device batch of 4 every step: 2 x 4 x 6 steps, said before the run
    assert "size: 3 stages on 2 processes; training 6 GRPO steps, 48 completions" in done.stdout + done.stderr
    assert (run_dir / ".hydra" / "overrides.yaml").is_file(), "Hydra's record, from the main process"
    assert (run_dir / "__main__.log").read_text().count("torch CPU threads") == 1, "one job log: the main process's"


def test_both_ranks_end_every_stage_with_the_weights_the_final_holds(two_processes):
    _, done, (run_dir,) = two_processes
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    on_disk = finals(run_dir)
    for stage, saved in zip(stages, on_disk, strict=True):
        assert stage["final_fingerprints"] == [saved, saved], f"{stage['name']}: rank 0 and rank 1 agree with disk"
    assert [s["policy_fingerprint"] for s in stages[1:]] == on_disk[:-1], "each stage starts from the last final"
    assert len(set(on_disk)) == len(STAGES), "every stage moved the weights"


@pytest.mark.parametrize("stage", [0, 3])  # the baseline (the base model), and the last stage's final
def test_validation_rows_equal_one_process_eval_of_the_same_checkpoint(two_processes, tmp_path, cache_dir, stage):
    """Validation shared out over 2 ranks gives the rows and completions `python -m eval` gives in one process."""
    _, _, (run_dir,) = two_processes
    model = [] if stage == 0 else [f"model={run_dir / 'stages' / STAGES[-1] / 'final'}"]
    single = run_cli("eval", "experiment=smoke", "eval.batch_size=2", "cpu_threads=1", *model,
                     f"paths.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path}")
    assert single.returncode == 0, single.stderr[-3000:]
    sharded = [r for r in read_jsonl(run_dir / "validation.jsonl") if r["stage"] == stage]
    alone = read_jsonl(tmp_path / "validation.jsonl")
    drop = set(METRICS_OF_A_ROW)
    assert [{k: v for k, v in r.items() if k not in drop} for r in sharded] == \
           [{k: v for k, v in r.items() if k not in drop} for r in alone]
    samples = run_dir / "samples" / ("0-baseline" if stage == 0 else STAGES[-1])
    for ppl in (2, 3):
        texts = [s["completion"] for s in read_jsonl(samples / f"{ppl}ppl.jsonl")]
        assert texts == [s["completion"] for s in read_jsonl(tmp_path / "samples" / f"{ppl}ppl.jsonl")]


def _ranks(launcher: subprocess.Popen) -> dict[int, psutil.Process]:
    """The `python -m train` processes torchrun started, by their RANK."""
    found = {}
    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            rank = child.environ().get("RANK")
        except psutil.Error:
            continue
        if rank is not None:
            found[int(rank)] = child
    return found


def _wait_for(path: Path, launcher: subprocess.Popen, timeout: float = 300) -> None:
    began = time.monotonic()
    while not path.exists():
        assert launcher.poll() is None, f"the run ended ({launcher.returncode}) before {path} appeared"
        assert time.monotonic() - began < timeout, f"{path} did not appear"
        time.sleep(0.02)


def _job_errors(output_dir: Path) -> str:
    """Each failed job's error.txt, for an assertion's message: the launcher's stderr tail seldom holds it."""
    return "".join(f"{p}:\n{p.read_text()}\n" for p in sorted(output_dir.glob("multirun/*/*/error.txt")))


def test_a_sweep_under_two_processes_runs_each_job_once_in_one_sweep_folder(tmp_path, cache_dir):
    """`-m` under torchrun: both ranks name the sweep's folder by the main process's launch time, and run
    each job together into its own directory; the stage validates inside itself after step 1 (eval.every),
    on both ranks' live models, and the main process writes that row once."""
    one_stage = "curriculum.stages=[{name: a, ppl: 2, steps: 2, pool: 8}]"
    done = torchrun("-m", "train", "-m", *SMOKE, one_stage, "eval.every=1", "seed=1,2", f"paths.cache_dir={cache_dir}",
                    f"paths.output_dir={tmp_path}")
    assert done.returncode == 0, _job_errors(tmp_path) + done.stderr[-3000:]
    (sweep,) = (tmp_path / "multirun").iterdir()
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")) == ["0", "1"]
    for job, seed in (("0", 1), ("1", 2)):
        manifest = json.loads((sweep / job / "run.json").read_text())
        assert (manifest["status"], manifest["world_size"], manifest["stages"][0]["status"]) == ("done", 2, "done")
        assert f"seed: {seed}\n" in (sweep / job / "config.yaml").read_text()
        in_stage = [(r["stage_step"], r["ppl"]) for r in read_jsonl(sweep / job / "validation_steps.jsonl")]
        assert in_stage == [(1, 2)]


def test_a_killed_rank_stops_the_job_and_a_resume_finishes_it_bit_identical(two_processes, tmp_path, cache_dir):
    _, _, (reference,) = two_processes
    run_dir = tmp_path / "killed"
    args = [*SMOKE, f"paths.cache_dir={cache_dir}"]
    launcher = subprocess.Popen([*TORCHRUN, "-m", "train", *args, f"hydra.run.dir={run_dir}"], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # checkpoint-1 complete: its digests are written last, after every rank's files (train/stages/training.py)
        _wait_for(run_dir / "stages" / "2-3ppl" / "trainer" / "checkpoint-1" / "checksums.json", launcher)
        ranks = _ranks(launcher)
        for process in ranks.values():  # freeze both: the kill lands mid-stage, whatever the machine's speed
            process.suspend()
        assert not (run_dir / "stages" / "2-3ppl" / "final").exists(), "stage 2 is mid-way"
        ranks[1].kill()
        ranks[0].resume()
        stderr = launcher.communicate(timeout=120)[1]
    finally:
        launcher.kill()
    assert launcher.returncode != 0, "the job stops when one rank dies"
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks.values()), stderr[-2000:]
    before = json.loads((run_dir / "run.json").read_text())
    assert [s["status"] for s in before["stages"]][:1] == ["done"]
    assert before["stages"][1]["status"] in ("running", "failed")

    resumed = torchrun("-m", "train", *args, f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = json.loads((run_dir / "run.json").read_text())
    assert [s["status"] for s in after["stages"]] == ["done"] * len(STAGES)
    assert after["stages"][1]["resumed_from"], "stage 2 continued from its trainer checkpoint"
    steps = [r["global_step"] for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "step"]
    assert steps == list(range(1, 7)), "the resumed steps are logged once"
    assert finals(run_dir) == finals(reference), "bit-identical with the uninterrupted 2-process run"


@pytest.fixture(scope="module")
def failed_on_rank_1(tmp_path_factory, cache_dir):
    """A one-stage run under torchrun whose rank 1 raises in its reward: (the run's overrides, the finished
    launcher, the run directory)."""
    run_dir = tmp_path_factory.mktemp("failed-on-rank-1")
    boom = "+reward.custom.boom={_target_: tests.rank_drill.fails_on_rank, _partial_: true, rank: 1}"
    args = [*SMOKE, ONE_STAGE, boom, f"paths.cache_dir={cache_dir}"]
    return args, torchrun("-m", "train", *args, f"hydra.run.dir={run_dir}", timeout=300), run_dir


def test_a_failing_rank_stops_every_rank_and_is_recorded_once_naming_it(failed_on_rank_1):
    """Rank 1's reward raises: the job stops, error.txt names rank 1 and its error, not the cascade on rank 0."""
    _, done, run_dir = failed_on_rank_1
    assert done.returncode != 0
    error = (run_dir / "error.txt").read_text()
    assert error.splitlines()[0] == "rank 1 of 2: RuntimeError: reward drill: rank 1 fails here"
    assert error.count("Traceback") == 1, "one rank's error, recorded once"
    stage = json.loads((run_dir / "run.json").read_text())["stages"][0]
    assert stage["status"] in ("running", "failed"), "run.json never says the stage trained"


def test_a_resume_on_another_number_of_processes_is_one_line_and_keeps_the_failed_attempts_record(failed_on_rank_1):
    args, _, run_dir = failed_on_rank_1
    # the lock's files are the live holder's (a rank 0 stopped by the launcher may leave its pid in run.owner; the
    # refused resume holds the lock in its turn and lets go of it): the record is everything else
    def record():
        return {p.name: p.read_bytes() for p in run_dir.iterdir()
                if p.is_file() and p.name not in ("__main__.log", "run.owner", "run.lock")}
    kept = record()
    refused = run_cli("train", *args, f"resume={run_dir}")  # one process: the run trains on two
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        f"config error: resume={run_dir}: the run trains on 2 process(es), this launch has 1; every step's batch "
        "counts the processes (per-device batch x 2): resume it with 2 (torchrun --nproc_per_node 2, or accelerate "
        "launch --num_processes 2), or start a new run")
    assert "Traceback" not in refused.stderr
    assert record() == kept, \
        "error.txt, run.json and the logs as the failed attempt left them"


def test_a_killed_rank_is_named_by_the_rank_that_lost_it_as_the_cause_not_its_own_follow_on(tmp_path, cache_dir):
    """Rank 1 is SIGKILLed in its reward (as the out-of-memory killer does): rank 0 then fails in the next
    collective (gloo: "Connection closed by peer" or "reset by peer"). torchrun's agent looks every 3 s here (0.1 s
    by default, when it mostly stops rank 0 first and nothing is recorded): rank 0 records its error as a follow-on,
    in error.txt naming rank 1 (whose pid is gone) and in run.json; torchrun's summary names rank 1's signal."""
    kill = "+reward.custom.kill={_target_: tests.rank_drill.killed_on_rank, _partial_: true, rank: 1}"
    done = subprocess.run([*TORCHRUN[:3], "--monitor-interval", "3", *TORCHRUN[3:], "-m", "train", *SMOKE, ONE_STAGE,
                           kill, f"paths.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "Signal 9 (SIGKILL) received by PID" in done.stderr, "the launcher's summary names the killed rank"
    first = (tmp_path / "error.txt").read_text().splitlines()[0]
    assert first.startswith("rank 0 of 2: follow-on: lost rank 1 mid-collective (") and "by peer" in first, first
    assert first.endswith("); the cause is rank 1's: its own record in error.txt, or the signal in the launcher's "
                          "summary")
    stage = json.loads((tmp_path / "run.json").read_text())["stages"][0]  # the runner knows no pids: "another rank"
    assert stage["status"] == "failed" and stage["error"].startswith("follow-on: lost another rank mid-collective (")
    met = [line.split(" mid-collective (", 1)[1].rsplit("); the cause", 1)[0] for line in (first, stage["error"])]
    assert met[0] == met[1], "the same error of rank 0's in both"


def test_a_job_that_starts_its_ranks_names_a_killed_rank_and_its_signal(tmp_path, cache_dir):
    """launch=torchrun: the job runs torchrun's agent in train/launch/agent.py, which sees rank 1's SIGKILL."""
    kill = "+reward.custom.kill={_target_: tests.rank_drill.killed_on_rank, _partial_: true, rank: 1}"
    done = run_cli("train", *SMOKE, ONE_STAGE, kill, "launch=torchrun", "launch.processes=2",
                   f"paths.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path}", timeout=300)
    assert done.returncode != 0
    error = (tmp_path / "error.txt").read_text()
    assert error == ("rank 1 of 2: killed by SIGKILL (signal 9); a killed process records nothing itself (SIGKILL: "
                     "the kernel's out-of-memory killer, or kill -9)\n")


def test_a_job_that_launches_accelerate_never_tries_the_fixed_port_29500(tmp_path, cache_dir):
    """launch=accelerate: accelerate launch checks 29500 is free, then binds it, so two jobs starting at once on one
    machine (a sweep's jobs on their own GPUs) could both find it free and collide (EADDRINUSE). The job asks for
    a port accelerate picks: with 29500 held here, accelerate never falls back from it (its warning), and trains."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        with contextlib.suppress(OSError):  # held already: by another process, which serves as well
            held.bind(("", 29500))
            held.listen()
        done = run_cli("train", *SMOKE, ONE_STAGE, "launch=accelerate", "launch.processes=2",
                       "launch.accelerate_config=fsdp", f"paths.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path}",
                       timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Port `29500` is already in use" not in done.stdout + done.stderr
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "done"


def test_an_optuna_sweep_under_torchrun_is_refused_before_it_starts(tmp_path):
    """Every rank would run its own Optuna sweeper on one study: refused on each rank in one line, nothing made."""
    done = torchrun("-m", "train", "-m", *SMOKE, "+hparams_search=reward_optuna", f"paths.output_dir={tmp_path}",
                    timeout=120)
    assert done.returncode != 0
    refusals = [line for line in done.stderr.splitlines() if line.startswith("config error: hydra/sweeper=optuna: "
                                                                             "under torchrun or accelerate launch")]
    assert len(refusals) == 2, done.stderr[-2000:]
    assert done.stderr.count("Traceback (most recent call last)") == 1, "torchrun's own, for its failed ranks"
    assert list(tmp_path.iterdir()) == []


def test_a_collective_times_out_instead_of_waiting_forever():
    """Rank 1 never reaches the barrier and never exits: rank 0 fails at the timeout, and torchrun stops both."""
    began = time.monotonic()
    done = torchrun("-m", "tests.rank_drill", env={"KK_COLLECTIVE_TIMEOUT_S": "4"}, timeout=120)
    assert done.returncode != 0 and "Timed out" in done.stderr, done.stderr[-2000:]
    assert time.monotonic() - began < 100, "well before rank 1's sleep of 600 s ends"


def test_a_sweep_ends_on_every_rank_as_the_main_process_recorded_its_jobs(tmp_path):
    """Rank 1 reaches the sweep's end while its last job's run.json still says running (rank 0 writes `done` a
    moment later): it must take the main process's count, 0 failed, not its own early read of the folder."""
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "run.json").write_text('{"status": "running"}')
    done = torchrun("-m", "tests.rank_drill", "sweep-end", str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("sweep done:") == 1 and "(1 jobs, 0 failed)" in done.stdout, done.stdout


def test_a_run_held_by_another_process_refuses_both_ranks(two_processes, cache_dir):
    """A resume of a live run under 2 processes: both ranks leave at once, and the run's files are untouched."""
    _, _, (run_dir,) = two_processes
    kept = {name: (run_dir / name).read_bytes() for name in ("run.json", "metrics.jsonl", "validation.jsonl")}
    with RunLock(run_dir):
        done = torchrun("-m", "train", *SMOKE, f"paths.cache_dir={cache_dir}", f"resume={run_dir}", timeout=300)
    assert done.returncode != 0 and done.stderr.count("already running") == 2, done.stderr[-2000:]
    assert {name: (run_dir / name).read_bytes() for name in kept} == kept
    assert not (run_dir / "error.txt").exists()


def _process_running(parent: subprocess.Popen, marker: str, timeout: float = 120) -> psutil.Process:
    """The descendant of `parent` whose command line holds `marker`."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        for child in psutil.Process(parent.pid).children(recursive=True):
            try:
                if marker in " ".join(child.cmdline()):
                    return child
            except psutil.Error:
                continue
        time.sleep(0.2)
    raise AssertionError(f"no process running {marker}")


def test_a_sweep_job_starts_its_ranks_and_resumes_its_run_when_requeued(two_processes, tmp_path, cache_dir):
    """hydra/launcher=submitit_local runs a sweep job as SLURM would (pickled, in its own process); with
    launch=torchrun the job starts 2 ranks itself. Signalled as SLURM signals a job it preempts, the job is
    requeued, runs again in the same job directory, and its ranks resume the run to the same finals."""
    _, _, (reference,) = two_processes
    sweep = tmp_path / "sweep"
    sweeper = subprocess.Popen(
        [sys.executable, "-m", "train", "-m", *SMOKE, "hydra/launcher=submitit_local", "launch=torchrun",
         "launch.processes=2", f"paths.cache_dir={cache_dir}", f"paths.output_dir={tmp_path}",
         f"hydra.sweep.dir={sweep}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        job = sweep / "0"
        _wait_for(job / "stages" / "1-2ppl" / "final", sweeper)
        _process_running(sweeper, "submitit.core._submit").send_signal(signal.SIGUSR2)  # SLURM's warning signal
        output = sweeper.communicate(timeout=600)[0]
    finally:
        sweeper.kill()
    assert sweeper.returncode == 0, output[-3000:]
    logs = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.*"))
    assert "Requeued job" in logs, "the job was requeued, not left to finish"
    assert [p.name for p in sweep.iterdir() if not p.name.startswith(".") and p.is_dir()] == ["0"]
    assert not (tmp_path / "runs").exists(), "the ranks ran in the job's directory, not a new run's"
    manifest = json.loads((job / "run.json").read_text())
    assert (manifest["status"], manifest["world_size"]) == ("done", 2)
    assert [s["status"] for s in manifest["stages"]] == ["done"] * len(STAGES)
    assert finals(job) == finals(reference), "the requeued run ends as the uninterrupted one"

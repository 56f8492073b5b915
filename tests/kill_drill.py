"""The kill drill: a real `python -m train` SIGKILLed at moments drawn over a whole run, each resumed to the end.

    make drill                                  # 20 kills (KILLS=, SEED= to change)
    python -m tests.kill_drill --kills 20 --seed 0 --out outputs/drill

First one uninterrupted smoke run (the reference) is timed: how long its start-up takes (Python,
torch and TRL imports, the config, the pools: until run.json appears) and how long its work takes
after that (until run.json says done; the process's exit is left out). The work (the baseline
validation, every stage's training, checkpoint saves, publishing, validation) is cut into `kills`
equal windows and one kill moment drawn uniformly inside each (seeded); `--startup-kills` more are
drawn in start-up the same way. A moment in the work is counted from the
moment the killed run writes run.json, so a slower start-up does not shift the kills into it. For each
moment a fresh run is started, killed then, and brought to the end as a user would: with
`resume=<dir>` once the run has written run.json, else by starting it again in the same directory.
Each finished run must match the reference exactly: every stage's final weights (the bytes of its
`model.safetensors`), every validation summary, every global step logged once and in order.

Then two runs are killed while stage 3 trains and changed before the resume, as a copy or a hand may
leave a folder (`TAMPERING`): two done stages' finals swapped (each intact, its stage.json with it), and
metrics.jsonl a hard link to a file outside the run. The resume must refuse each in a line naming it,
leaving the folder (and the outside file) as they were; put right as the message says (retrain the
stages, a copy of its own), the run must go on to the reference's exact results.

The summary (one line per kill: when, what the run was doing, the resume's time, identical or not)
goes to the console and `<out>/drill.json`; the exit status is 1 if any kill did not resume to the
reference. `tests/runs/test_kill_windows.py` and `tests/runs/test_resume.py` kill at chosen points; this draws them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from core.rundir.files import METRICS, RUN_JSON, VALIDATION, read_jsonl, read_mapping

ROOT = Path(__file__).resolve().parents[1]
# The smoke ladder (5 stages x 2 steps on the tiny model), one CPU thread: identical runs give identical bits.
SMOKE = ["+curriculum=kk_ladder", "experiment=smoke", "cpu_threads=1"]
CHILD_ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}


def train(args: list[str], **popen) -> subprocess.Popen:
    """`python -m train <args>` in the repository, output kept out of the drill's console."""
    return subprocess.Popen([sys.executable, "-m", "train", *args], cwd=ROOT, env={**os.environ, **CHILD_ENV},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **popen)


def finish(args: list[str]) -> tuple[int, str, float]:
    """Run `python -m train <args>` to its end: (exit status, last lines of stderr, seconds)."""
    began = time.monotonic()
    proc = train(args)
    _, err = proc.communicate(timeout=1800)
    return proc.returncode, err[-2000:], time.monotonic() - began


def outcome(run_dir: Path) -> dict:
    """What a finished run produced, in the terms two runs must agree on exactly."""
    manifest = read_mapping(run_dir / RUN_JSON)
    stages = manifest.get("stages") or []
    finals = {}
    for stage in stages:
        weights = run_dir / (stage.get("checkpoint") or "missing") / "model.safetensors"
        finals[stage["name"]] = hashlib.sha256(weights.read_bytes()).hexdigest() if weights.is_file() else None
    steps = [r["global_step"] for r in read_jsonl(run_dir / METRICS) if r.get("kind") == "step"]
    validated = sorted((r["stage"], r["ppl"]) for r in read_jsonl(run_dir / VALIDATION))
    return {"status": manifest.get("status"), "statuses": [s.get("status") for s in stages], "finals": finals,
            "summaries": [s.get("final_metrics") for s in stages], "baseline": manifest.get("baseline"),
            "steps": steps, "validated": validated}


def doing(run_dir: Path) -> str:
    """What a killed run was doing, read from what it left: for the drill's table."""
    manifest = read_mapping(run_dir / RUN_JSON)
    if not manifest:
        return "start-up (no run.json yet)"
    if manifest.get("status") == "done":
        return "exiting (run.json says done)"
    if manifest.get("baseline") is None:
        return "baseline validation"
    for stage in manifest.get("stages") or []:
        status, name = stage.get("status"), stage.get("name")
        if status == "done":
            continue
        trainer = run_dir / "stages" / f"{stage.get('index')}-{name}" / "trainer"
        saved = sorted(p.name for p in trainer.glob("checkpoint-*")) if trainer.is_dir() else []
        if status == "trained":
            return f"stage {name}: validating its final"
        return f"stage {name}: {status}, {saved[-1] if saved else 'no checkpoint'} on disk"
    return "finishing (every stage done)"


def moments(duration: float, kills: int, seed: int) -> list[float]:
    """One moment drawn uniformly in each of `kills` equal windows of [0, duration).

    >>> [round(t, 2) for t in moments(10.0, 4, seed=0)]
    [2.11, 4.39, 6.05, 8.15]
    """
    draw = random.Random(seed)
    return [(window + draw.random()) * duration / kills for window in range(kills)]


def started(proc: subprocess.Popen, run_dir: Path, timeout: float = 600) -> float | None:
    """Seconds until `run_dir` holds run.json (polled every 10 ms); None if the process ended first."""
    return _until(proc, lambda: (run_dir / RUN_JSON).is_file(), timeout)


def worked(proc: subprocess.Popen, run_dir: Path, timeout: float = 1800) -> float | None:
    """Seconds until run.json says the run is done (what is left is the process's exit)."""
    return _until(proc, lambda: read_mapping(run_dir / RUN_JSON).get("status") == "done", timeout)


def _until(proc: subprocess.Popen, condition, timeout: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if condition():
            return time.monotonic() - began
        if proc.poll() is not None:
            return None
        time.sleep(0.01)
    raise TimeoutError(f"nothing after {timeout} s")


def kill_once(run_dir: Path, common: list[str], at: float, *, after_start: bool) -> float | None:
    """Start a run in a fresh `run_dir` and SIGKILL it `at` seconds in (`after_start`: after it wrote run.json).
    None when it was killed; the seconds it took when it ended first (counted from the same point)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    proc = train([*common, f"hydra.run.dir={run_dir}"])
    if after_start and started(proc, run_dir) is None:
        raise RuntimeError(f"{run_dir}: the run ended before it wrote run.json:\n{proc.stderr.read()[-2000:]}")
    began = time.monotonic()
    try:
        proc.wait(timeout=at)
        return time.monotonic() - began
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return None


def kill_and_resume(run_dir: Path, common: list[str], share: float, span: float, *, after_start: bool,
                    tries: int = 3) -> dict:
    """Kill a run at `share` of `span` seconds (of start-up, or of the work after it), then bring it to the end.

    A run that ends before its moment (this machine is faster now than in the reference) is started again
    and killed at the same share of the time that run took."""
    at = share * span
    for _ in range(tries):
        took = kill_once(run_dir, common, at, after_start=after_start)
        if took is None:
            break
        at = share * took
    else:
        return {"kill_at_s": round(at, 2), "after_start": after_start, "doing": f"ended first, {tries} tries",
                "resumed_with": "-", "resume_exit": 0, "resume_s": 0.0, "stderr_tail": ""}
    state = doing(run_dir)
    again = f"resume={run_dir}" if (run_dir / RUN_JSON).is_file() else f"hydra.run.dir={run_dir}"
    code, err, seconds = finish([*common, again])
    return {"kill_at_s": round(at, 2), "after_start": after_start, "doing": state,
            "resumed_with": again.split("=")[0], "resume_exit": code, "resume_s": round(seconds, 1),
            "stderr_tail": err if code else ""}


def swap_finals(run_dir: Path) -> tuple[str, list[str], list[str]]:
    """Stages 1's and 2's finals exchanged: (what the refusal names, the resume's extra arguments that put it right,
    the files that must stay as they are until then)."""
    one, two = (run_dir / "stages" / name / "final" for name in ("1-2ppl", "2-3ppl"))
    one.rename(one.with_name("swapping"))
    two.rename(one)
    one.with_name("swapping").rename(two)
    return ("its stage.json names stage '2ppl', not '3ppl': another stage's final is in its place",
            ["on_damaged_checkpoint=retrain"], [str(p / "model.safetensors") for p in (one, two)])


def hard_link_metrics(run_dir: Path) -> tuple[str, list[str], list[str]]:
    """metrics.jsonl made one file with one outside the run, which a resume would truncate and append to; put
    right as the refusal says (a copy of its own)."""
    metrics, outside = run_dir / METRICS, run_dir.parent / f"{run_dir.name}-outside.jsonl"
    outside.write_bytes(metrics.read_bytes())
    metrics.unlink()
    os.link(outside, metrics)
    return "metrics.jsonl: a hard link (2 names for one file", [], [str(outside), str(metrics)]


def own_copies(run_dir: Path) -> None:
    """Put hard links right as the refusal says: every file with another name replaced by a copy of its own."""
    for path in run_dir.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_nlink > 1:
            copy = path.with_name(f"{path.name}.copy")
            shutil.copyfile(path, copy)
            copy.replace(path)


TAMPERING = {"swapped finals": swap_finals, "metrics.jsonl hard-linked out": hard_link_metrics}


def in_stage_3(run_dir: Path) -> bool:
    stages = read_mapping(run_dir / RUN_JSON).get("stages") or []
    return len(stages) > 2 and stages[2].get("status") == "running"


def tampered(run_dir: Path, common: list[str], name: str) -> dict:
    """Kill a run while stage 3 trains, change it (`TAMPERING[name]`), resume: refused naming it, nothing written;
    then put right and resumed to the end."""
    shutil.rmtree(run_dir, ignore_errors=True)
    proc = train([*common, f"hydra.run.dir={run_dir}"])
    if _until(proc, lambda: in_stage_3(run_dir), 1800) is None:
        raise RuntimeError(f"{run_dir}: the run ended before stage 3:\n{proc.stderr.read()[-2000:]}")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    refusal, fix, kept = TAMPERING[name](run_dir)
    before = {path: Path(path).read_bytes() for path in kept}
    code, err, _ = finish([*common, f"resume={run_dir}"])
    refused = code != 0 and refusal in err and {path: Path(path).read_bytes() for path in kept} == before
    own_copies(run_dir)
    code, err, seconds = finish([*common, f"resume={run_dir}", *fix])
    return {"tampering": name, "refused": refused, "resumed_with": " ".join(["resume", *fix]), "resume_exit": code,
            "resume_s": round(seconds, 1), "stderr_tail": err if code or not refused else ""}


def reference_run(run_dir: Path, common: list[str]) -> tuple[float, float]:
    """Run the reference to its end: (seconds of start-up until run.json, seconds of work after it until
    run.json says done)."""
    proc = train([*common, f"hydra.run.dir={run_dir}"])
    startup = started(proc, run_dir)
    work = worked(proc, run_dir) if startup is not None else None
    _, err = proc.communicate(timeout=1800)
    if proc.returncode or work is None:
        raise RuntimeError(f"the reference run failed:\n{err[-3000:]}")
    return startup, work


def drill(out: Path, kills: int, seed: int, *, startup_kills: int = 2, cache_dir: Path | None = None) -> dict:
    """The whole drill (module docstring); returns its summary, also written to `<out>/drill.json`.

    `cache_dir`: the model cache (None: the config's `paths.cache_dir`)."""
    shutil.rmtree(out, ignore_errors=True)
    common = [*SMOKE, *([f"paths.cache_dir={cache_dir}"] if cache_dir else [])]
    code, err, _ = finish([*common, f"hydra.run.dir={out / 'warm-up'}"])  # builds the tiny model into the cache
    if code:
        raise RuntimeError(f"the warm-up run failed:\n{err}")
    startup, work = reference_run(out / "reference", common)
    reference = outcome(out / "reference")
    plan = [(share, startup, False) for share in moments(1.0, startup_kills, seed)] + \
           [(share, work, True) for share in moments(1.0, kills, seed + 1)]
    results = []
    for k, (share, span, after_start) in enumerate(plan):
        run_dir = out / f"kill-{k:02d}"
        result = kill_and_resume(run_dir, common, share, span, after_start=after_start)
        result["identical"] = result["resumed_with"] != "-" and result["resume_exit"] == 0 and \
            outcome(run_dir) == reference
        results.append(result)
        at = result["kill_at_s"]
        when = f"{at:4.1f} s into the work ({work:.1f} s)" if after_start else f"{at:4.1f} s into start-up"
        print(f"kill {k + 1:2d}/{len(plan)} {when:<28}: {result['doing']:<44} -> {result['resumed_with']:<13} "
              f"{result['resume_s']:5.1f} s, {'identical' if result['identical'] else 'DIFFERENT'}", flush=True)
    for k, name in enumerate(TAMPERING):
        result = tampered(out / f"tampered-{k}", common, name)
        result["identical"] = result["refused"] and result["resume_exit"] == 0 and \
            outcome(out / f"tampered-{k}") == reference
        results.append(result)
        print(f"kill in stage 3, {name:<30}: {'refused by name' if result['refused'] else 'NOT REFUSED'}, then "
              f"{result['resumed_with']:<40} {result['resume_s']:5.1f} s, "
              f"{'identical' if result['identical'] else 'DIFFERENT'}", flush=True)
    summary = {"kills": len(results), "in_work": kills, "in_startup": startup_kills, "tampered": len(TAMPERING),
               "seed": seed, "reference_startup_seconds": round(startup, 1), "reference_work_seconds": round(work, 1),
               "identical": sum(r["identical"] for r in results), "results": results}
    (out / "drill.json").write_text(json.dumps(summary, indent=2))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="kill moments drawn over the run's work")
    parser.add_argument("--startup-kills", type=int, default=2, help="more drawn over its start-up")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "drill")
    parser.add_argument("--cache-dir", type=Path, default=None, help="model cache (default: paths.cache_dir's)")
    args = parser.parse_args()
    began = time.monotonic()
    summary = drill(args.out.resolve(), args.kills, args.seed, startup_kills=args.startup_kills,
                    cache_dir=args.cache_dir)
    print(f"{summary['identical']} of {summary['kills']} kills resumed to the reference's exact weights and "
          f"validations, in {time.monotonic() - began:.0f} s; {args.out / 'drill.json'}")
    sys.exit(0 if summary["identical"] == summary["kills"] else 1)


if __name__ == "__main__":
    main()

"""`python -m tests.trace_stage` (`make trace`): how much product code one smoke stage runs.

It runs `python -m train` in this process (`runpy`, as the interpreter's `-m` does: `train/__main__.py`'s
Hydra app, its config checks, the curriculum run) on the smoke recipe cut to one stage of one GRPO step,
validated (baseline and after the stage) on one subset of 4 puzzles. `sys.setprofile` and
`threading.setprofile` record every Python function call whose code lives in a product file (the .py files
under core, conf, curriculum, train, eval, hydra_plugins). Processes the run starts (none on this recipe)
are not traced. A cold model cache adds the tiny model's build (`core/model_cache.py`, `core/tiny_model.py`:
9 functions more), so compare runs on a warm cache (run it twice). The run must end with its stage done (a
published final, run.json's `final_marker`) and a validation row for it, else this fails.

How to read it:
- imported: product files in `sys.modules` at the end (a module imported but never run costs its import);
- with a function run: product files at least one function of which ran (module bodies aside);
- distinct named functions: (file, qualified name) pairs that ran at least once, comprehensions, lambdas,
  generator expressions and module bodies (names starting with '<') aside, and class bodies (run once at
  import) counted apart;
- the top 15 files by distinct functions run: where following the stage means reading most code.
The full lists go to outputs/trace/trace.json; the traced run's folder is outputs/trace/run.
"""

from __future__ import annotations

import argparse
import json
import runpy
import shutil
import sys
import threading
from collections import Counter
from inspect import CO_OPTIMIZED
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("core", "conf", "curriculum", "train", "eval", "hydra_plugins")
OUT = ROOT / "outputs" / "trace"
# the smoke recipe cut to one stage of one step, and a validation of 4 puzzles of one subset (2ppl)
OVERRIDES = ["+curriculum=kk_ladder", "experiment=smoke",
             "curriculum.stages=[{name: 2ppl, ppl: 2, steps: 1, pool: 16}]",
             "eval.subsets=[2]", "eval.n=4"]


def product_file(filename: str) -> str | None:
    """`filename` relative to the checkout when it is a product .py file, else None."""
    path = Path(filename)
    if path.suffix != ".py" or not path.is_absolute():
        return None
    try:
        relative = path.relative_to(ROOT)
    except ValueError:
        return None
    return relative.as_posix() if relative.parts[0] in PRODUCT else None


def traced_run(argv: list[str]) -> set[tuple[str, str, bool]]:
    """Run `python -m train <argv>` here under the profiler; (file, qualified name, is a function) of every
    product code object run."""
    seen_code: dict[object, tuple[str, str, bool] | None] = {}
    calls: set[tuple[str, str, bool]] = set()

    def profile(frame, event, _arg):
        if event != "call":
            return
        code = frame.f_code
        if code not in seen_code:
            where = product_file(code.co_filename)
            # a function's frame has fast locals; a class or module body's has none
            seen_code[code] = (where, code.co_qualname, bool(code.co_flags & CO_OPTIMIZED)) if where else None
        if seen_code[code] is not None:
            calls.add(seen_code[code])

    saved_argv = sys.argv
    sys.argv = ["train", *argv]
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        runpy.run_module("train", run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            raise SystemExit(f"trace: python -m train exited with {exit_.code!r}") from None
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        sys.argv = saved_argv
    return calls


def check_stage_done(run_dir: Path) -> str:
    """The stage's name once run.json says it is done with a published final and validation.jsonl has its row."""
    manifest = json.loads((run_dir / "run.json").read_text())
    stages = manifest.get("stages", [])
    if len(stages) != 1:
        raise SystemExit(f"trace: {run_dir}/run.json holds {len(stages)} stages, not 1")
    stage = stages[0]
    final = run_dir / stage.get("checkpoint", "?") / "stage.json"
    if stage.get("status") != "done" or not stage.get("final_marker") or not final.is_file():
        raise SystemExit(f"trace: stage {stage.get('name')} is {stage.get('status')}, final marker "
                         f"{stage.get('final_marker')}, {final} {'present' if final.is_file() else 'missing'}")
    rows = [json.loads(line) for line in (run_dir / "validation.jsonl").read_text().splitlines() if line.strip()]
    if not any(row.get("stage_name") == stage["name"] for row in rows):
        raise SystemExit(f"trace: no validation row for stage {stage['name']} in {run_dir}/validation.jsonl")
    return stage["name"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides (after the trace's own)")
    args = parser.parse_args()
    run_dir = OUT / "run"
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run: a folder left by the last trace would be resumed
    calls = traced_run([*OVERRIDES, *args.overrides, f"hydra.run.dir={run_dir}"])
    stage = check_stage_done(run_dir)

    imported = sorted({where for module in list(sys.modules.values())
                       if (where := product_file(getattr(module, "__file__", None) or ""))})
    named_calls = [call for call in calls if not call[1].rsplit(".", 1)[-1].startswith("<")]
    named = sorted((where, name) for where, name, function in named_calls if function)
    class_bodies = sorted(f"{where}:{name}" for where, name, function in named_calls if not function)
    files_run = sorted({where for where, _ in named})
    per_file = Counter(where for where, _ in named)
    print(f"stage {stage}: done, its final published, validated ({run_dir})")
    print(f"product files imported:      {len(imported)}")
    print(f"files with a function run:   {len(files_run)}")
    print(f"distinct named functions run: {len(named)} (and {len(class_bodies)} class bodies)")
    print("top 15 files by distinct functions run:")
    for where, count in per_file.most_common(15):
        print(f"  {count:4d}  {where}")
    report = {"overrides": OVERRIDES + args.overrides, "imported": imported, "files_run": files_run,
              "imported_not_run": sorted(set(imported) - set(files_run)),
              "functions": [f"{where}:{name}" for where, name in named], "class_bodies": class_bodies,
              "per_file": dict(per_file.most_common())}
    (OUT / "trace.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"lists in {OUT / 'trace.json'}")


if __name__ == "__main__":
    main()

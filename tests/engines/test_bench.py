"""tests.bench: pure pieces on made-up numbers, measuring pieces at tiny sizes (no timing asserted)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from core.models import resolve_model
from tests.bench import AIMS, assemble, figures_table, jobs, parse_args
from tests.bench_parts import (
    agreement,
    bare_ladder,
    canonical_key_seconds,
    grader_scaling,
    handoff_seconds,
    overhead_summary,
    run_measured,
    stage_seconds,
    validation_comparison,
)
from tests.bench_vllm import AIMS as VLLM_AIMS

TWO_STAGES = "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 8}, {name: b, ppl: 3, steps: 1, pool: 8}]"


def _run(stage_s: list[float], peak: float = 700.0) -> dict:
    n = len(stage_s)
    return {"stage_s": stage_s, "steps": [8] * n, "peak_rss_mb": peak, "weights": ["w"] * n}


def test_overhead_is_the_median_of_the_round_ratios():
    ours = [_run([2, 2]), _run([3, 3]), _run([4, 4])]
    bare = [_run([1, 1]), _run([3, 3]), _run([2, 2])]
    summary = overhead_summary(ours, bare)
    assert summary["ratios"] == [2.0, 1.0, 2.0] and summary["ratio"] == 2.0
    assert (summary["ours_s"], summary["bare_s"]) == (6, 4)
    assert summary["ours_stage_s"] == [3, 3] and summary["rounds"] == 3 and summary["same_weights"]


def test_overhead_refuses_runs_of_different_lengths():
    unequal = {**_run([1, 1]), "steps": [8, 7]}
    with pytest.raises(RuntimeError, match="different numbers of steps"):
        overhead_summary([_run([1, 1])], [unequal])


def test_agreement_needs_equal_lengths():
    assert agreement([(True, False, ())], [(True, False, ())]) == 1.0
    with pytest.raises(ValueError, match="equally long"):
        agreement([1, 2], [1])


def test_stage_seconds_reads_run_json_stages():
    stages = [{"wall_seconds": 1.5, "steps_done": 8}, {"wall_seconds": 2.25, "steps_done": 8}]
    assert stage_seconds(stages) == {"stage_s": [1.5, 2.25], "steps": [8, 8]}


def test_rounds_interleave_and_alternate_who_goes_first(tmp_path):
    args = parse_args(["--repeats", "3", "--cache-dir", str(tmp_path)])
    keys = [key for key, _, _ in jobs(args, tmp_path) if key.startswith(("ours", "bare", "ddp"))]
    assert keys == ["ours:0", "bare:0", "ddp-ours:0", "ddp-bare:0", "bare:1", "ours:1", "ddp-bare:1", "ddp-ours:1",
                    "ours:2", "bare:2", "ddp-ours:2", "ddp-bare:2"]
    one_process = parse_args(["--repeats", "1", "--processes", "0", "--cache-dir", str(tmp_path)])
    assert not [key for key, _, _ in jobs(one_process, tmp_path) if key.startswith("ddp")]


def test_bench_json_and_table_hold_every_figure_and_aim():
    validation = {"speedup": 4.0, "batched_s": 1.0, "single_s": 4.0, "verdict_agreement": 1.0,
                  "text_agreement": 0.9, "ended_share": 0.0, "n": 32, "ppl": 3, "batch_size": 16,
                  "max_new_tokens": 64}
    raw = {"ours:0": _run([2, 2], 710), "bare:0": _run([2, 1], 700), "generator": {"2": 9000.0, "8": 1500.0},
           # two processes under torchrun: ours 6 s, bare 5 s; 2 x 16 steps x 4 completions in 6 s against 16 x 4 in 4 s
           "ddp-ours:0": _run([3, 3], 800), "ddp-bare:0": _run([3, 2], 790),
           "grader": 12000.0, "gsm8k_grader": {"grader": 30000.0, "stack": 6000.0},
           "handoff": {"seconds": 0.3, "save_s": 0.1, "load_s": 0.2, "repeats": 3},
           "validation:tiny": validation,
           "grader_scaling": {"cases": {"claims in the answer": {"small_s": 0.03, "large_s": 0.31, "ratio": 10.3}},
                              "sizes": [100_000, 1_000_000], "large_s": 0.31, "ratio": 10.3},
           "canonical": {"random_s": 0.21, "symmetric_s": 0.004, "n": 500, "distinct": 500}}
    settings = {"cpus": 2, "torch_threads": 1, "load_avg_start": 1.0, "load_avg_end": 2.0, "total_s": 200.0,
                "processes": 2, "completions_per_device_step": 4}
    bench = assemble(raw, settings)
    assert bench["orchestration_overhead"] == pytest.approx(4 / 3, abs=1e-3)
    assert bench["orchestration_overhead_torchrun"] == pytest.approx(6 / 5, abs=1e-3)
    assert bench["processes_speedup"] == pytest.approx((2 * 16 * 4 / 6) / (16 * 4 / 4), abs=1e-3)
    assert bench["peak_rss_mb"] == 710 and bench["validation_batched_speedup"] == 4.0
    json.dumps(bench)  # bench.json must serialise as it is
    console = Console(file=io.StringIO(), width=240)
    console.print(figures_table(bench))
    text = console.file.getvalue()
    shown = ("1.333×", "same weights", "0.30 s", "9,000", "12,000/s", "30,000/s (6,000/s)", "4.00×", "710 MB",
             "aim ≤ 1.1×", "1.200×", "aim ≤ 1.05×", "1.33× (21.3/s vs 16.0/s)", "aim ≥ 1.33×",
             "aim ≥ 500/s each", "0.31 s", "10.3×", "worst: claims in the answer", "aim ≤ 30×", "0.21 s", "0.004 s")
    for figure in shown:
        assert figure in text, figure
    # one aim per row; the vLLM rows come only with vLLM's figures (tests/engines/test_bench_vllm.py shows them)
    assert text.count("aim ≤") + text.count("aim ≥") == len(set(AIMS) - set(VLLM_AIMS))
    assert text.count("MISSED") == 2  # the overheads: 1.333 against at most 1.1, 1.2 against at most 1.05
    without = assemble({k: v for k, v in raw.items() if not k.startswith("ddp")}, settings)
    assert "processes_speedup" not in without and "many_processes" not in without["details"]


def test_run_measured_reports_the_childs_own_peak_and_failures(tmp_path):
    measured = run_measured(["json.tool", "--help"], tmp_path / "ok.log")
    # this process holds torch (hundreds of MB); a small child must not report that as its peak
    assert measured["process_s"] > 0 and 1 < measured["peak_rss_mb"] < 100
    with pytest.raises(RuntimeError, match=r"exited [1-9]"):
        run_measured(["json.tool", str(tmp_path / "missing.json")], tmp_path / "bad.log")


@pytest.mark.run
def test_measuring_pieces_run_at_tiny_sizes(make_cfg, tmp_path):
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", "eval.n=2", TWO_STAGES)
    stages = bare_ladder(cfg, tmp_path / "bare")
    assert [(s["stage"], s["steps"]) for s in stages] == [("a", 1), ("b", 1)]
    assert (tmp_path / "bare" / "2-b" / "final" / "config.json").exists()
    handoff = handoff_seconds(cfg, tmp_path / "handoff", repeats=1)
    assert handoff["seconds"] == pytest.approx(handoff["save_s"] + handoff["load_s"], abs=2e-3)
    compared = validation_comparison(cfg, resolve_model(cfg.model, cfg.paths.cache_dir), ppl=3, batch_size=2,
                                     max_new_tokens=4)
    assert compared["n"] == 2 and 0 <= compared["verdict_agreement"] <= 1 and compared["speedup"] > 0


def test_grader_scaling_and_canonical_keys_run_at_tiny_sizes():
    scaling = grader_scaling(small=500, large=5000)
    # two grader paths, each in the answer and in the reasoning; the figures are their worst case
    assert len(scaling["cases"]) == 4 and scaling["ratio"] == max(c["ratio"] for c in scaling["cases"].values())
    canonical = canonical_key_seconds(n=5)
    assert canonical["distinct"] == 5 and canonical["symmetric_s"] >= 0

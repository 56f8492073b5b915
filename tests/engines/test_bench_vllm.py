"""tests.bench_vllm on made-up numbers: the figures and table rows `make bench` builds from its vLLM jobs."""

from __future__ import annotations

from tests.bench import AIMS, jobs, meets, parse_args
from tests.bench_vllm import vllm_figures, vllm_rows


def _run(generate_s: float, start_s: float = 1.0) -> dict:
    return {"start_s": start_s, "generate_s": generate_s, "completions_per_s": round(32 / generate_s, 3),
            "tokens": 6400, "correct": 0, "format_ok": 1}


RAW = {
    "vllm_validation": {"n": 32, "ppl": 3, "max_new_tokens": 200, "threads": 2,
                        "runs": {"hf/float32": _run(64.0), "vllm/float32": _run(27.0, 2.7),
                                 "hf/bfloat16": _run(32.0), "vllm/bfloat16": _run(20.0, 2.5),
                                 "vllm-compiled/float32": _run(30.0, 60.0)},
                        "speedup_float32": 2.37, "speedup_bfloat16": 1.6, "texts_equal_float32": 1.0,
                        "texts_equal_bfloat16": 0.1, "bf16_verdicts_changed_hf": 1, "bf16_verdicts_changed_vllm": 0},
    "demo_validation": {"subsets": ["2ppl", "3ppl"], "n": 4, "max_new_tokens": 160,
                        "hf": {"start_s": 0.3, "generate_s": 85.2}, "vllm": {"start_s": 5.4, "generate_s": 38.6}},
    "engine_starts": {"starts": 1, "start_seconds": 3.2, "run_s": 41.0},
    "demo_rollouts": {"hf": {"mean_step_s": 60.0, "ms_per_token": 90.0}, "vllm": {"mean_step_s": 40.0,
                                                                                  "ms_per_token": 60.0}},
}


def test_the_figures_are_the_speedups_and_the_demos_time_ratio():
    assert vllm_figures(RAW) == {"vllm_validation_speedup": 2.37, "vllm_validation_speedup_bfloat16": 1.6,
                                 "demo_validation_vllm_vs_hf": round(44.0 / 85.5, 3), "engine_starts_per_run": 1,
                                 "demo_grpo_step_vllm_vs_hf": round(40.0 / 60.0, 3)}


def test_the_rows_say_each_dtype_the_verdicts_bf16_changed_and_the_demo():
    bench = {**vllm_figures(RAW), "details": RAW}
    rows = vllm_rows(bench)
    assert [key for _, _, key, _, _ in rows] == ["vllm_validation_speedup", "vllm_validation_speedup_bfloat16",
                                                 "demo_validation_vllm_vs_hf", "engine_starts_per_run",
                                                 "demo_grpo_step_vllm_vs_hf"]
    assert "2.37×" in rows[0][1] and "engine start 2.7 s" in rows[0][1]
    assert "bf16 changed 1 HF and 0 vLLM verdicts of 32" in rows[1][1]
    assert all(meets(key, value) for _, _, key, _, value in rows)
    assert not meets("demo_validation_vllm_vs_hf", 1.2), "a demo validation slower through vLLM misses"
    assert "1 (3.2 s of a 41 s run)" in rows[3][1] and not meets("engine_starts_per_run", 5), "an engine a stage misses"
    assert "0.67× (60 vs 90 ms; 40.0 s vs 60.0 s a step)" in rows[4][1]
    assert {key for _, _, key, _, _ in rows} <= set(AIMS)


def test_the_vllm_jobs_come_before_the_ladder_rounds_unless_turned_off(tmp_path):
    keys = [key for key, _, _ in jobs(parse_args(["--cache-dir", str(tmp_path), "--repeats", "1"]), tmp_path)]
    assert keys.index("vllm_validation") < keys.index("demo_validation") < keys.index("engine_starts") < \
        keys.index("demo_rollouts") < keys.index("ours:0")
    off = [key for key, _, _ in jobs(parse_args(["--cache-dir", str(tmp_path), "--no-vllm"]), tmp_path)]
    assert not {"vllm_validation", "demo_validation", "engine_starts", "demo_rollouts"} & set(off)

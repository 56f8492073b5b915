"""`finals`: the finals no stage still to train reads, rewritten in bfloat16 or removed, without changing the
handoff (each stage starts from its predecessor's float32 final) or a resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open
from transformers import TrainerCallback

from core.rundir.records import StageRecord, recorded_final_problem
from train.run.runner import run_curriculum
from train.settings import read_settings

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run

LADDER = ("+curriculum=kk_ladder", "experiment=smoke", "limits.max_steps=1")


def stages(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "run.json").read_text())["stages"]


def handoff(run_dir: Path) -> list[tuple]:
    """What each stage started from and measured KL against, and what it validated to."""
    return [(s["policy_fingerprint"], s["reference_fingerprint"], s["final_metrics"]) for s in stages(run_dir)]


def weight_dtypes(final: Path) -> set[str]:
    with safe_open(final / "model.safetensors", framework="pt") as weights:
        return {str(weights.get_slice(name).get_dtype()) for name in weights.keys()}  # noqa: SIM118 (no __iter__)


@pytest.fixture(scope="module")
def as_published(tmp_path_factory, cache_dir):
    from tests.conftest import compose_cfg

    run_dir = tmp_path_factory.mktemp("finals-default")
    run_curriculum(read_settings(compose_cfg(cache_dir, *LADDER)), run_dir)
    return run_dir


def test_by_default_every_final_stays_in_float32(as_published):
    finals = [as_published / s["checkpoint"] for s in stages(as_published)]
    assert all(weight_dtypes(final) == {"F32"} for final in finals)
    assert "compacted_finals" not in json.loads((as_published / "run.json").read_text())


def test_keep_last_removes_the_finals_nothing_reads_and_the_handoff_is_unchanged(tmp_path, make_cfg, as_published):
    run_curriculum(read_settings(make_cfg(*LADDER, "finals.keep=last")), tmp_path)
    finals = sorted(p.parent.name for p in tmp_path.glob("stages/*/final"))
    assert finals == ["5-6ppl"], "the run's last final, its result, stays"
    assert json.loads((tmp_path / "run.json").read_text())["compacted_finals"] == {
        f"stages/{d}/final": "removed" for d in ("1-2ppl", "2-3ppl", "3-4ppl", "4-5ppl")}
    # every stage started from, and measured KL against, the same weights as with every final kept
    assert handoff(tmp_path) == handoff(as_published)


def test_bfloat16_rewrites_the_finals_nothing_reads_at_half_the_size(tmp_path, make_cfg, as_published):
    run_curriculum(read_settings(make_cfg(*LADDER, "finals.dtype=bfloat16")), tmp_path)
    for stage in stages(tmp_path):
        final, published = tmp_path / stage["checkpoint"], as_published / stage["checkpoint"]
        last = stage["index"] == 5
        assert weight_dtypes(final) == ({"F32"} if last else {"BF16"})
        info = json.loads((final / "stage.json").read_text())
        assert info.get("dtype") == (None if last else "bfloat16") and info["stage"] == stage["name"]
        # its new marker names the one run.json recorded: still handed on (python -m eval) as the stage's final
        assert recorded_final_problem(final, StageRecord.from_json(stage)) is None
        size, full = (final / "model.safetensors").stat().st_size, (published / "model.safetensors").stat().st_size
        assert size == full if last else size < 0.6 * full
    assert handoff(tmp_path) == handoff(as_published)


class FailInStage(TrainerCallback):
    """Raises once, at the first step of stage `index` (counting the trainers it is handed to)."""

    def __init__(self, index: int):
        self.index, self.seen = index, 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.seen += 1

    def on_step_begin(self, args, state, control, **kwargs):
        if self.seen == self.index and not getattr(self, "failed", False):
            self.failed = True
            raise RuntimeError("a crash in stage 4")


def test_a_resume_after_finals_were_removed_goes_on_from_the_last_one_kept(tmp_path, make_cfg, as_published):
    with pytest.raises(RuntimeError, match="a crash in stage 4"):
        run_curriculum(read_settings(make_cfg(*LADDER, "finals.keep=last")), tmp_path, callbacks=(FailInStage(4),))
    assert sorted(p.parent.name for p in tmp_path.glob("stages/*/final")) == ["3-4ppl"]  # stage 4 starts from it
    run_curriculum(read_settings(make_cfg(*LADDER, "finals.keep=last", f"resume={tmp_path}")), tmp_path)
    assert [s["status"] for s in stages(tmp_path)] == ["done"] * 5
    assert sorted(p.parent.name for p in tmp_path.glob("stages/*/final")) == ["5-6ppl"]
    assert handoff(tmp_path) == handoff(as_published)

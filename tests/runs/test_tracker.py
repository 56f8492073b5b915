"""The tracker's mode and start: `logger.mode: auto` follows WANDB_MODE, probes the wandb host (3 s at most) only
with a key and no WANDB_MODE, and a wandb run that cannot start fails the run instead of leaving it running. What a
run sends: a GRPO stage's keys exactly as TRL logs them through transformers' WandbCallback, SFT's apart, the stage
and its kind on every row, the reward stack and the stages in the config (read back from wandb's own offline record).

No test reaches outside this machine: a probed host is a port on 127.0.0.1 that nothing listens on.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers.integrations.integration_utils import rewrite_logs
from wandb.proto import wandb_internal_pb2

from core.rundir.files import read_jsonl
from core.tracker import TrackerStartError, WandbTracker, host_answers, wandb_mode
from tests.conftest import ROOT, run_cli
from train.tracking import SUMMARY_SCALARS

KEY = {"WANDB_API_KEY": "0" * 40}  # a key of the right length that no server knows


@pytest.fixture
def closed_url() -> str:
    """The URL of a port on 127.0.0.1 that nothing listens on (bound, then released: the kernel refuses it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(("mode", "env", "answers", "expected"), [
    # WANDB_MODE is honoured whatever the key says: a cluster node's environment often holds both
    ("auto", {**KEY, "WANDB_MODE": "offline"}, True, "offline"),
    ("auto", {**KEY, "WANDB_MODE": "disabled"}, True, "disabled"),
    ("auto", {**KEY, "WANDB_MODE": "dryrun"}, True, "dryrun"),  # wandb's old name for offline
    ("auto", {**KEY, "WANDB_MODE": " Offline "}, True, "offline"),  # as wandb reads it: case and spaces aside
    ("auto", {"WANDB_MODE": "online"}, False, "online"),  # asked for: no probe second-guesses it
    # no WANDB_MODE: no key is offline, a key is online only when the host answers
    ("auto", {}, True, "offline"),
    ("auto", {"WANDB_MODE": ""}, True, "offline"),  # set but empty: as if unset
    ("auto", KEY, True, "online"),
    ("auto", KEY, False, "offline"),
    # the config's own choice is taken as it is
    ("offline", {**KEY, "WANDB_MODE": "online"}, True, "offline"),
    ("online", {"WANDB_MODE": "offline"}, False, "online"),
])
def test_auto_follows_wandb_mode_then_the_key_then_the_probe(mode, env, answers, expected):
    probed = []

    def answer(url):
        probed.append(url)
        return answers

    assert wandb_mode(mode, env, answer) == expected
    # the host is asked only when nothing else decides: auto, a key, no WANDB_MODE
    assert bool(probed) == (mode == "auto" and "WANDB_API_KEY" in env and not env.get("WANDB_MODE"))


def test_the_probe_asks_the_host_in_wandb_base_url():
    probed = []
    wandb_mode("auto", {**KEY, "WANDB_BASE_URL": "https://wandb.example.org"}, lambda url: probed.append(url))
    assert probed == ["https://wandb.example.org"]
    wandb_mode("auto", KEY, lambda url: probed.append(url))
    assert probed[-1] == "https://api.wandb.ai", "the default host when WANDB_BASE_URL is unset"


def test_a_wandb_mode_wandb_does_not_know_is_refused_naming_it():
    with pytest.raises(TrackerStartError, match=r"^WANDB_MODE='offlne' is not one of online, offline"):
        wandb_mode("auto", {"WANDB_MODE": "offlne"}, lambda url: True)


def test_a_host_that_does_not_answer_is_offline_in_seconds_with_one_line_why(closed_url, caplog):
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="core.tracker"):
        assert wandb_mode("auto", {**KEY, "WANDB_BASE_URL": closed_url}) == "offline"
    assert time.monotonic() - start < 4, "a refused port answers at once; a silent host within the 3 s timeout"
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and closed_url in said[0] and "offline" in said[0]


def test_the_probe_sees_a_host_that_listens(closed_url):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert host_answers(f"http://127.0.0.1:{server.getsockname()[1]}")
    assert not host_answers(closed_url)
    assert not host_answers("not a url"), "no host: nothing to ask, never an exception"


def test_wandb_mode_offline_with_a_key_is_an_offline_run_without_network(tmp_path, monkeypatch, closed_url):
    """The real wandb, as on a cluster node: WANDB_MODE=offline and a key. Any server wandb tried would be the
    closed port (WANDB_BASE_URL), so a run that went online would fail, not stall."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", KEY["WANDB_API_KEY"])
    monkeypatch.setenv("WANDB_BASE_URL", closed_url)
    logger = {"backend": "wandb", "project": "kk", "mode": "auto"}
    start = time.monotonic()
    tracker = WandbTracker(logger, tmp_path, name="n", group=None, job_type="curriculum", run_id="run-1", config={})
    tracker.log({"train/loss": 1.0}, step=1)
    tracker.finish()
    assert time.monotonic() - start < 60, "no 90 s init timeout"
    assert [p.name.endswith("-run-1") for p in (tmp_path / "wandb").glob("offline-run-*")] == [True]


@pytest.mark.run
def test_a_wandb_run_that_cannot_start_fails_the_run(tmp_path, make_cfg, monkeypatch):
    """wandb.init raising (a key the server refuses) after run.json says running: the run is failed, not running."""
    import wandb

    from train.run.runner import run_curriculum
    from train.settings import read_settings

    def refused(**init):
        raise wandb.errors.CommError("permission denied\nmore of wandb's text")

    monkeypatch.setattr(wandb, "init", refused)
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", "eval.subsets=[2]", "logger=wandb",
                   "logger.mode=online", "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 4}]")
    run_dir = tmp_path / "run"
    with pytest.raises(TrackerStartError, match=r"^logger: wandb.init failed in mode 'online' \(CommError: "
                                                r"permission denied\); WANDB_MODE=offline"):
        run_curriculum(read_settings(cfg), run_dir)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"


def test_python_m_eval_ends_in_one_line_when_wandb_cannot_start(tmp_path, monkeypatch):
    import wandb
    from omegaconf import OmegaConf

    from eval.__main__ import eval_tracker

    def refused(**init):
        raise wandb.errors.CommError("permission denied")

    monkeypatch.setattr(wandb, "init", refused)
    cfg = OmegaConf.create({"logger": {"backend": "wandb", "project": "kk", "mode": "online"}})
    with pytest.raises(SystemExit, match=r"^logger: wandb.init failed in mode 'online' \(CommError: permission denied"):
        eval_tracker(cfg, tmp_path, "tiny", None)


# metrics.jsonl's own columns beside the trainer's log line (train/tracking.py MetricsCallback)
OUR_TAGS = {"stage", "stage_name", "level", "stage_step", "global_step", "kind"}


def wandb_records(path: Path) -> list:
    """The protobuf Records of an offline run's `.wandb` file: wandb's LevelDB-style log (a 7-byte file header, then
    32 KiB blocks of chunks, each a 7-byte header: checksum, length, type FULL 1 / FIRST 2 / MIDDLE 3 / LAST 4)."""
    data, found, pos, chunks = path.read_bytes(), [], 7, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunks, pos = chunks + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            found.append(record)
            chunks = b""
    return found


def _items(updates) -> dict:
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in updates}


SFT_THEN_GRPO = ("+curriculum=kk_ladder", "experiment=smoke", "model=tiny", "logger=wandb",
                 "curriculum.stages=[{name: sft, kind: sft, ppl: 2, steps: 1, pool: 4}, {name: a, ppl: 2, steps: 1, "
                 "pool: 4}]", "eval.subsets=[2]")


@pytest.fixture(scope="module")
def sft_then_grpo(tmp_path_factory, cache_dir):
    """The smallest smoke run through the CLI with wandb offline: one SFT step, then one GRPO step (tiny model)."""
    run_dir = tmp_path_factory.mktemp("tracked") / "run"
    done = run_cli("train", *SFT_THEN_GRPO, f"paths.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}",
                   env={"WANDB_MODE": "offline"})
    assert done.returncode == 0, done.stderr[-3000:]
    records = wandb_records(next(run_dir.glob("wandb/offline-run-*/run-*.wandb")))
    kinds = ("run", "history", "summary")
    return run_dir, {kind: [r for r in records if r.WhichOneof("record_type") == kind] for kind in kinds}


def test_a_grpo_stage_sends_trls_own_keys_and_sft_its_own(sft_then_grpo):
    run_dir, records = sft_then_grpo
    rows = [_items(r.history.item) for r in records["history"]]
    steps = {row["stage_kind"]: row for row in rows if "stage_kind" in row}
    logged = {r["stage"]: r for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "step"}
    # GRPO: what TRL's trainer logged (metrics.jsonl, less our tags), rewritten by transformers' own function
    trl = rewrite_logs({k: v for k, v in logged[2].items() if k not in OUR_TAGS})
    assert {k for k in steps["grpo"] if k.startswith("train/")} == {*trl, "train/global_step"}
    assert {"train/reward", "train/kl", "train/loss", "train/reward_std", "train/rewards/format/mean",
            "train/rewards/low_tokens/mean", "train/completions/clipped_ratio"} <= set(steps["grpo"])
    # SFT: its keys under sft/, none under train/ but the step, so its loss never shares GRPO's train/loss panel
    assert {k for k in steps["sft"] if k.startswith("sft/")} == {f"sft/{k}" for k in logged[1] if k not in OUR_TAGS}
    assert {k for k in steps["sft"] if k.startswith("train/")} == {"train/global_step"}
    assert not any(k.startswith(("train/grpo/", "train/sft/")) for row in rows for k in row)
    # the stage, its kind and the run's global step on every training row
    assert [(steps[k]["stage"], steps[k]["train/global_step"], steps[k]["_step"]) for k in ("sft", "grpo")] == [
        (1, 1, 1), (2, 2, 2)]
    # the trainer's end-of-stage scalars in the summary, as WandbCallback keeps them: bare for GRPO, sft/ for SFT
    summary = {k for r in records["summary"] for k in _items(r.summary.update)}
    assert set(SUMMARY_SCALARS) <= summary and {f"sft/{k}" for k in SUMMARY_SCALARS} <= summary
    assert not any(k in row for k in SUMMARY_SCALARS for row in rows), "no history row holds them"


def test_the_wandb_config_holds_the_reward_stack_run_json_records_and_the_stages(sft_then_grpo):
    run_dir, records = sft_then_grpo
    config = _items(records["run"][0].run.config.update)
    stack = json.loads((run_dir / "run.json").read_text())["reward_stack"]
    # smoke's probe reward beside the default's three, each by its key, weight and where the weight came from
    assert stack == [{"name": "format", "weight": 0.5, "source": "reward.weights"},
                     {"name": "answer", "weight": 2.0, "source": "reward.weights"},
                     {"name": "overlong", "weight": 0.5, "source": "reward.weights"},
                     {"name": "low_tokens", "weight": 1.0, "source": "reward.custom"}]
    assert config["reward_stack"] == stack
    assert config["stages"] == [{"index": 1, "name": "sft", "kind": "sft", "levels": "2ppl"},
                                {"index": 2, "name": "a", "kind": "grpo", "levels": "2ppl"}]
    assert config["reward"]["weights"]["format"] == 0.5, "the resolved config as before"


def test_resuming_a_finished_run_opens_no_wandb_run(sft_then_grpo, tmp_path, cache_dir):
    """A resume of a done run trains and validates nothing: it must not leave a second, empty offline run beside the
    run's one (each attempt that opens wandb adds an `offline-run-*` folder, which `wandb sync` uploads)."""
    run_dir = tmp_path / "run"
    shutil.copytree(sft_then_grpo[0], run_dir, symlinks=True)
    done = run_cli("train", *SFT_THEN_GRPO, f"paths.cache_dir={cache_dir}", f"resume={run_dir}",
                   env={"WANDB_MODE": "offline"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(list(run_dir.glob("wandb/offline-run-*"))) == 1
    assert json.loads((run_dir / "run.json").read_text())["status"] == "done"


TWO_GRPO_STAGES = ("+curriculum=kk_ladder", "experiment=smoke", "model=tiny", "logger=wandb", "limits.max_steps=3",
                   "curriculum.stages=[{name: a, ppl: 2, steps: 2, pool: 4}, {name: b, ppl: 2, steps: 3, pool: 4}]",
                   "eval.subsets=[2]")


def _history(folder: Path) -> list[dict]:
    """An offline run's history rows, read from its `.wandb` file, less wandb's own clock keys."""
    records = wandb_records(next(folder.glob("run-*.wandb")))
    rows = [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    return [{k: v for k, v in row.items() if k not in ("_timestamp", "_runtime")} for row in rows]


def _killed_in_stage_b(run_dir: Path, common: list[str]) -> None:
    """The run killed in stage b after its step 2 was logged and before its checkpoint-2 was: that step is lost past
    the last checkpoint (checkpoint-1) and trained again by the resume. Frozen once checkpoint-2's digests are
    written (the step logged before), killed, and checkpoint-2 removed: as if the kill came before it was saved."""
    trainer = run_dir / "stages" / "2-b" / "trainer"
    proc = subprocess.Popen([sys.executable, "-m", "train", *common, f"hydra.run.dir={run_dir}"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "WANDB_MODE": "offline"})
    try:
        deadline = time.time() + 300
        while not (trainer / "checkpoint-2" / "checksums.json").exists():
            assert proc.poll() is None and time.time() < deadline, "the run ended before stage b's checkpoint-2"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGSTOP)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    shutil.rmtree(trainer / "checkpoint-2")
    shutil.rmtree(trainer / "checkpoint-3", ignore_errors=True)


@pytest.mark.run
def test_an_offline_resume_replays_the_run_so_its_newest_folder_holds_every_step_once(tmp_path, cache_dir,
                                                                                       monkeypatch):
    # each attempt its own wandb service, as from a shell: not this process's (an earlier test's), which would keep
    # the killed attempt's run open and refuse the resume its id
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    run_dir = tmp_path / "run"
    common = [*TWO_GRPO_STAGES, f"paths.cache_dir={cache_dir}"]
    _killed_in_stage_b(run_dir, common)
    logged = [(r["stage"], r["global_step"]) for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "step"]
    assert logged == [(1, 1), (1, 2), (2, 3), (2, 4)], "stage b's step 2 logged, its checkpoint lost"
    first = list(run_dir.glob("wandb/offline-run-*"))
    assert len(first) == 1

    done = run_cli("train", *common, f"resume={run_dir}", env={"WANDB_MODE": "offline"})
    assert done.returncode == 0, done.stderr[-3000:]
    folders = sorted(run_dir.glob("wandb/offline-run-*"))
    assert folders[0] == first[0] and len(folders) == 2, "the killed attempt's folder is kept beside the new one"
    newest = run_dir / json.loads((run_dir / "run.json").read_text())["tracker_offline_run"]
    assert newest == folders[1]
    assert f"wandb sync {newest}" in done.stdout + done.stderr, "the run's last lines name the folder to sync"

    rows = _history(newest)
    # every step of both stages once, in order: 1-3 replayed (up to checkpoint-1), 4 (lost) and 5 trained again
    assert [(r["stage"], r["train/global_step"], r["_step"]) for r in rows if "stage_kind" in r] == [
        (1, 1, 1), (1, 2, 2), (2, 3, 3), (2, 4, 4), (2, 5, 5)]
    assert [r["_step"] for r in rows] == sorted({r["_step"] for r in rows}), "one history row a step"
    # validation after each stage and the baseline, each once: the baseline's and a's replayed, b's live
    assert [(r["_step"], r["stage"]) for r in rows if "val/2ppl/accuracy" in r] == [(0, 0), (2, 1), (5, 2)]
    # a replayed step has the keys a live one has: what the trainer logged, under the same names
    keys = [{k for k in r if not k.startswith("rollouts/")} for r in rows if "stage_kind" in r]
    assert keys[2] == keys[3], "global step 3 replayed, 4 live: stage b's steps 1 and 2"
    assert any(k.startswith("rollouts/") for k in rows[1]), "stage a's sampled rollouts replayed too"
    # and the values the killed attempt sent then, read back from its own folder (wandb wrote a step's row there
    # once the next step began; what it held at the kill is lost with it)
    earlier = {r["_step"]: r for r in _history(folders[0])}
    assert {0, 1, 2} <= set(earlier), "the killed attempt's folder holds stage a"
    for row in rows[:4]:
        if row["_step"] in earlier:
            assert {k: v for k, v in row.items() if "samples" not in k} == {
                k: v for k, v in earlier[row["_step"]].items() if "samples" not in k}

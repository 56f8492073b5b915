"""The tracker's mode and start: `logger.mode: auto` follows WANDB_MODE, probes the wandb host (3 s at most) only
with a key and no WANDB_MODE, and a wandb run that cannot start fails the run instead of leaving it running.

No test reaches outside this machine: a probed host is a port on 127.0.0.1 that nothing listens on.
"""

from __future__ import annotations

import json
import logging
import socket
import time

import pytest

from core.tracker import TrackerStartError, WandbTracker, host_answers, wandb_mode

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

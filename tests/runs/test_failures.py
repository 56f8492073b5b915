"""What error.txt keeps when several processes fail one after the other (train/failures.py): the failure that
started it. The processes themselves fail for real in tests/engines/test_distributed.py; here the order of their
records, which a real launch cannot be made to choose, is set by hand."""

from __future__ import annotations

import os
import subprocess

from core.distributed import Processes
from train.failures import killed_line, record_error, replace_follow_on

RANK_0, RANK_1 = Processes(0, 2), Processes(1, 2)


def _raised(err: BaseException) -> BaseException:
    try:
        raise err
    except BaseException as caught:  # with its traceback, as record_error is handed it
        return caught


def _lost() -> BaseException:
    return _raised(RuntimeError("[pair.cc:537] Read error [127.0.0.1]:40869: Connection reset by peer"))


def test_a_follow_on_gives_way_to_the_rank_whose_own_error_started_it(tmp_path):
    error = tmp_path / "error.txt"
    record_error(error, _lost(), RANK_0)  # rank 0 met the lost peer first
    assert error.read_text().startswith("rank 0 of 2: follow-on: lost another rank mid-collective (RuntimeError: ")
    record_error(error, _raised(ValueError("reward raised")), RANK_1)
    assert error.read_text().startswith("rank 1 of 2: ValueError: reward raised\n\nTraceback")


def test_a_follow_on_never_replaces_a_record(tmp_path):
    error = tmp_path / "error.txt"
    record_error(error, _raised(ValueError("reward raised")), RANK_1)
    record_error(error, _lost(), RANK_0)
    record_error(error, _raised(KeyError("later")), RANK_0)  # an error after the first one: the first stays
    assert error.read_text().startswith("rank 1 of 2: ValueError: reward raised\n")


def test_the_lost_rank_is_named_when_its_pid_is_gone_from_this_machine(tmp_path):
    ended = subprocess.Popen(["true"])
    ended.wait()  # a pid that no longer runs: rank 1's
    error = tmp_path / "error.txt"
    record_error(error, _lost(), RANK_0, peers=[(os.uname().nodename, os.getpid()), (os.uname().nodename, ended.pid)])
    assert error.read_text().startswith("rank 0 of 2: follow-on: lost rank 1 mid-collective (")


def test_one_process_never_calls_a_reset_connection_a_follow_on_nor_replaces_its_ranks_record(tmp_path):
    error = tmp_path / "error.txt"
    record_error(error, _lost(), Processes())  # one process: its own error, whatever it says
    assert error.read_text().startswith("Traceback")
    error.unlink()
    record_error(error, _lost(), RANK_0)
    record_error(error, _raised(RuntimeError("torchrun exited with 1")), Processes())  # the job that started the ranks
    assert error.read_text().startswith("rank 0 of 2: follow-on: ")


def test_the_signal_that_killed_a_rank_replaces_a_follow_on_but_not_a_cause(tmp_path):
    followed, caused = tmp_path / "followed.txt", tmp_path / "caused.txt"
    record_error(followed, _lost(), RANK_0)
    record_error(caused, _raised(ValueError("reward raised")), RANK_1)
    assert replace_follow_on(followed, killed_line("rank 1 of 2", 9))
    assert not replace_follow_on(caused, killed_line("rank 0 of 2", 15))
    assert followed.read_text().startswith("rank 1 of 2: killed by SIGKILL (signal 9); ")
    assert caused.read_text().startswith("rank 1 of 2: ValueError: reward raised")
    assert replace_follow_on(tmp_path / "absent.txt", "x") and (tmp_path / "absent.txt").read_text() == "x"

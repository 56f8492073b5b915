"""Drivers for kill drills: the real `python -m train`, run with one function wrapped so that the process kills
itself at an exact point, so a test hits a narrow window every time instead of by timing luck.

Run as `python -c <driver> <arg> <train's overrides>`, or as a script file under a launcher (torchrun,
`accelerate launch`), which starts every rank from it as it would start `-m train`.
"""

# Writes the final's weights to final.tmp, then dies (SIGKILL) before publishing it; the trainer's checkpoint at
# the budget is on disk. Its argument names the stage folder ("1-a") whose final is never published. With many
# processes the main one, which alone publishes, is the one that dies.
KILL_WHILE_PUBLISHING = """
import os, signal, sys
import train.stages.training

target = os.sep + sys.argv.pop(1) + os.sep
real_publish = train.stages.training.publish_final

def die_before_publishing(tmp_dir, final_dir, info):
    if target in str(tmp_dir):
        os.kill(os.getpid(), signal.SIGKILL)
    real_publish(tmp_dir, final_dir, info)

train.stages.training.publish_final = die_before_publishing
from conf.errors import run_app
from train.__main__ import _start, main
_start()
run_app(main)
"""

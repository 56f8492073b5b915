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

# After the first optimizer step of the stage named by its argument ("a"), the second rank turns its ZeRO-3 shard of
# one weight NaN, in the float32 master copy and in the partition the module runs on, as a step that diverged in
# that shard would leave them; the first rank's shard stays finite. Every other rank's check sees only its own shard.
POISON_ONE_SHARD = """
import os, sys
import torch
from deepspeed.utils import safe_get_local_fp32_param, safe_set_local_fp32_param
from transformers import TrainerCallback
import train.stages.training

target = "-" + sys.argv.pop(1) + os.sep + "trainer"
real_bind = train.stages.training.bind_to_trainer

class PoisonOneShard(TrainerCallback):
    def on_optimizer_step(self, args, state, control, model=None, **kwargs):
        if state.global_step != 0 or os.environ["RANK"] != "1" or not args.output_dir.endswith(target):
            return
        param = next(p for p in model.parameters() if p.ds_tensor.numel() > 0)
        safe_set_local_fp32_param(param, torch.full_like(safe_get_local_fp32_param(param), float("nan")))
        param.ds_tensor.data.fill_(float("nan"))

def bind_with_poison(trainer):
    trainer.add_callback(PoisonOneShard())
    real_bind(trainer)

train.stages.training.bind_to_trainer = bind_with_poison
from conf.errors import run_app
from train.__main__ import _start, main
_start()
run_app(main)
"""

"""`make gpu-check`'s parts (its entry: train/gpu_check.py): the machine, the check's config, our runner's path
measured, bare TRL's."""

"""GSM8K (grade-school math word problems; Cobbe et al. 2021) with the GRPO recipe's grader and rewards.

- `task`: sources (hub, local, the shipped sample), levels by solution steps, decontaminated pools;
- `grader`: the final ``<answer>`` block read as one number and compared exactly;
- `rewards`: the recipe's five rewards (correctness, integer, strict and soft format, XML count);
- `sample`: ``python -m curriculum.tasks.gsm8k.sample`` writes the offline sample from reasoning-gym.
"""

from curriculum.tasks.gsm8k.task import LEVELS, GSM8KTask

__all__ = ["LEVELS", "GSM8KTask"]

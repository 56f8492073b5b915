"""GSM8K (grade-school math word problems; Cobbe et al. 2021) with the GRPO recipe's grader and rewards."""

from curriculum.tasks.gsm8k.task import LEVELS, GSM8KTask

__all__ = ["LEVELS", "GSM8KTask"]

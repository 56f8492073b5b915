"""The task and the ladder: tasks behind one contract (`curriculum.tasks`), their training and validation pools,
prompts, and the stage plan with its adaptive rules."""

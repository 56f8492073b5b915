"""The task and the ladder: tasks behind one contract (`curriculum.tasks`: Knights and Knaves, GSM8K,
reasoning-gym datasets, a user's own), their training and validation pools, prompts, and the stage plan
with its adaptive rules."""

"""A run's rewards: the task's at `reward.weights`, the user's own, every call checked, the probe rewards."""

"""`python -m train`: the curriculum stage loop on TRL's GRPOTrainer."""

"""The task and the ladder: Knights-and-Knaves puzzles, data sources, prompts and the stage plan."""

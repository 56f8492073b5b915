"""The run directory as a contract between its writers (`train/`) and its readers (`eval/`, the report); plain
Python: reading a run needs neither torch nor the trainer."""

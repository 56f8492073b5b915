"""The run directory as a contract between its writers (`train/`) and its readers (`eval/`, the report): its
layout, the files that stay inside it, the lock, checkpoint digests, published finals, run.json's records and
the state machine they follow, and config.yaml's checks. Plain Python: reading a run needs neither torch nor
the trainer."""

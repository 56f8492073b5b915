"""`python -m eval.report`: see `eval.report.cli`."""

from eval.report.cli import main

main()

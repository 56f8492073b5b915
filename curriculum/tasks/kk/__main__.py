"""Generate Knights-and-Knaves puzzle files, or check the solutions stored in them.

    python -m curriculum.tasks.kk generate --ppl 6 -n 1000 --seed 0 -o puzzles.jsonl
    python -m curriculum.tasks.kk solve puzzles.jsonl      # exit 1 if any stored solution is wrong
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from curriculum.tasks.kk.generator import generate
from curriculum.tasks.kk.sources import located_records
from curriculum.tasks.kk.statements import solve


def _role_pair(text: str):
    if text == "random":
        return text
    pair = tuple(part.strip() for part in text.split(","))
    if len(pair) != 2 or any(len(part.split()) != 2 for part in pair):
        raise argparse.ArgumentTypeError(f'expected "random" or "a saint,a sinner", got {text!r}')
    return pair


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m curriculum.tasks.kk", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("generate", help="write unique-solution puzzles as K&K jsonl records")
    make.add_argument("--ppl", type=int, required=True, help="people per puzzle (2..20)")
    make.add_argument("-n", type=int, required=True, help="number of puzzles (2 people: at most 399 exist)")
    make.add_argument("--seed", type=int, default=0, help="same seed, same puzzles (default 0)")
    make.add_argument("--depth", type=int, default=2, help="2: one operator (default); 1: bare claims")
    make.add_argument("--width", type=int, default=2, help="most operands of and/or (default 2)")
    make.add_argument("--role-pair", type=_role_pair, default=None,
                      help='a pair like "a saint,a sinner", or "random": a published pair per puzzle')
    make.add_argument("-o", "--output", type=Path, default=None, help="jsonl file (default: stdout)")
    check = commands.add_parser("solve", help="check each record's stored solution against the solver")
    check.add_argument("files", type=Path, nargs="+", help=".jsonl or .parquet files of K&K records")
    return parser


def _generate(args: argparse.Namespace) -> int:
    records = generate(args.ppl, args.n, args.seed, depth=args.depth, width=args.width, role_pair=args.role_pair)
    lines = "".join(json.dumps(record) + "\n" for record in records)
    if args.output is None:
        sys.stdout.write(lines)
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(lines, encoding="utf-8")
        print(f"wrote {len(records)} {args.ppl}-person puzzles to {args.output}", file=sys.stderr)
    return 0


def _check(files: list[Path]) -> int:
    checked = disagree = 0
    for path in files:
        for where, record in located_records(path, check_solutions=False):
            checked += 1
            found = solve(record["statements"])
            if found != [tuple(record["solution"])]:
                disagree += 1
                print(f"{where}: index {record['index']}: stored {record['solution']}, solver finds "
                      f"{[list(solution) for solution in found]}")
    print(f"checked {checked} records: {disagree} disagree with the solver or lack exactly one solution")
    return 1 if disagree else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _generate(args) if args.command == "generate" else _check(args.files)
    except (ValueError, OSError) as exc:  # bad arguments or data: one clear line, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

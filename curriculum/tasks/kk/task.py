"""Knights and Knaves as a task (`KKTask`): levels "2ppl".."8ppl", records from `sources.load_records` (columns
names, solution, ppl; one problem per `canonical_key`), supervised targets, what validation rows and samples add
and how the report shows them (`REPORT`). The grader is `grading/`, the rewards `rewards.py`."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

from core.checks import ConfigError, is_int
from core.stats import rounded_mean
from curriculum.tasks.base import Rate, Task, TaskRecord, TaskReport, check_split, disjoint
from curriculum.tasks.kk.grading.grader import FORMATS, Grade, check_reasoning, grade, lenient_grade
from curriculum.tasks.kk.rewards import reward_components
from curriculum.tasks.kk.sources import HUB_ID, KNOWN_PPL, SOURCES, iter_records, load_records
from curriculum.tasks.kk.statements import canonical_key

LEVELS = tuple(f"{ppl}ppl" for ppl in KNOWN_PPL)
LENIENT_NOTE = ("Strict accuracy above is the reward's verdict and the headline. The lenient one reads an answer given "
                "without tags by its last lines (after any reasoning block), with the same refusals of hedges, both "
                "roles and invented people: an instruct model that answers in prose scores here, not above.")
#: puzzles distinct up to renaming, exact accuracy (every person right) with chance at 1/2^n, the lenient reading
#: beside it, the reasoning rates, and the samples worth reading
REPORT = TaskReport(
    record="puzzle",
    distinct="distinct puzzles up to renaming",
    pool_note="validation pools hold no two puzzles equal up to renaming the people",
    accuracy="exact: every person right",
    level_column="ppl",
    level_word="",  # "2ppl" says it: two people
    rates=(
        Rate("lenient_accuracy", "lenient", beside_accuracy=True, header="lenient %",
             title="Validation lenient accuracy (an untagged answer read by its final conclusion)",
             caption="an untagged final answer counts", note=LENIENT_NOTE),
        Rate("person_accuracy", "person accuracy"),
        Rate("reasoning_agrees_rate", "reasoning agrees", header="reasoning\nagrees %",
             title="Reasoning that agrees with the answer (share of completions whose reasoning settles at least "
                   "one person)",
             caption="of those whose reasoning settles someone",
             # rows from before `with_settling_reasoning` counted agreement over every completion with reasoning
             counted=("with_settling_reasoning", "with_reasoning")),
        Rate("reasoning_settles_nobody", "settles nobody", header="settles\nnobody %",
             title="Reasoning that settles nobody (share of completions with reasoning)",
             caption="of those with reasoning", counted=("with_reasoning",)),
        Rate("correct_but_disagrees", "right but disagreeing",
             title="Right answers whose reasoning says otherwise (share of all completions)"),
        Rate("invented_name_rate", "invented name", header="invented\nname %",
             title="Completions naming a person not in the puzzle (share of all completions)"),
    ),
    picks=(("reasoning disagrees with its answer", "reasoning_disagrees"), ("names an invented person", "invented")),
    facts=(("people right", "people_right"), ("lenient", "lenient_verdict"), ("invented", "invented")),
    sample_columns=("lenient_correct", "reasoning_agrees", "invented"),
    format_reward="format",
    chance={f"{n}ppl": 0.5 ** n for n in KNOWN_PPL},
    chance_note="chance for n people, 1/2^n (a guess of every role)",
)


def ppl_of_level(level: str) -> int:
    """3 for "3ppl".

    >>> ppl_of_level("3ppl")
    3
    """
    return int(level.removesuffix("ppl"))


def kk_record(record: Mapping) -> TaskRecord:
    """A published K&K record as a TaskRecord: id "<n>ppl-<index>", the quiz, names/solution/ppl columns."""
    ppl = len(record["names"])
    return TaskRecord(id=f"{ppl}ppl-{record['index']}", level=f"{ppl}ppl", question=record["quiz"],
                      columns={"names": list(record["names"]), "solution": [bool(x) for x in record["solution"]],
                               "ppl": ppl},
                      source=dict(record))


def reference_response(record: Mapping, fmt: str) -> str:
    """The completion an SFT stage trains on in format `fmt`: the published chain of thought, then the answer.

    >>> rec = {"cot_head": "Think.", "cot_repeat_steps": ["Step."], "cot_foot": "Done.",
    ...        "solution_text_format": "(1) Zoey is a knave"}
    >>> reference_response(rec, "think_answer")
    '<think>Think. Step. Done.</think>\\n<answer>\\n(1) Zoey is a knave\\n</answer>'
    """
    answer = f"<answer>\n{record['solution_text_format']}\n</answer>"
    thought = " ".join([record["cot_head"], *record["cot_repeat_steps"], record["cot_foot"]])
    responses = {"answer_only": answer, "think_answer": f"<think>{thought}</think>\n{answer}",
                 "logic_rl": f"{thought}</think>\n{answer}"}  # logic_rl's prompt pre-fills <think>
    if fmt not in responses:
        raise ValueError(f"prompt.fmt: no reference response for format {fmt!r}")
    return responses[fmt]


def roles_text(names: Sequence[str], roles: Sequence[bool | None]) -> str:
    """ "Zoey knight, Oliver knave" from parallel names and roles (None: undecided).

    >>> roles_text(["Zoey", "Oliver"], [True, None])
    'Zoey knight, Oliver ?'
    """
    words = {True: "knight", False: "knave", None: "?"}
    return ", ".join(f"{name} {words[role]}" for name, role in zip(names, roles, strict=True))


class KKTask(Task):
    """K&K puzzles of 2..8 people, graded at answer format `fmt` (the prompt's)."""

    name = "kk"
    report = REPORT
    always_rewarded = ("answer",)  # accuracy is logged (rewards/answer/mean) whatever its weight
    formats = FORMATS
    supervised = True
    metric_columns = ("lenient_accuracy", "person_accuracy", "reasoning_agrees_rate", "reasoning_settles_nobody",
                      "correct_but_disagrees", "invented_name_rate", "with_reasoning", "with_settling_reasoning")
    columns = ("names", "solution", "ppl")
    levels = LEVELS
    validation_levels = LEVELS[:-1]  # 8ppl only where eval.subsets names it
    reward_functions = staticmethod(reward_components)  # format, think, answer, partial, overlong, tiered, ...

    def __init__(self, source: str = "generated", path: str | None = None, hub_id: str = HUB_ID,
                 fmt: str = "think_answer"):
        if source not in SOURCES:
            raise ConfigError(f"task.source: {source!r} is not one of {', '.join(SOURCES)}")
        # conf/task/kk.yaml takes its source from the data group, where a user sets it
        if source == "local" and (path is None or not Path(str(path)).is_dir()):
            raise ConfigError(f"data.path: {path!r} is not a folder (needed by data.source=local)")
        self.source, self.path, self.hub_id, self.fmt = source, path, hub_id, fmt

    def records(self, level: str, split: str, *, n: int | None = None, seed: int = 0) -> list[TaskRecord]:
        """`load_records` for the level's ppl, as TaskRecords.

        >>> [r.id for r in KKTask().records("3ppl", "test", n=2, seed=1)]
        ['3ppl-0', '3ppl-1']
        """
        self.check_level(level)
        loaded = load_records(self.source, ppl_of_level(level), check_split(split), n=n, seed=seed,
                              path=self.path, hub_id=self.hub_id)
        return [kk_record(record) for record in loaded]

    def content_key(self, record: TaskRecord) -> Hashable:
        """The puzzle up to renaming and reordering its people: the default 2ppl validation pool (`eval.n` 100,
        `eval.seed` 1234) holds 63 puzzles, since only 95 exist up to renaming.

        >>> len(KKTask().validation_records("2ppl", 100, 1234))
        63
        >>> train = KKTask().records("2ppl", "train", n=50)
        >>> kept, removed = disjoint(train, train[:10], KKTask().content_key)
        >>> len(kept), removed  # 2 more than the 10 shared: the same puzzles with the people swapped
        (38, 12)
        """
        return canonical_key(record.source)

    def level_of(self, value, key: str) -> str:
        """A people count (3, "3") or a level key ("3ppl") as the level key.

        >>> KKTask().level_of(3, "ppl"), KKTask().level_of("4ppl", "level")
        ('3ppl', '4ppl')
        """
        text = str(value).removesuffix("ppl") if isinstance(value, str) or is_int(value) else ""
        if not text.isdigit():
            raise ConfigError(f"{key}: {value!r} is not a number of people")
        if int(text) not in KNOWN_PPL:
            raise ConfigError(f"{key}: unknown ppl {int(text)}; "
                              f"puzzles exist for {KNOWN_PPL.start}..{KNOWN_PPL.stop - 1}")
        return f"{int(text)}ppl"

    def training_records(self, level: str, want: int, held_out, *, seed: int,
                         spare: int) -> tuple[list[TaskRecord], int]:
        """Generated puzzles as any task's; a file is read only as far as its first `want` puzzles not held out."""
        if self.source == "generated":
            return super().training_records(level, want, held_out, seed=seed, spare=spare)
        pool = iter_records(self.source, ppl_of_level(self.check_level(level)), "train", seed=seed, path=self.path,
                            hub_id=self.hub_id)
        return disjoint(map(kk_record, pool), held_out, self.content_key, limit=want)

    def grade(self, completion, columns: Mapping[str, Any]) -> Grade:
        return grade(completion, columns["names"], columns["solution"], fmt=self.fmt)

    def check_format(self, fmt: str) -> None:
        if fmt not in FORMATS:
            raise ConfigError(f"prompt.fmt: {fmt} is not a K&K answer format ({', '.join(FORMATS)}); "
                              "a GSM8K or reasoning-gym prompt needs its task: task=gsm8k or task=reasoning_gym")

    def sft_target(self, record: TaskRecord, fmt: str) -> str:
        return reference_response(record.source, fmt)

    def level_columns(self, level: str) -> dict[str, Any]:
        return {"ppl": ppl_of_level(level)}

    def sample_fields(self, record: TaskRecord, text: str, g: Grade) -> dict[str, Any]:  # type: ignore[override]  # a task is handed its own grades
        """One graded completion's K&K fields (agreement only where the reasoning settles someone: else no evidence).

        >>> task, text = KKTask(), "<think>Zoey lies.</think><answer>Zoey is a knight</answer>"
        >>> record = TaskRecord("1", "1ppl", "", {"names": ["Zoey"], "solution": [False]})
        >>> f = task.sample_fields(record, text, task.grade(text, record.columns))
        >>> f["reasoning_disagrees"], f["answer"], f["reference"], f["people_right"]
        (True, 'Zoey knight', 'Zoey knave', '0/1')
        >>> bare = "<answer>Zoey is a knave</answer>"
        >>> f = task.sample_fields(record, bare, task.grade(bare, record.columns))
        >>> f["has_reasoning"], f["reasoning_agrees"] is None
        (False, True)
        """
        names, solution = record.columns["names"], record.columns["solution"]
        reasoning = check_reasoning(text, names, g.assignment, self.fmt)
        lenient = lenient_grade(text, names, solution, g)
        return {
            "n_right": g.n_right, "n_people": len(names), "people_right": f"{g.n_right}/{len(names)}",
            "assignment": g.assignment, "solution": list(solution), "names": list(names),
            "reference": roles_text(names, solution),
            "answer": roles_text(names, [g.assignment.get(n) for n in names]) if g.answered else None,
            "has_reasoning": reasoning.has_reasoning, "reasoning_claims": reasoning.settled,
            "reasoning_settles": reasoning.settles,
            "reasoning_agrees": reasoning.agrees if reasoning.settles else None,
            "reasoning_disagrees": reasoning.settles and g.answered and not reasoning.agrees,
            "invented": sorted({*reasoning.invented, *g.invented}), "lenient_correct": lenient.correct,
            "lenient_assignment": lenient.assignment, "lenient_reason": lenient.reason,
            "lenient_verdict": "right" if lenient.correct else f"wrong ({lenient.reason})" if lenient.reason
            else "wrong",
        }

    def subset_metrics(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """A subset's K&K columns: agreement over reasoning that settles someone, settling nobody over reasoning.

        >>> rows = [{"correct": True, "lenient_correct": True, "n_right": 2, "n_people": 2, "has_reasoning": True,
        ...          "reasoning_settles": True, "reasoning_agrees": False, "invented": []},
        ...         {"correct": False, "lenient_correct": True, "n_right": 1, "n_people": 2, "has_reasoning": False,
        ...          "reasoning_settles": False, "reasoning_agrees": False, "invented": ["liam"]}]
        >>> m = KKTask().subset_metrics(rows)
        >>> m["lenient_accuracy"], m["person_accuracy"], m["correct_but_disagrees"], m["invented_name_rate"]
        (1.0, 0.75, 0.5, 0.5)
        """
        settling = [s for s in samples if s["reasoning_settles"]]
        return {
            "lenient_accuracy": rounded_mean(float(s["lenient_correct"]) for s in samples),
            "person_accuracy": rounded_mean(s["n_right"] / s["n_people"] for s in samples if s["n_people"]),
            "reasoning_agrees_rate": rounded_mean(float(s["reasoning_agrees"]) for s in settling),
            "reasoning_settles_nobody": rounded_mean(float(not s["reasoning_settles"]) for s in samples
                                                     if s["has_reasoning"]),
            "correct_but_disagrees": rounded_mean(float(s["correct"] and s["reasoning_settles"]
                                                        and not s["reasoning_agrees"]) for s in samples),
            "invented_name_rate": rounded_mean(float(bool(s["invented"])) for s in samples),
            "with_reasoning": sum(bool(s["has_reasoning"]) for s in samples),
            "with_settling_reasoning": len(settling),
        }

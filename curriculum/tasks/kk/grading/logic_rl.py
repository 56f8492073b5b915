"""Logic-RL's K&K reward (`reward=logic_rl_strict`): a port of Unakar/Logic-RL `verl/utils/reward_score/kk.py`
(`compute_score`), its regexes, structure check and scores kept, its prints left out, scoring the decoded prompt
then response as verl does (so it takes TRL's `prompts`). Format +1 when `<think>`, `</think>`, `<answer>`,
`</answer>` are each once in the response, in order (the pre-filled `<think>` is in it), else -1; answer 2 when every
"<name> is a knight|knave" matches, -1.5 when one does not, -2 when the roles are not said once per person or the
format failed: far stricter than the grader. Unlike verl, TRL decodes without special tokens.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from curriculum.tasks.kk.english import solution_text_format

RESPONSE_HEADERS = ("Assistant:", "<|im_start|>assistant")
STRUCTURE_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
FORMAT_SCORE, ANSWER_RIGHT, ANSWER_WRONG, ANSWER_UNPARSED = 1.0, 2.0, -1.5, -2.0


def extract_solution(solution_str: str) -> tuple[str | None, str]:
    """(the last answer block's text or None, the response)."""
    for header in RESPONSE_HEADERS:
        if header in solution_str:
            processed = solution_str.split(header, 1)[1]
            break
    else:
        return None, solution_str
    matches = list(re.finditer(r"<answer>(.*?)</answer>", processed, re.DOTALL))
    if not matches:
        return None, processed
    return matches[-1].group(1).strip(), processed


def parse_solution_text_format(solution_text: str) -> dict[str, str]:
    """{name: "knight" | "knave"}, one per line of a record's `solution_text_format`.

    >>> parse_solution_text_format("(1) Zoey is a knight\\n(2) Ava is a knave")
    {'Zoey': 'knight', 'Ava': 'knave'}
    """
    status = {}
    for line in solution_text.split("\n"):
        match = re.search(r"\b([A-Za-z]+)\b.*?\b(knight|knave)\b", line.strip(), re.IGNORECASE)
        if match:
            status[match.group(1)] = match.group(2).lower()
    return status


def parse_model_answer(answer_text: str, expected_names: Sequence[str]) -> dict[str, str] | None:
    """{name: role} when the answer says a role once per person, each as "<name> is a <role>"; else None."""
    lowered = answer_text.lower()
    if lowered.count("knight") + lowered.count("knave") != len(expected_names):
        return None
    status = {}
    for name in expected_names:
        match = re.search(rf"\b{re.escape(name)}\b\s+is\s+a\s+\b(knight|knave)\b", answer_text, re.IGNORECASE)
        if not match:
            return None
        status[name] = match.group(1).lower()
    return status


def validate_response_structure(processed_str: str) -> bool:
    """Each structure tag exactly once, in the order think, /think, answer, /answer."""
    if any(processed_str.count(tag) != 1 for tag in STRUCTURE_TAGS):
        return False
    positions = [processed_str.find(tag) for tag in STRUCTURE_TAGS]
    return positions == sorted(positions)


def compute_score(solution_str: str, solution_text_format: str) -> float:
    """Logic-RL's score of one decoded prompt + response: format (+1 / -1) plus answer (2 / -1.5 / -2)."""
    truth = parse_solution_text_format(solution_text_format)
    answer_text, processed = extract_solution(solution_str)
    format_ok = validate_response_structure(processed)
    answer = ANSWER_UNPARSED
    if format_ok and answer_text:
        predicted = parse_model_answer(answer_text, list(truth))
        if predicted:
            answer = ANSWER_RIGHT if predicted == truth else ANSWER_WRONG
    return (FORMAT_SCORE if format_ok else -FORMAT_SCORE) + answer


def logic_rl_scores(prompts: Sequence[str], completions: Sequence[str], names: Sequence[Sequence[str]],
                    solution: Sequence[Sequence[bool]]) -> list[float]:
    """Logic-RL's score of each prompt + completion against its puzzle's solution.

    >>> prompt = "<|im_start|>user\\nZoey and Ava ...<|im_end|>\\n<|im_start|>assistant\\n<think>"
    >>> logic_rl_scores([prompt] * 4, [
    ...     "Both tell the truth.</think><answer>(1) Zoey is a knight\\n(2) Ava is a knight</answer>",
    ...     "Both lie.</think><answer>(1) Zoey is a knave\\n(2) Ava is a knave</answer>",
    ...     "Both tell the truth.</think><answer>Knights: Zoey, Ava</answer>",
    ...     "<think>Both tell the truth.</think><answer>(1) Zoey is a knight\\n(2) Ava is a knight</answer>",
    ... ], [["Zoey", "Ava"]] * 4, [[True, True]] * 4)
    [3.0, -0.5, -1.0, -3.0]
    """
    return [compute_score(prompt + completion, solution_text_format(people, roles))
            for prompt, completion, people, roles in zip(prompts, completions, names, solution, strict=True)]

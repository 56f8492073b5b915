"""Table-driven tests of `curriculum.tasks.kk.grading.grader.grade`: every phrasing it must read and every refusal.

Each case: (fmt, completion, names, solution, correct, format_ok, reason substring or None), with a
comment saying why it should pass or fail. Most answers are wrapped by `T(...)` (a well-formed
think_answer completion), so format_ok is True unless the case is about format.
"""

from __future__ import annotations

import pytest

from curriculum.tasks.kk.grading.grader import Grade, completion_text, grade


def T(answer: str) -> str:
    """A well-formed think_answer completion with `answer` in the answer block."""
    return f"<think>Let me check each statement.</think>\n<answer>\n{answer}\n</answer>"


P2, S2 = ["Zoey", "Oliver"], [False, True]  # Zoey knave, Oliver knight (the K&K 2ppl test record 0)
P3, S3 = ["Ava", "Avery", "Mia"], [True, False, True]  # names that contain one another
P7 = ["Amelia", "Mia", "Ella", "Isabella", "Bella", "Liam", "William"]
S7 = [True, False, True, False, False, True, True]
TT, FF = [True, True], [False, False]
OK, NO = True, False
TA, AO, LR = "think_answer", "answer_only", "logic_rl"

CASES = [
    # --- 2 people: phrasings that must read as correct -------------------------------------------
    # the published solution_text rendering
    (TA, T("Zoey is a knave, and Oliver is a knight."), P2, S2, OK, OK, None),
    # the published solution_text_format rendering
    (TA, T("(1) Zoey is a knave\n(2) Oliver is a knight"), P2, S2, OK, OK, None),
    # people in another order than the puzzle's
    (TA, T("Oliver is a knight. Zoey is a knave."), P2, S2, OK, OK, None),
    # "X: role" lines
    (TA, T("Zoey: knave\nOliver: knight"), P2, S2, OK, OK, None),
    # markdown bullets, bold names, "X - Role" with capitals
    (TA, T("- **Zoey** - Knave\n- **Oliver** - Knight"), P2, S2, OK, OK, None),
    # "X = role" separated by a comma
    (TA, T("Zoey = knave, Oliver = knight"), P2, S2, OK, OK, None),
    # role-first lists: "Knights: ...; Knaves: ..."
    (TA, T("Knights: Oliver. Knaves: Zoey"), P2, S2, OK, OK, None),
    # "the knight is X and the knave is Y"
    (TA, T("The knight is Oliver and the knave is Zoey."), P2, S2, OK, OK, None),
    # negation: "not a knight" means knave, "not a knave" means knight
    (TA, T("Zoey is not a knight; Oliver is not a knave."), P2, S2, OK, OK, None),
    # contractions of the negation
    (TA, T("Zoey isn't a knight, Oliver isn't a knave."), P2, S2, OK, OK, None),
    # truth-telling and lying words, a parenthetical role
    (TA, T("Oliver is telling the truth (a knight), and Zoey is a liar."), P2, S2, OK, OK, None),
    # verbs instead of role nouns
    (TA, T("Zoey lies and Oliver tells the truth."), P2, S2, OK, OK, None),
    # all capitals
    (TA, T("ZOEY IS A KNAVE. OLIVER IS A KNIGHT."), P2, S2, OK, OK, None),
    # "1." enumerators
    (TA, T("1. Zoey is a knave\n2. Oliver is a knight"), P2, S2, OK, OK, None),
    # "*" bullets with _ and * emphasis
    (TA, T("* _Zoey_ is a *knave*\n* Oliver is a **knight**"), P2, S2, OK, OK, None),
    # a markdown table
    (TA, T("| Name | Role |\n|---|---|\n| Zoey | Knave |\n| Oliver | Knight |"), P2, S2, OK, OK, None),
    # a heading followed by bullet lines
    (TA, T("Knights:\n- Oliver\nKnaves:\n- Zoey"), P2, S2, OK, OK, None),
    # collective: "Both A and B are knights"
    (TA, T("Both Zoey and Oliver are knights."), P2, TT, OK, OK, None),
    # collective without names: "Both are knaves" applies to everyone
    (TA, T("Both are knaves."), P2, FF, OK, OK, None),
    # "Everyone is a knight"
    (TA, T("Everyone is a knight."), P2, TT, OK, OK, None),
    # "All of them are knaves"
    (TA, T("All of them are knaves."), P2, FF, OK, OK, None),
    # "Neither A nor B is a knight": one negation over both names
    (TA, T("Neither Zoey nor Oliver is a knight."), P2, FF, OK, OK, None),
    # "neither ... nor" across commas
    (TA, T("Neither Zoey, nor Oliver, is a knight."), P2, FF, OK, OK, None),
    # a negation in an aside does not flip the next clause
    (TA, T("Zoey is a knave (no doubt), Oliver is a knight."), P2, S2, OK, OK, None),
    # "Neither is a knave": negated quantifier
    (TA, T("Neither of them is a knave."), P2, TT, OK, OK, None),
    # "the rest": Oliver is the only one left
    (TA, T("Zoey is a knave; the rest are knights."), P2, S2, OK, OK, None),
    # "(1) ... (2) ..." on one line
    (TA, T("(1) Zoey is a knave (2) Oliver is a knight"), P2, S2, OK, OK, None),
    # explanation words that are not roles do no harm
    (TA, T("Zoey is a knave because her claim is false, so Oliver is a knight."), P2, S2, OK, OK, None),
    # reported speech in an explanation is not a claim about roles
    (TA, T("Oliver is a knight and Zoey is a knave. Zoey's statement that Oliver is not a knight is false."),
     P2, S2, OK, OK, None),
    # ... and a reported clause ends at its clause break
    (TA, T("Zoey claims to be a knight but is a knave, and Oliver is a knight."), P2, S2, OK, OK, None),
    # --- 2 people: refusals ---------------------------------------------------------------------------
    # a wrong role is wrong (parsed fine)
    (TA, T("Zoey is a knave, and Oliver is a knave."), P2, S2, NO, OK, None),
    # a person left out
    (TA, T("Zoey is a knave."), P2, S2, NO, OK, "Oliver missing"),
    # a person given both roles in different sentences
    (TA, T("Zoey is a knave. Oliver is a knight. Actually Zoey is a knight."), P2, S2, NO, OK,
     "Zoey given both roles"),
    # both roles in one list: "Knights: Zoey, Oliver. Knaves: Zoey"
    (TA, T("Knights: Zoey, Oliver. Knaves: Zoey"), P2, S2, NO, OK, "Zoey given both roles"),
    # hedged: "X is a knight or a knave"
    (TA, T("Zoey is a knight or a knave. Oliver is a knight."), P2, S2, NO, OK, "Zoey hedged"),
    # hedged: "might be"
    (TA, T("Zoey might be a knave. Oliver is a knight."), P2, S2, NO, OK, "Zoey hedged"),
    # hedged: two alternatives joined by "or"
    (TA, T("Zoey is a knave and Oliver is a knight, or Zoey is a knight and Oliver is a knave."),
     P2, S2, NO, OK, "hedged"),
    # hedged: "either ... or ..."
    (TA, T("Either Zoey is a knave and Oliver a knight, or the reverse."), P2, S2, NO, OK, "hedged"),
    # declines: "cannot determine"
    (TA, T("I cannot determine who is a knight."), P2, S2, NO, OK, "cannot be determined"),
    # declines: "impossible to determine"
    (TA, T("It is impossible to determine their identities."), P2, S2, NO, OK, "cannot be determined"),
    # declines: "not enough information"
    (TA, T("There is not enough information."), P2, S2, NO, OK, "cannot be determined"),
    # "cannot be a knave" is a negation, not a refusal: Oliver is a knight
    (TA, T("Zoey is a knave, and Oliver cannot be a knave."), P2, S2, OK, OK, None),
    # the answer only inside <think> is no answer
    (TA, "<think>So <answer>Zoey is a knave, Oliver is a knight</answer></think>", P2, S2, NO, NO,
     "answer only inside <think>"),
    # an unclosed answer block is no answer
    (TA, "<think>x</think><answer>Zoey is a knave, and Oliver is a knight.", P2, S2, NO, NO,
     "no <answer> block"),
    # no answer block at all, even with the right words
    (TA, "<think>x</think>Zoey is a knave, and Oliver is a knight.", P2, S2, NO, NO, "no <answer> block"),
    # two answer blocks that disagree are wrong (even though the last one is right)
    (TA, "<think>x</think><answer>Zoey is a knight, Oliver is a knave</answer>"
     "<answer>Zoey is a knave, Oliver is a knight</answer>", P2, S2, NO, NO, "answer blocks disagree"),
    # two blocks that agree are right, but the format (each tag once) fails
    (TA, "<think>x</think><answer>Zoey is a knave</answer><answer>Zoey is a knave, Oliver is a "
     "knight</answer>", P2, S2, OK, NO, "format"),
    # the final block is the answer: the think block's guess does not count
    (TA, "<think>Maybe <answer>Zoey is a knight</answer>?</think><answer>Zoey is a knave, Oliver is "
     "a knight</answer>", P2, S2, OK, NO, "format"),
    # --- format ------------------------------------------------------------------------------------------
    # text after </answer> breaks the strict format, the answer is still right
    (TA, T("Zoey is a knave, Oliver is a knight.") + " Hope this helps!", P2, S2, OK, NO,
     "text after </answer>"),
    # whitespace after </answer> is fine
    (TA, T("Zoey is a knave, Oliver is a knight.") + "\n\n  ", P2, S2, OK, OK, None),
    # think_answer without a think block fails the format
    (TA, "<answer>Zoey is a knave, Oliver is a knight.</answer>", P2, S2, OK, NO, "format"),
    # answer before think: out of order
    (TA, "<answer>Zoey is a knave, Oliver is a knight.</answer><think>x</think>", P2, S2, OK, NO,
     "format"),
    # answer_only: just the block
    (AO, "<answer>Zoey is a knave, Oliver is a knight.</answer>", P2, S2, OK, OK, None),
    # answer_only with a think block is not the answer_only format
    (AO, T("Zoey is a knave, Oliver is a knight."), P2, S2, OK, NO, "format"),
    # logic_rl: the prompt pre-fills <think>, the completion closes it
    (LR, "Zoey lies.</think><answer>(1) Zoey is a knave\n(2) Oliver is a knight</answer>", P2, S2, OK, OK,
     None),
    # logic_rl: a second <think> from the model is a format failure (as in Logic-RL)
    (LR, T("(1) Zoey is a knave\n(2) Oliver is a knight"), P2, S2, OK, NO, "format"),
    # logic_rl: an answer before </think> is still inside the pre-filled think block
    (LR, "So <answer>Zoey is a knave, Oliver is a knight</answer></think>", P2, S2, NO, NO,
     "answer only inside <think>"),
    # conversational completion (TRL's chat form)
    (TA, [{"role": "assistant", "content": T("Zoey is a knave, Oliver is a knight.")}], P2, S2, OK, OK,
     None),
    # --- 3 people (Ava / Avery / Mia) ----------------------------------------------------------------------
    # published solution_text for 3+: commas and a final ", and"
    (TA, T("Ava is a knight, Avery is a knave, and Mia is a knight."), P3, S3, OK, OK, None),
    # published solution_text_format
    (TA, T("(1) Ava is a knight\n(2) Avery is a knave\n(3) Mia is a knight"), P3, S3, OK, OK, None),
    # Avery first: "Avery" must not also set Ava
    (TA, T("Avery is a knave, Ava is a knight, Mia is a knight."), P3, S3, OK, OK, None),
    # collective "A and B are knights"
    (TA, T("Ava and Mia are knights, Avery is a knave."), P3, S3, OK, OK, None),
    # "Knights: A, B. Knave: C"
    (TA, T("Knights: Ava, Mia. Knave: Avery"), P3, S3, OK, OK, None),
    # "Knights: A and B; Knaves: C"
    (TA, T("Knights: Ava and Mia; Knaves: Avery"), P3, S3, OK, OK, None),
    # "The knights are A and C. The knave is B."
    (TA, T("The knights are Ava and Mia. The knave is Avery."), P3, S3, OK, OK, None),
    # "the other two"
    (TA, T("Avery is a knave; the other two are knights."), P3, S3, OK, OK, None),
    # "everyone else"
    (TA, T("Avery is a knave. Everyone else is a knight."), P3, S3, OK, OK, None),
    # role-first list followed by a name-first clause in the same sentence
    (TA, T("The knights are Ava and Mia, and Avery is a knave."), P3, S3, OK, OK, None),
    # "A, B, and C are all knights"
    (TA, T("Ava, Avery, and Mia are all knights."), P3, [True] * 3, OK, OK, None),
    # "All three are knights"
    (TA, T("All three are knights."), P3, [True] * 3, OK, OK, None),
    # the same words against a different solution: parsed, and wrong
    (TA, T("All three are knights."), P3, S3, NO, OK, None),
    # Mia left out ("Amelia"-style substrings are not Mia)
    (TA, T("Ava is a knight, Avery is a knave."), P3, S3, NO, OK, "Mia missing"),
    # Mia hedged at the end of the list
    (TA, T("Ava is a knight, Avery is a knave, and Mia is a knight or a knave."), P3, S3, NO, OK,
     "Mia hedged"),
    # Avery contradicted later in the same block
    (TA, T("Ava is a knight, Avery is a knave, Mia is a knight, and Avery is a knight."), P3, S3, NO,
     OK, "Avery given both roles"),
    # --- 7 people (Amelia / Mia, Ella / Isabella / Bella, Liam / William) --------------------------------
    # published solution_text
    (TA, T("Amelia is a knight, Mia is a knave, Ella is a knight, Isabella is a knave, Bella is a "
           "knave, Liam is a knight, and William is a knight."), P7, S7, OK, OK, None),
    # published solution_text_format, shuffled
    (TA, T("(1) William is a knight\n(2) Bella is a knave\n(3) Amelia is a knight\n(4) Liam is a "
           "knight\n(5) Isabella is a knave\n(6) Mia is a knave\n(7) Ella is a knight"), P7, S7, OK, OK,
     None),
    # role-first lists
    (TA, T("Knights: Amelia, Ella, Liam and William. Knaves: Mia, Isabella and Bella."), P7, S7, OK, OK,
     None),
    # name-first collective lists
    (TA, T("Amelia, Ella, Liam, and William are knights; Mia, Isabella, and Bella are knaves."), P7, S7,
     OK, OK, None),
    # "all the others"
    (TA, T("Mia, Isabella and Bella are knaves; all the others are knights."), P7, S7, OK, OK, None),
    # William left out: "Liam" must not match inside "William"
    (TA, T("Amelia is a knight, Mia is a knave, Ella is a knight, Isabella is a knave, Bella is a "
           "knave, Liam is a knight."), P7, S7, NO, OK, "William missing"),
    # Bella hedged with "might"
    (TA, T("Knights: Amelia, Ella, Liam, William. Knaves: Mia, Isabella. Bella might be a knave."), P7,
     S7, NO, OK, "Bella hedged"),
    # one role flipped (Ella)
    (TA, T("Amelia is a knight, Mia is a knave, Ella is a knave, Isabella is a knave, Bella is a "
           "knave, Liam is a knight, and William is a knight."), P7, S7, NO, OK, None),
    # "All seven are knights": complete, and wrong
    (TA, T("All seven are knights."), P7, S7, NO, OK, None),
]


@pytest.mark.parametrize(("fmt", "completion", "names", "solution", "correct", "format_ok", "reason"), CASES)
def test_grade_case(fmt, completion, names, solution, correct, format_ok, reason):
    g = grade(completion, names, solution, fmt=fmt)
    assert (g.correct, g.format_ok) == (correct, format_ok), g
    if reason is not None:
        assert any(reason in r for r in g.reasons), g.reasons
    if correct:
        assert g.n_right == len(names) and g.complete and g.answered


AD_HOC_REGEX_FAILURES = [
    # "both" collective, no "is a" after each name
    ("Both Zoey and Oliver are knights", ["Zoey", "Oliver"], [True, True]),
    # names in another order than the puzzle lists them
    ("Oliver is a knave, and Zoey is a knight", ["Zoey", "Oliver"], [True, False]),
    # "Name: role" instead of "Name is a role"
    ("Zoey: knight", ["Zoey"], [True]),
    # negation
    ("Zoey is not a knave", ["Zoey"], [True]),
]


@pytest.mark.parametrize(("answer", "names", "solution"), AD_HOC_REGEX_FAILURES)
def test_ad_hoc_regex_failures_grade_correct(answer, names, solution):
    assert grade(T(answer), names, solution).correct


def test_grade_fields_and_reasons():
    g = grade(T("Zoey is a knave."), P2, S2)
    assert isinstance(g, Grade)
    assert g.assignment == {"Zoey": False, "Oliver": None}
    assert (g.answered, g.n_right, g.complete, g.correct, g.format_ok) == (True, 1, False, False, True)
    assert g.reasons == ("Oliver missing",)


def test_partial_format_counts_only_the_models_tags():
    # logic_rl pre-fills <think>: a completion with no tags at all has no format, not half a format
    assert grade("Zoey is a knave.", P2, S2, fmt="logic_rl").partial_format is False
    assert grade("x</think> Zoey is a knave.", P2, S2, fmt="logic_rl").partial_format is True
    assert grade(T("Zoey is a knave."), P2, S2).partial_format is False  # format_ok: not "partial"


def test_think_ok_needs_non_empty_reasoning():
    assert grade(T("x"), P2, S2).think_ok
    assert not grade("<think>  </think><answer>x</answer>", P2, S2).think_ok
    assert grade("Zoey lies.</think><answer>x</answer>", P2, S2, fmt="logic_rl").think_ok


def test_unknown_fmt_is_named():
    with pytest.raises(ValueError, match="'think'"):
        grade(T("x"), P2, S2, fmt="think")


def test_names_and_solution_must_match():
    with pytest.raises(ValueError, match="2 names, 1 entries"):
        grade(T("x"), P2, [True])


def test_completion_text_forms():
    assert completion_text(None) == ""
    assert completion_text({"role": "assistant", "content": "hi"}) == "hi"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "a"}, "b"]}]) == "ab"
    # a think block split off by TRL's parse_response comes back inside tags
    answer = "<answer>Zoey is a knave, Oliver is a knight</answer>"
    g = grade([{"role": "assistant", "thinking": "Zoey lies.", "content": answer}], P2, S2)
    assert g.correct and g.format_ok

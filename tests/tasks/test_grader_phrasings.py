"""The classes of phrasings small models write in K&K answers, one table per class: read right, refused,
accepted.

Each case: (answer block text, names, solution, correct, reason substring or None), with a comment
saying why. Names are from the published K&K pool; the answer sits in a well-formed think_answer
completion, so only the answer decides `correct`.
"""

from __future__ import annotations

import pytest

from curriculum.tasks.kk.grading.grader import grade


def T(answer: str) -> str:
    return f"<think>Check each statement in turn.</think>\n<answer>\n{answer}\n</answer>"


P2, S2 = ["Zoey", "Jacob"], [True, False]  # Zoey knight, Jacob knave
P3, S3 = ["Isabella", "Evelyn", "Penelope"], [True, True, False]
P4, S4 = ["Sebastian", "Aria", "Aurora", "Jack"], [True, False, False, True]
OK, NO = True, False

RESPECTIVELY = [
    # names then roles, in order
    ("Zoey and Jacob are a knight and a knave, respectively.", P2, S2, OK, None),
    # the other order of the pair
    ("Jacob and Zoey are a knave and a knight, respectively.", P2, S2, OK, None),
    # no comma before "respectively"
    ("Zoey and Jacob are a knight and a knave respectively.", P2, S2, OK, None),
    # "respectively" in the middle, Oxford comma, three names
    ("Isabella, Evelyn, and Penelope are, respectively, a knight, a knight, and a knave.", P3, S3, OK, None),
    # no Oxford comma
    ("Isabella, Evelyn and Penelope are a knight, a knight and a knave respectively.", P3, S3, OK, None),
    # roles first, names after
    ("The knight and the knave are Zoey and Jacob, respectively.", P2, S2, OK, None),
    # a negated role in the list
    ("Zoey and Jacob are a knight and not a knight, respectively.", P2, S2, OK, None),
    # read right, and wrong: the pairing is not a bag of roles
    ("Zoey and Jacob are a knave and a knight, respectively.", P2, S2, NO, "Zoey named a knave"),
    # more names than roles: nobody in the sentence is decided
    ("Isabella, Evelyn and Penelope are a knight and a knave, respectively.", P3, S3, NO, "pairs 3 names with 2"),
    # a hedge inside the pairing sentence
    ("Zoey and Jacob are a knight and a knave, respectively, or the reverse.", P2, S2, NO, "hedged"),
]

TABLES = [
    # a two-column table: each name takes its column's role
    ("| Knights | Knaves |\n|---|---|\n| Zoey | Jacob |", P2, S2, OK, None),
    # ragged rows, empty cells and padding
    ("|  Knights  |  Knaves |\n| :---: | :---: |\n|   Isabella | Penelope |\n| Evelyn |   |", P3, S3, OK, None),
    # several names in one cell, singular headers, bold
    ("| **Knight** | **Knave** |\n|---|---|\n| Sebastian, Jack | Aria and Aurora |", P4, S4, OK, None),
    # a column-role table read right, and wrong
    ("| Knights | Knaves |\n|---|---|\n| Jacob | Zoey |", P2, S2, NO, "Zoey named a knave"),
    # a name in both columns is undecided
    ("| Knights | Knaves |\n|---|---|\n| Zoey | Jacob |\n| | Zoey |", P2, S2, NO, "Zoey given both roles"),
    # Name | Role
    ("| Name | Role |\n|---|---|\n| Zoey | Knight |\n| Jacob | Knave |", P2, S2, OK, None),
    # extra columns: a number and a reason that names other people are not answers
    ("| # | Person | Identity | Reason |\n|---|---|---|---|\n| 1 | Zoey | Knight | Jacob lied |\n"
     "| 2 | Jacob | Knave | he says Zoey is a knave |", P2, S2, OK, None),
    # a role column headed "Knight/Knave"
    ("| Inhabitant | Knight/Knave |\n|--|--|\n| Zoey | Knight |\n| Jacob | Knave |", P2, S2, OK, None),
    # no outer pipes
    ("Name | Role\n--- | ---\nZoey | Knight\nJacob | Knave", P2, S2, OK, None),
    # a yes/no column headed by one role
    ("| Name | Knight? |\n|---|---|\n| Zoey | Yes |\n| Jacob | No |", P2, S2, OK, None),
    # a hedged cell leaves that person undecided
    ("| Name | Role |\n|---|---|\n| Zoey | Knight/Knave |\n| Jacob | Knave |", P2, S2, NO, "Zoey hedged"),
    # a first row of data above the |---| line is no header: read as prose
    ("| Zoey | Knight |\n|---|---|\n| Jacob | Knave |", P2, S2, OK, None),
    # a verification table's claim column is no answer; the answer after it is
    ("| Speaker | Claim | Holds? |\n|---|---|---|\n| Zoey | Jacob is a knight | no |\n"
     "| Jacob | Zoey is a knave | no |\n\nZoey is a knight, Jacob is a knave.", P2, S2, OK, None),
    # "Is a knight?" with yes / no cells
    ("| Person | Is a knight? |\n|---|---|\n| Zoey | Yes |\n| Jacob | No |", P2, S2, OK, None),
    # a table naming someone outside the puzzle
    ("| Name | Role |\n|---|---|\n| Zoey | Knight |\n| Jacob | Knave |\n| Oliver | Knave |", P2, S2, NO,
     "Oliver is not in the puzzle"),
]

HEDGED_ENTRIES = [
    # a slash inside one person's entry
    ("Zoey: knight/knave\nJacob: knave", P2, S2, NO, "Zoey hedged"),
    # "or" inside one person's entry
    ("Zoey is a knight or a knave. Jacob is a knave.", P2, S2, NO, "Zoey hedged"),
    # "either ... or"
    ("Zoey is either a knight or a knave; Jacob is a knave.", P2, S2, NO, "Zoey hedged"),
    # a slash between truth-teller and liar
    ("Zoey - truth-teller/liar, Jacob - liar", P2, S2, NO, "Zoey hedged"),
    # a question is no claim
    ("Zoey - knight?\nJacob - knave", P2, S2, NO, "Zoey hedged"),
]

DANGLING_ROLES = [
    # the question's rules and list of inhabitants, copied: no role binds the names after it
    ("Knights always tell the truth, and knaves always lie. You meet 2 inhabitants: Zoey, and Jacob.",
     P2, S2, NO, "missing"),
    # the whole question copied, quotes and all
    ("A very special island is inhabited only by knights and knaves. Knights always tell the truth, and "
     "knaves always lie. You meet 2 inhabitants: Zoey, and Jacob. Zoey remarked, \"Jacob is not a knight\". "
     "Jacob stated, \"Zoey is a knight\". So who is a knight and who is a knave?", P2, S2, NO, "missing"),
    # a role ending a sentence does not reach the next line
    ("Everyone here is a knight.\nZoey\nJacob", P2, [True, True], OK, None),
    ("The knight is\nZoey and Jacob.", P2, S2, NO, "missing"),
    # ... but a heading with a colon does
    ("Knights:\nZoey\nKnaves:\nJacob", P2, S2, OK, None),
    # ... and so does a role alone on its line
    ("Knight\n- Zoey\nKnave\n- Jacob", P2, S2, OK, None),
]

VOIDING_HEDGES = [
    # a hedge sentence that names nobody voids the block
    ("Zoey is a knight and Jacob is a knave. All other combinations are also possible.", P2, S2, NO, "voided"),
    ("Zoey is a knight. Jacob is a knave. (Or the reverse.)", P2, S2, NO, "voided"),
    ("Zoey is a knight, Jacob is a knave. Either way works.", P2, S2, NO, "voided"),
    ("Zoey is a knight; Jacob is a knave. Or vice versa.", P2, S2, NO, "voided"),
    # doubt about the people it names hedges them
    ("Zoey is a knight, but I am not sure.\nJacob is a knave.", P2, S2, NO, "Zoey hedged"),
    # a sentence naming nobody that declines
    ("Zoey is a knight, Jacob is a knave. Honestly I cannot tell.", P2, S2, NO, "cannot be determined"),
    # committal sentences that name nobody do not void
    ("Zoey is a knight, Jacob is a knave. This is the only possible assignment.", P2, S2, OK, None),
    ("Zoey is a knight, Jacob is a knave. No other combination is possible.", P2, S2, OK, None),
    ("Zoey is a knight, Jacob is a knave. There is no other solution.", P2, S2, OK, None),
    # a heading that names both roles is no hedge
    ("Knight or knave?\nZoey: knight\nJacob: knave", P2, S2, OK, None),
]

INVENTED_PEOPLE = [
    # a K&K name from another puzzle
    ("Zoey is a knight, Jacob is a knave, and Oliver is a knight.", P2, S2, NO, "Oliver is not in the puzzle"),
    # the prompt's example name leaking in
    ("(1) Zoey is a knight\n(2) Jacob is a knave\n(3) Liam is a knave", P2, S2, NO, "Liam is not in the puzzle"),
    # a name outside the K&K pool, capitalised mid-sentence
    ("Zoey is a knight, Jacob and Quentin are knaves.", P2, S2, NO, "Quentin is not in the puzzle"),
    # an invented person inside a list
    ("Knights: Zoey, Bob. Knaves: Jacob.", P2, S2, NO, "Bob is not in the puzzle"),
    # common capitalised words are no people
    ("**Final Answer:** Zoey is a Knight, Jacob is a Knave (Statement 1 is False).", P2, S2, OK, None),
    # people nouns and sign-offs, capitalised mid-sentence, are no people
    ("The Islanders Zoey and Jacob are a knight and a knave, respectively. Verified.", P2, S2, OK, None),
    # a stranger mentioned without a role does not void an answer
    ("Zoey is a knight and Jacob is a knave; the puzzle is like the one with Oliver.", P2, S2, OK, None),
]

ACCEPTED_FORMS = [
    # "and so is X"
    ("Isabella is a knight, and so is Evelyn. Penelope is a knave.", P3, S3, OK, None),
    # "X too", "as is X"
    ("Isabella is a knight; Evelyn is too. Penelope is a knave.", P3, S3, OK, None),
    ("Isabella is a knight, as is Evelyn, and Penelope is a knave.", P3, S3, OK, None),
    # "but X is not"
    ("Isabella and Evelyn are knights, but Penelope is not.", P3, S3, OK, None),
    # "X is not a knight" = knave
    ("Isabella and Evelyn are knights. Penelope is not a knight.", P3, S3, OK, None),
    # "nor is X", "neither is X"
    ("Penelope is not a knight. Isabella is a knight, and so is Evelyn.", P3, S3, OK, None),
    ("Aria is not a knight, and neither is Aurora; Sebastian and Jack are knights.", P4, S4, OK, None),
    ("Aria is not a knight, nor is Aurora. Sebastian and Jack are knights.", P4, S4, OK, None),
    # "everyone except X" with X stated, and alone (X takes the other role)
    ("Everyone except Penelope is a knight; Penelope is a knave.", P3, S3, OK, None),
    ("Everyone except Penelope is a knight.", P3, S3, OK, None),
    ("All are knights except Penelope.", P3, S3, OK, None),
    ("All but Penelope are knights.", P3, S3, OK, None),
    # ... and wrong when X is said to be the same
    ("Everyone except Penelope is a knight; Penelope is a knight.", P3, S3, NO, "Penelope given both roles"),
    # "only X": everyone else takes the other role
    ("Only Penelope is a knave.", P3, S3, OK, None),
    ("Penelope is the only knave.", P3, S3, OK, None),
    ("The only knave is Penelope.", P3, S3, OK, None),
    ("Only Isabella and Evelyn are knights.", P3, S3, OK, None),
    # ... read right, and wrong
    ("Only Isabella is a knight.", P3, S3, NO, "Evelyn named a knave"),
    ("Isabella and Evelyn are the only ones who are knights.", P3, S3, OK, None),
    ("Only one knave: Penelope.", P3, S3, OK, None),
    # "other than X", "no one except X", "apart from X"
    ("Other than Penelope, all are knights.", P3, S3, OK, None),
    ("No one except Penelope is a knave.", P3, S3, OK, None),
    ("Everyone is a knight apart from Penelope.", P3, S3, OK, None),
    # JSON-like answers and quoted role words: a quoted word is no quoted claim
    ('{"Isabella": "knight", "Evelyn": "knight", "Penelope": "knave"}', P3, S3, OK, None),
    ("{'Isabella': 'knight', 'Evelyn': 'knight', 'Penelope': 'knave'}", P3, S3, OK, None),
    ('Isabella and Evelyn are "truth-tellers"; Penelope is a "liar".', P3, S3, OK, None),
    # adverbs of the roles
    ("Isabella and Evelyn speak truthfully; Penelope speaks falsely.", P3, S3, OK, None),
    # "X only lies" is no "only X"
    ("Penelope only lies. Isabella and Evelyn are knights.", P3, S3, OK, None),
]

RULES_RESTATED = [
    # the island's rules restated after the answer assign nobody
    ("Isabella and Evelyn are knights; Penelope is a knave. All knights tell the truth and all knaves lie.",
     P3, S3, OK, None),
    ("Isabella and Evelyn are knights; Penelope is a knave. Every knight tells the truth, every knave lies.",
     P3, S3, OK, None),
    # a quantifier over a role names its people after it
    ("Both knights are Isabella and Evelyn; Penelope is a knave.", P3, S3, OK, None),
    # "no one" is a quantifier: read right, and wrong
    ("No one is a knave.", P3, S3, NO, "Penelope named a knight"),
]

REPORTED_CLAIMS = [
    # a verification paragraph: a reported claim through an "and" chain
    ("Sebastian and Jack are knights; Aria and Aurora are knaves.\n\nVerification: Aria's statement that "
     "Aurora is a knight and Jack is a knave is false, consistent with Aria being a knave.", P4, S4, OK, None),
    ("Sebastian is a knight, Aria is a knave, Aurora is a knave, Jack is a knight. Aria says Sebastian is a "
     "knave and Jack is a knave, which is false, so she is a knave.", P4, S4, OK, None),
    # quoted claims, double and single quotes
    ("Zoey is a knight, Jacob is a knave. Jacob said \"Zoey is a knave and I am a knight\", a lie.", P2, S2, OK,
     None),
    ("Zoey is a knight, Jacob is a knave. Check: 'Zoey is a knave' is false.", P2, S2, OK, None),
    # the published speech templates, in a verification
    ("Zoey is a knight and Jacob is a knave. Jacob told you that Zoey is a knave: false.", P2, S2, OK, None),
    ("Zoey is a knight and Jacob is a knave. According to Jacob, Zoey is a knave; that is a lie.", P2, S2, OK,
     None),
    # a report ends where the text resumes its own claim
    ("Jacob claims Zoey is a knave, but Jacob is a knave, so Zoey is a knight.", P2, S2, OK, None),
    # a short quoted claim with a name is still a claim, not the answer
    ('Zoey: "Jacob lies" holds. Zoey is a knight; Jacob is a knave.', P2, S2, OK, None),
    ('Zoey is a knight. Zoey: "Jacob lies".', P2, S2, NO, "Jacob missing"),
    # a reported claim never supplies a missing person
    ("Zoey is a knight. Zoey says that Jacob is a knave.", P2, S2, NO, "Jacob missing"),
    # suppositions are no claims
    ("Zoey is a knight and Jacob is a knave: assume Zoey were a knave, then Jacob would be a knight.", P2, S2,
     OK, None),
    ("If Zoey were a knave, Jacob would be a knight. Zoey is a knight; Jacob is a knave.", P2, S2, OK, None),
    # an "if" that qualifies the answer hedges it
    ("Zoey is a knight if Jacob is a knave. Jacob is a knave.", P2, S2, NO, "Zoey hedged"),
]

TABLES_OF_CASES = {
    "respectively": RESPECTIVELY, "tables": TABLES, "hedged entries": HEDGED_ENTRIES,
    "dangling roles": DANGLING_ROLES, "voiding hedges": VOIDING_HEDGES, "invented people": INVENTED_PEOPLE,
    "accepted forms": ACCEPTED_FORMS, "rules restated": RULES_RESTATED, "reported claims": REPORTED_CLAIMS,
}
CASES = [pytest.param(*case, id=f"{group}-{i}") for group, cases in TABLES_OF_CASES.items()
         for i, case in enumerate(cases)]


@pytest.mark.parametrize(("answer", "names", "solution", "correct", "reason"), CASES)
def test_phrasing(answer, names, solution, correct, reason):
    g = grade(T(answer), names, solution)
    assert g.correct is correct, g
    if reason is not None:
        assert any(reason in r for r in g.reasons), g.reasons
    if correct:
        assert g.complete and g.n_right == len(names) and not g.invented


@pytest.mark.parametrize("bad", [None, "Zoey"])
def test_names_or_solution_none_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="names and solution"):
        grade(T("Zoey is a knight."), bad, [True])
    with pytest.raises(ValueError, match="names and solution"):
        grade(T("Zoey is a knight."), ["Zoey"], bad)

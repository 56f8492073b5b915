"""Claims about who is a knight and who is a knave, read out of free text.

The one reader of "X is a knight / knave" phrasings: the grader reads answer blocks with it
(`curriculum.tasks.kk.grading.answer_parse`) and validation reads reasoning blocks with it (`Claims.last`), so both read
a sentence the same way. Every step is a single pass over the tokens: linear in the text.

1. **Tokenize** (one regex, no nested quantifiers): lower-case words, sentence breaks (newline
   . ; ! ?), clause breaks (, & ( ) [ ] { } |), ":", "/" and quotes. Markdown, bullets and
   enumerators leave only breaks behind; "isn't" becomes "is not", so negation is one token.
2. **Classify** each word once: a person of the puzzle (whole words, longest name first: Ava never
   matches inside Avery), an invented person (a K&K first name not in the puzzle, or a capitalised
   word mid-sentence that is no common word), a role word, a negation, a hedge, a quantifier ...
3. **Bind** names to roles (`claim_binder`, driven by `claim_feed`, both in this package). A role word takes
   the names before it in its clause and in the name-only clauses before it ("A, B, and C are
   knights"); with none, the names after it ("Knights: A, B", "The knave is C"). A role that takes
   no name in its sentence is a heading for the next lines only when a colon ends its line or it
   stands alone there ("Knights:"), so a copied rule ("Knights always tell the truth.") binds
   nobody. Negations flip a role ("A is not a knave", "Neither A nor B is a knight"). Quantifiers
   bind at the sentence end: "all", "both", "everyone"; "the rest", "others"; "everyone except X" /
   "all but X" (X takes the other role); "only X is a knight" (everyone else is a knave).
   "respectively" pairs the sentence's names and roles in order. "so is X", "X too", "nor is X"
   repeat the last role; "X is not." denies it.
4. **Not claims**: reported or quoted speech ("Zoey said ...", "her statement that A is a knave
   and B is a knave is false", a quoted claim) up to a word that ends the report (but, so, which ...,
   a closing bracket, the sentence end); conditions ("would", "if", "otherwise") to the end of their
   sentence. What a sentence assumes ("Assume Zoey is a knight") is kept apart (`Claims.assumed`):
   never an answer, but a reasoning's last claims count it (`Claims.last`).
5. **Hedges**: a sentence with a hedge word (or, /, either, might, possible ...), or an "if" after
   a claim it qualifies, leaves everyone it names undecided; a hedge sentence that names nobody
   and no role ("Or the reverse.", "Either way works."), or one that names nobody and says the roles
   cannot be determined ("I cannot tell."), commits the whole text to nothing (`void`). Doubt
   ("not sure") or a question mark hedges the people its sentence names; a rule about all of a
   role ("all knights tell the truth") binds nobody.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import NamedTuple

from curriculum.tasks.kk.grading.claim_binder import Binder
from curriculum.tasks.kk.grading.claim_feed import feed, pair_respectively
from curriculum.tasks.kk.grading.claim_words import (
    SENTENCE_BREAKS,
    capitalised_strangers,
    merge_names,
    name_tokens,
    tokenize,
)


def _sentences(tokens: Sequence[str]) -> list[tuple[int, int, bool]]:
    """(start, end, has "respectively") per sentence."""
    spans, start = [], 0
    for i, tok in enumerate(tokens):
        if tok in SENTENCE_BREAKS:
            spans.append((start, i + 1))
            start = i + 1
    spans.append((start, len(tokens)))
    return [(s, e, "respectively" in tokens[s:e]) for s, e in spans]


class Claims(NamedTuple):
    """What a text claims about each person, in order, and what hedges or voids those claims.

    Person indices: the puzzle's `names` first, then `invented` (lower-case, in order of appearance).
    events: (person, knight?, sentence) for every claim, in text order; assumed: the same for what
        the text assumes ("Assume Zoey is a knight"), which is never an answer.
    hedged: people named in a hedged sentence; hedged_sentences: those sentences.
    void: why the text as a whole commits to nothing ("a hedge that names nobody").
    notes: other reasons a reader should see ("'respectively' pairs 2 names with 3 roles").
    """

    names: Sequence[str]
    invented: Sequence[str]
    events: Sequence[tuple[int, bool, int]]
    assumed: Sequence[tuple[int, bool, int]]
    hedged: AbstractSet[int]
    hedged_sentences: AbstractSet[int]
    void: Sequence[str]
    notes: Sequence[str]

    def invented_with_roles(self) -> tuple[str, ...]:
        """Invented people the text gives a role."""
        n = len(self.names)
        return tuple(dict.fromkeys(self.invented[p - n] for p, _, _ in self.events if p >= n))

    def last(self) -> dict[str, bool | None]:
        """The last claim about each puzzle person (hedged sentences do not count), or None.

        Assumptions count as claims here (never in an answer): a backtracking search ends on the
        assumptions that held ("Assume Zoey is a knave. No contradiction ..."), and a refuted one is
        followed by its conclusion ("Assume Zoey is a knight. ... So Zoey is a knave.").

        >>> read_claims("Assume Zoey is a knight. Then Oliver lies. So Zoey is a knave.", ["Zoey", "Oliver"]).last()
        {'Zoey': False, 'Oliver': False}
        >>> read_claims("Zoey cannot be a knave. Assume Oliver is a knave. It holds.", ["Zoey", "Oliver"]).last()
        {'Zoey': True, 'Oliver': False}
        """
        in_order = sorted([(s, 0, i, p, r) for i, (p, r, s) in enumerate(self.events)]
                          + [(s, 1, i, p, r) for i, (p, r, s) in enumerate(self.assumed)])
        last: dict[int, bool] = {}
        for sentence, _, _, person, role in in_order:
            if sentence not in self.hedged_sentences:
                last[person] = role
        return {name: last.get(person) for person, name in enumerate(self.names)}


def read_claims(text: str, names: Sequence[str]) -> Claims:
    """Every claim `text` makes about the people in `names` (and about people it invents).

    >>> c = read_claims("Zoey and Jacob are a knight and a knave, respectively. Liam is a knight.", ["Zoey", "Jacob"])
    >>> c.last(), c.invented_with_roles()
    ({'Zoey': True, 'Jacob': False}, ('liam',))
    """
    words = name_tokens(names)
    # a name given twice binds its last position only; names are distinct in K&K
    people = {" ".join(w): person for person, w in enumerate(words) if w}
    multi_word = len(people) != sum(map(len, words))
    own = {w for name in words for w in name} if multi_word else people.keys()
    b = Binder(len(names), people, capitalised_strangers(text, own))
    tokens = merge_names(tokenize(text), words) if multi_word else tokenize(text)
    for start, end, paired in _sentences(tokens) if "espectively" in text else [(0, len(tokens), False)]:
        (pair_respectively if paired else feed)(b, tokens, start, end)
    b.sentence_break("\n", len(tokens))
    void = tuple(dict.fromkeys(b.void)) if b.void else ()
    return Claims(names, b.invented, b.claimed, b.assumed, b.hedged, b.hedged_sentences, void, b.notes)


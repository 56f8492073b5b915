"""Claims about who is a knight and who is a knave, read out of free text: the one reader of "X is a knight /
knave" phrasings, for answer blocks (`answer`) and reasoning blocks (`Claims.last`), each step one linear pass.

1. **Tokenize** (one regex, no nested quantifiers): lower-case words, sentence and clause breaks, ":", "/" and
   quotes; "isn't" becomes "is not".
2. **Classify** each word once: a person of the puzzle (longest name first), an invented person (a K&K first
   name, or a capitalised word mid-sentence that is no common word), a role word, a negation, a hedge ...
3. **Bind** names to roles (`claim_binder.Binder`, driven by `feed`): a role word takes the names before it in its
   clause and in the name-only clauses before it ("A, B, and C are knights"), else those after it ("Knights: A,
   B"); a role that takes no name heads the next lines only as "Knights:" (or alone on its line), so a copied rule
   binds nobody. Negations flip a role; quantifiers bind at the sentence end ("all", "the rest", "everyone except
   X", "only X is a knight"); "respectively" pairs names and roles; "so is X", "X too" repeat the last role.
4. **Not claims**: reported or quoted speech up to a word that ends the report (but, so, which ..., a closing
   bracket, the sentence end); conditions to their sentence's end; what a sentence assumes ("Assume Zoey is a
   knight") is kept apart (`Claims.assumed`), never an answer, but counted by a reasoning's last claims.
5. **Hedges**: a sentence with a hedge word (or, /, either, might ...), or an "if" after a claim, leaves everyone
   it names undecided; one that names nobody and no role ("Or the reverse."), or says the roles cannot be
   determined, commits the whole text to nothing (`void`); doubt or a question mark hedges whom it names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from functools import partial
from typing import NamedTuple

from curriculum.tasks.kk.grading import claim_words as words
from curriculum.tasks.kk.grading.claim_binder import Binder

_DECLINE_WINDOW = 3


def _set(flag: str, b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    """Set one of the binder's rare flags (bound to its flag in `_ACTIONS`)."""
    setattr(b, flag, True)
    b.rare = True


def _modifier(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    b.rare = True
    if tok in words.NEGATIONS:
        b.neg += 1
        b.neg_at = i
    if tok in words.HEDGES and not _hedge_exempt(b, tok, tokens, i):
        b.hedge = True
    if tok in words.CONDITIONS:
        b.hedge = b.hedge or (bool(b.touched) and not b.explaining)
        b.supposing = b.quiet = True
    elif tok in words.SUPPOSITIONS:
        b.supposing = b.quiet = True
    elif tok in words.ASSUMPTIONS and b.events is b.claimed:
        b.events = b.own("assumed")  # "Assume Zoey is a knight": what follows in the sentence is assumed
    if tok == "neither":
        b.ditto = True  # "Zoey is not a knight, and neither is Liam" (a role word after it cancels this)
    after = tokens[i + 1] if i + 1 < len(tokens) else ""
    if tok == "other" and after == "than":
        b.excepting = True  # "other than X, all are knights"
    elif tok in words.QUANT_REST:
        b.quant = "rest"
    elif (tok in words.QUANT_ALL or tok == "no" and after == "one") and b.quant is None and not _generic(tokens, i):
        b.quant = "all"  # "all three", "both", "no one"


def _generic(tokens: Sequence[str], i: int) -> bool:
    """A quantifier over a role is a rule, not an answer: "all knights tell the truth", "every knave lies"."""
    after = tokens[i + 1] if i + 1 < len(tokens) else ""
    if after == "the" and i + 2 < len(tokens):
        after = tokens[i + 2]
    return after in words.ROLE_WORDS


def _hedge_exempt(b: Binder, tok: str, tokens: Sequence[str], i: int) -> bool:
    """Hedge words that commit: "the only possible", "not possible", "could not", "not ... either"."""
    after = tokens[i + 1] if i + 1 < len(tokens) else "\n"
    if tok in ("possible", "possibly"):
        return b.neg > 0 or (i > 0 and tokens[i - 1] == "only")
    if tok == "could":
        return after == "not"
    if tok == "either":
        return after in words.SENTENCE_BREAKS or after in words.CLAUSE_SYMBOLS
    return False


def _clause(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    if tok == "but" and i > 0 and tokens[i - 1] in words.ALL_BUT:
        b.excepting = b.rare = True  # "all but Jacob are knights"
        return
    b.clause_break(i)
    if tok == "nor":
        _ditto(b, tok, tokens, i)  # "Zoey is not a knight, nor is Jacob"


def _declines_here(tokens: Sequence[str], i: int) -> bool:
    """A negation shortly before: "cannot determine", "impossible to say", "no way to tell"."""
    window = tokens[max(0, i - _DECLINE_WINDOW):i]
    return any(t in words.DECLINE_NEGATIONS for t in window) and "other" not in window  # not "no other solution"


def _decline(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    if tok in words.DECLINE_WORDS or _declines_here(tokens, i):
        b.declining = b.rare = True


def _report(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    if tok.startswith("tell") or tok == "told":
        if _declines_here(tokens, i):
            b.declining = b.rare = True
        if i + 1 >= len(tokens) or tokens[i + 1] not in words.TELL_REPORTS:
            return  # "tells the truth" is a role, not a report
    b.muted = b.quiet = b.rare = True


def _ditto(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    b.ditto = b.ditto_here = b.rare = True


def _colon(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    if b.fwd is not None and not b.cur:
        b.colon = True


def _resume(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    if (tok == "so" or tok == "as") and i + 1 < len(tokens) and tokens[i + 1] in words.SO_VERBS:
        _ditto(b, tok, tokens, i)  # "and so is Jacob", "as is Jacob"


def _only(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    # "Only X is ...", "the only knight is X", "X is the only knight", "the only one who ..."; not "X only lies"
    after = tokens[i + 1] if i + 1 < len(tokens) else ""
    names_or_role = after in words.ROLE_WORDS or after in ("one", "ones") or b.person(after) is not None
    if (not b.cur or tokens[i - 1] == "the") and names_or_role:
        b.only = b.rare = True


_ACTIONS: dict[str, Callable[[Binder, str, Sequence[str], int], None]] = {
    "clause": _clause,  # but and nor; `feed` calls the binder itself for roles, sentences and other clauses
    "report": _report,
    "modifier": _modifier,
    "colon": _colon,
    "resume": _resume,
    "explain": partial(_set, "explaining"),
    "except": partial(_set, "excepting"),
    "ditto": _ditto,
    "decline": _decline,
    "only": _only,
    "respectively": lambda b, tok, tokens, i: None,  # only in a sentence `pair_respectively` did not take
}


_QUOTES = frozenset({'"', "“", "”", "‘", "'"})


def _quote(b: Binder, kind: str, tokens: Sequence[str], i: int) -> None:
    """A quote opens or closes quoted speech, but around one word or two without a name ('a "truth-teller"')."""
    b.rare = True
    if i == b.short_quote_end:
        return
    if kind != "close" and not b.quoted:
        for end in (i + 2, i + 3):
            if end < len(tokens) and tokens[end] in _QUOTES:
                if end == i + 2 or b.person(tokens[i + 1]) is b.person(tokens[i + 2]) is None:  # "Jacob lies" is one
                    b.short_quote_end = end
                    return
                break
    b.quoted = not b.quoted if kind == "quote" else kind == "open"
    b.quiet = b.quoted or b.muted or b.supposing


def feed(b: Binder, tokens: Sequence[str], start: int, end: int) -> None:
    """Run the binder over tokens[start:end] (steps 2-5 of the module docstring)."""
    # the hot path: the binder's state that names and noise touch lives in locals, refreshed after actions
    people, extra, kinds = b.people, b.extra, words.KIND
    cur, touched, quiet, excepting = b.cur, b.touched, b.quiet, b.excepting
    for i, tok in enumerate(tokens[start:end], start):
        person = people.get(tok)
        if person is None:
            kind = kinds.get(tok)
            if kind is None:
                if tok not in extra:
                    continue  # most words are noise
                person = b.person(tok)
            elif kind == "stranger":
                person = b.person(tok)
            elif kind == "quote" or kind == "open" or kind == "close":
                _quote(b, kind, tokens, i)
                quiet = b.quiet
                continue
        if quiet:
            if not b.wake(tok, "name" if person is not None else kind):
                continue
            cur, quiet = b.cur, False
        if person is not None:
            (b.excluded if excepting else cur).append(person)
            touched.append(person)
            continue
        if kind == "clause" and tok != "but" and tok != "nor":  # the common kinds skip the action table
            if cur or b.rare:
                b.clause_break(i)
            else:
                b.fwd_here, b.neg = False, 0  # an empty clause ("(1)") only ends its negations
        elif kind == "role":
            b.role(tok, tokens, i)
        elif kind == "sentence":
            b.sentence_break(tok, i)
        else:
            _ACTIONS[kind](b, tok, tokens, i)
        cur, touched, quiet, excepting = b.cur, b.touched, b.quiet, b.excepting


def pair_respectively(b: Binder, tokens: Sequence[str], start: int, end: int) -> None:
    """A sentence with "respectively": its names and roles pair up in order, or nobody in it is decided."""
    names, roles, neg = [], [], 0
    for tok in tokens[start:end]:
        person = b.person(tok)
        if person is not None:
            names.append(person)
        elif tok in words.ROLE_WORDS:
            roles.append(words.ROLE_WORDS[tok] ^ (neg % 2 == 1))
            neg = 0
        elif tok in words.NEGATIONS:
            neg += 1
        elif tok in words.HEDGES or tok in words.CONDITIONS:
            b.hedge = b.rare = True
    b.touched.extend(names)
    if len(names) == len(roles):
        for person, role in zip(names, roles, strict=True):
            b.named([person], role)
    else:
        b.hedge_people(names)
        b.own("notes").append(f"'respectively' pairs {len(names)} names with {len(roles)} roles")
    b.sentence_break(".", end)


def _sentences(tokens: Sequence[str]) -> list[tuple[int, int, bool]]:
    """(start, end, has "respectively") per sentence."""
    spans, start = [], 0
    for i, tok in enumerate(tokens):
        if tok in words.SENTENCE_BREAKS:
            spans.append((start, i + 1))
            start = i + 1
    spans.append((start, len(tokens)))
    return [(s, e, "respectively" in tokens[s:e]) for s, e in spans]


class Claims(NamedTuple):
    """What a text claims about each person (the puzzle's `names`, then `invented`), and what hedges or voids it."""

    names: Sequence[str]
    invented: Sequence[str]  # lower-case, in order of appearance
    events: Sequence[tuple[int, bool, int]]  # (person, knight?, sentence) for every claim, in text order
    assumed: Sequence[tuple[int, bool, int]]  # the same for what it assumes ("Assume Zoey is a knight"): no answer
    hedged: AbstractSet[int]  # people named in a hedged sentence
    hedged_sentences: AbstractSet[int]
    void: Sequence[str]  # why the text as a whole commits to nothing ("a hedge that names nobody")
    notes: Sequence[str]  # other reasons a reader should see ("'respectively' pairs 2 names with 3 roles")

    def invented_with_roles(self) -> tuple[str, ...]:
        """Invented people the text gives a role."""
        n = len(self.names)
        return tuple(dict.fromkeys(self.invented[p - n] for p, _, _ in self.events if p >= n))

    def last(self) -> dict[str, bool | None]:
        """The last claim about each puzzle person outside hedged sentences, or None. Assumptions count here: a
        search ends on those that held, and a refuted one is followed by its conclusion.

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
    name_words = words.name_tokens(names)
    # a name given twice binds its last position only; names are distinct in K&K
    people = {" ".join(w): person for person, w in enumerate(name_words) if w}
    multi_word = len(people) != sum(map(len, name_words))
    own = {w for name in name_words for w in name} if multi_word else people.keys()
    b = Binder(len(names), people, words.capitalised_strangers(text, own))
    tokens = words.tokenize(text)
    tokens = words.merge_names(tokens, name_words) if multi_word else tokens
    for start, end, paired in _sentences(tokens) if "espectively" in text else [(0, len(tokens), False)]:
        (pair_respectively if paired else feed)(b, tokens, start, end)
    b.sentence_break("\n", len(tokens))
    void = tuple(dict.fromkeys(b.void)) if b.void else ()
    return Claims(names, b.invented, b.claimed, b.assumed, b.hedged, b.hedged_sentences, void, b.notes)


"""Read who is a knight and who is a knave out of the text of one <answer> block.

How it works, and why it is not a regex per phrasing:

1. **Tokenize** (one linear regex, no nested quantifiers): lower-case words, sentence breaks
   (newline . ; ! ?) and clause breaks (, & ( ) [ ] { } | /). Markdown emphasis, bullets, "-",
   "=", ":" and enumerators like "(1)" or "1." leave nothing but breaks behind. "isn't" becomes
   "is not" first, so negation is one token.
2. **Classify** each word once: a person (whole-word match against the puzzle's names, longest
   name first, so Ava never matches inside Avery and "Mia" never inside "Amelia"), a role word
   (knight/knave, truth-teller, liar, lies ...), a negation, a hedge, a quantifier ("all",
   "both", "everyone"; "the rest", "others"), a list joiner ("and", "but", "nor"), a reporting
   word ("said", "statement": the rest of its clause quotes a claim and is skipped) or noise.
3. **Bind** with a small state machine. A role word takes the names that precede it in its clause
   and in the name-only clauses before it ("A, B, and C are knights"). With no names before it, it
   takes the names after it, clause by clause ("Knights: A, B", "The knave is C"); a role with no
   names in its whole sentence is a heading that keeps taking names on the next lines. A role
   with no names but a quantifier applies to everyone ("All three are knights") or to whoever is
   still unassigned ("the rest are knaves"). An odd number of negations since the previous role
   word flips it ("A is not a knave", "Neither A nor B is a knight"); a negation reaches past a
   clause break only together with the names it precedes.
4. **Refuse** rather than guess: a sentence with a hedge word (or, either, might, maybe, if ...)
   leaves everyone it mentions undecided; a person bound to both roles anywhere is undecided; a
   block that says the roles cannot be determined decides nobody.

Every step is a single pass over the tokens, so the cost is linear in the text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

# One alternative per token kind; the classes do not overlap, so matching never backtracks.
_TOKEN = re.compile(r"[^\W_]+|[\n.;!?]|[,&()\[\]{}|/]")
_SENTENCE_BREAKS = frozenset("\n.;!?")
_CLAUSE_SYMBOLS = frozenset(",&()[]{}|/")

ROLE_WORDS = {
    **dict.fromkeys(("knight", "knights", "truth", "truthful", "honest", "truthteller"), True),
    **dict.fromkeys(("knave", "knaves", "liar", "liars", "lie", "lies", "lying", "lied", "dishonest"), False),
}
NEGATIONS = frozenset({"not", "no", "never", "cannot", "neither", "none", "nobody"})
# Words that make a sentence non-committal; "or" covers "X is a knight or a knave" and
# "... or Zoey is a knave and ...", "if"/"whether" cover conditional answers.
HEDGES = frozenset({
    "or", "either", "might", "may", "maybe", "perhaps", "possibly", "possible", "probably", "likely",
    "unlikely", "could", "would", "unknown", "unclear", "uncertain", "unsure", "undecided", "if",
    "whether", "assume", "assuming", "suppose", "supposing", "guess", "depends", "seems", "seem",
})
# Not "they": in "Zoey is a knight since they told the truth" it would sweep in everyone.
QUANT_ALL = frozenset({"all", "both", "everyone", "everybody", "every", "each", "neither", "none", "nobody"})
QUANT_REST = frozenset({"other", "others", "rest", "remaining", "else"})
JOINERS = frozenset({"and", "but", "while", "whereas", "nor", "plus", "also"})
# Reported speech: the rest of the clause quotes a claim, not the answer ("her statement that
# Oliver is not a knight is false" must not make Oliver a knave).
REPORTING = frozenset({"said", "says", "saying", "claim", "claims", "claimed", "claiming", "statement",
                       "statements", "stated", "states", "stating", "remarked", "asserted", "asserts"})
# "cannot determine", "not enough information", "no way to tell", "no solution", ...
_DECLINE_WORDS = frozenset({"undetermined", "undeterminable", "indeterminate", "inconclusive", "insufficient",
                            "unknowable", "unsolvable", "impossible", "unable", "ambiguous"})
_DECLINE_AFTER_NEGATION = frozenset({"determine", "determined", "decide", "decided", "tell", "know",
                                     "conclude", "identify", "say", "solve", "sure", "certain", "enough",
                                     "solution"})
_DECLINE_ANY = _DECLINE_WORDS | _DECLINE_AFTER_NEGATION
_DECLINE_WINDOW = 3


@dataclass(frozen=True)
class ParsedAnswer:
    """What one answer block says: name -> True (knight) / False (knave) / None, and why not."""

    assignment: dict[str, bool | None]
    reasons: tuple[str, ...]


def tokenize(text: str) -> list[str]:
    """Lower-case word and break tokens of `text`.

    >>> tokenize("**Zoey** isn't a Knave; (2) Ava-Avery")
    ['zoey', 'is', 'not', 'a', 'knave', ';', '(', '2', ')', 'ava', 'avery']
    """
    text = text.lower().replace("’", "'").replace("can't", "cannot").replace("n't", " not")
    return _TOKEN.findall(text)


def declines(tokens: Sequence[str]) -> bool:
    """True when the text says the roles cannot be determined.

    >>> declines(tokenize("It is impossible to determine."))
    True
    >>> declines(tokenize("Zoey cannot be a knave, so Zoey is a knight."))
    False
    """
    for i, tok in enumerate(tokens):
        if tok not in _DECLINE_ANY:
            continue
        if tok in _DECLINE_WORDS:
            return True
        if tok in _DECLINE_AFTER_NEGATION and any(
            t in NEGATIONS or t == "unable" for t in tokens[max(0, i - _DECLINE_WINDOW):i]
        ):
            return True
    return False


def _name_tokens(names: Sequence[str]) -> list[tuple[str, ...]]:
    """Each name as tokens; a name that is one word (the common case) skips the regex."""
    return [(name.lower(),) if name.isascii() and name.isalpha()
            else tuple(w for w in tokenize(name) if w not in _KIND) for name in names]


def _merge_names(tokens: list[str], words: list[tuple[str, ...]]) -> list[str]:
    """Join the tokens of multi-word names into one token ("mary ann"), longest name first."""
    multi = sorted((w for w in words if len(w) > 1), key=len, reverse=True)
    if not multi:
        return tokens
    starts: dict[str, list[tuple[str, ...]]] = {}
    for w in multi:
        starts.setdefault(w[0], []).append(w)
    merged, i = [], 0
    while i < len(tokens):
        match = next((w for w in starts.get(tokens[i], ()) if tuple(tokens[i:i + len(w)]) == w), None)
        merged.append(" ".join(match) if match else tokens[i])
        i += len(match) if match else 1
    return merged


@dataclass
class _Binder:
    """The binding state machine of step 3 (module docstring); one instance per answer block."""

    n: int
    roles: list[set[bool]] = field(init=False)
    hedged: list[bool] = field(init=False)
    cur: list[int] = field(default_factory=list)  # names in this clause, not yet bound
    carry: list[int] = field(default_factory=list)  # names of earlier role-less clauses, this sentence
    fwd: bool | None = None  # a role taking the names after it ("Knights: A, B")
    fwd_here: bool = False  # ... set in the current clause
    fwd_took: bool = False  # ... took a name in its own sentence (else it is a heading)
    heading: bool = False  # ... survived a sentence break and takes names on the next lines
    neg: int = 0  # negations in this clause since the last role word
    neg_carried: int = 0  # ... in earlier clauses, carried with their names
    quant: str | None = None
    hedge: bool = False
    muted: bool = False  # inside reported speech, up to the next break
    touched: list[int] = field(default_factory=list)  # people mentioned or bound in this sentence

    def __post_init__(self) -> None:
        self.roles = [set() for _ in range(self.n)]
        self.hedged = [False] * self.n

    def bind(self, people: Sequence[int], role: bool) -> None:
        for person in people:
            self.roles[person].add(role)
        self.touched.extend(people)

    def role(self, role: bool) -> None:
        role ^= (self.neg + self.neg_carried) % 2 == 1
        self.neg = self.neg_carried = 0
        if self.fwd is not None and self.fwd_here and self.cur:
            # "Knight: Zoey knave: Oliver" -- names right after a role in its own clause are its.
            self.bind(self.cur, self.fwd)
            self.cur = []
        if self.cur or self.carry:
            self.bind(self.cur + self.carry, role)
            self.cur, self.carry = [], []
        elif self.quant is not None:
            self.bind([p for p in range(self.n) if self.quant == "all" or not self.roles[p]], role)
        else:
            self.fwd, self.fwd_here, self.fwd_took, self.heading = role, True, False, False
            return
        self.fwd, self.heading, self.quant = None, False, None

    def clause_break(self) -> None:
        if self.fwd is None and self.cur:
            # names waiting for a role keep their clause's negations ("Neither A, nor B, is a knight")
            self.carry.extend(self.cur)
            self.neg_carried += self.neg
        elif self.cur:
            self.bind(self.cur, self.fwd)
            self.fwd_took = True
        # any other negation ends with its clause: "A is a knave (no doubt), B is a knight"
        self.cur, self.fwd_here, self.neg, self.muted = [], False, 0, False

    def sentence_break(self) -> None:
        self.clause_break()
        if self.hedge:
            for person in self.touched:
                self.hedged[person] = True
        if self.fwd is not None and not self.heading:
            # A role that took names in its own sentence ends there; one that took none is a heading.
            self.fwd, self.heading = (None, False) if self.fwd_took else (self.fwd, True)
        self.carry, self.touched, self.neg_carried, self.quant, self.hedge = [], [], 0, None, False


_KIND = {
    **dict.fromkeys(NEGATIONS | HEDGES | QUANT_ALL | QUANT_REST, "modifier"),
    **dict.fromkeys(_CLAUSE_SYMBOLS | JOINERS, "clause"),
    **dict.fromkeys(_SENTENCE_BREAKS, "sentence"),
    **dict.fromkeys(ROLE_WORDS, "role"),
    **dict.fromkeys(REPORTING, "report"),
}


def _modify(binder: _Binder, tok: str) -> None:
    if tok in NEGATIONS:
        binder.neg += 1
    if tok in HEDGES:
        binder.hedge = True
    if tok in QUANT_REST:
        binder.quant = "rest"
    elif tok in QUANT_ALL and binder.quant is None:
        binder.quant = "all"


def _feed(binder: _Binder, tokens: Sequence[str], people: dict[str, int]) -> None:
    """Run the binder over the tokens (steps 2 and 3 of the module docstring)."""
    cur, touched = binder.cur, binder.touched  # the hot path: a person's name, inlined
    for tok in tokens:
        person = people.get(tok)
        kind = "name" if person is not None else _KIND.get(tok)  # most words are noise: None
        if kind is None or (binder.muted and kind != "clause" and kind != "sentence"):
            continue
        if kind == "name":
            cur.append(person)
            touched.append(person)
            continue
        if kind == "role":
            binder.role(ROLE_WORDS[tok])
        elif kind == "clause":
            binder.clause_break()
        elif kind == "sentence":
            binder.sentence_break()
        elif kind == "report":
            binder.muted = True
        else:
            _modify(binder, tok)
        cur, touched = binder.cur, binder.touched
    binder.sentence_break()


def parse_answer(text: str, names: Sequence[str]) -> ParsedAnswer:
    """Parse one answer block for the people in `names`.

    >>> people = ["Ava", "Avery", "Mia"]
    >>> parse_answer("Both Ava and Avery are knights; Mia isn't a knight.", people).assignment
    {'Ava': True, 'Avery': True, 'Mia': False}
    >>> parse_answer("Zoey is a knight or a knave. Oliver is a knave.", ["Zoey", "Oliver"]).reasons
    ('Zoey hedged',)
    """
    tokens = tokenize(text)
    if declines(tokens):
        return ParsedAnswer(dict.fromkeys(names), ("answer says the roles cannot be determined",))
    words = _name_tokens(names)
    binder = _Binder(len(names))
    # a name given twice binds its last position only; names are distinct in K&K
    _feed(binder, _merge_names(tokens, words), {" ".join(w): person for person, w in enumerate(words) if w})
    assignment: dict[str, bool | None] = {}
    reasons: list[str] = []
    for person, name in enumerate(names):
        roles = binder.roles[person]
        if binder.hedged[person]:
            reasons.append(f"{name} hedged")
        elif len(roles) > 1:
            reasons.append(f"{name} given both roles")
        elif not roles:
            reasons.append(f"{name} missing")
        assignment[name] = next(iter(roles)) if len(roles) == 1 and not binder.hedged[person] else None
    return ParsedAnswer(assignment, tuple(reasons))

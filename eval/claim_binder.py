"""The binding state machine behind `eval.claims` (read its docstring first): tokens in, claims out.

`feed` runs the machine over a span of tokens; `pair_respectively` reads a sentence with
"respectively". Both append to the binder's `events`, one (person, knight?, sentence) per claim.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from eval.claim_words import (
    ALL_BUT,
    ASSUMPTIONS,
    CLAUSE_SYMBOLS,
    CONDITIONS,
    DECLINE_NEGATIONS,
    DECLINE_WORDS,
    HEDGES,
    KEEP_SPEAKER,
    KIND,
    NEGATIONS,
    QUANT_ALL,
    QUANT_REST,
    ROLE_WORDS,
    SENTENCE_BREAKS,
    SO_VERBS,
    SUPPOSITIONS,
    TELL_REPORTS,
    UNMUTE,
)

_DECLINE_WINDOW = 3


class Binder:
    """The binding state machine of step 3 (`eval.claims`); one instance per text.

    People are indices: the puzzle's first (`n` of them), then invented people as they appear.
    `rare` marks a sentence that set state few sentences set, so the common sentence ends without
    resetting it. State that only such sentences write starts from the class defaults below (a
    binder is made per answer block, so it must start cheaply).
    """

    fwd_at: int = -2  # the forward role's token index,
    fwd_alone: bool = False  # ... whether a break came right before it,
    colon: bool = False  # ... and whether ":" followed it before any name
    # made on first write (few texts write them), so a binder starts cheaply
    invented: list[str] | tuple = ()
    hedged: set[int] | frozenset = frozenset()
    hedged_sentences: set[int] | frozenset = frozenset()
    void: list[str] | tuple = ()
    notes: list[str] | tuple = ()
    _assigned: set[int] | frozenset = frozenset()
    assumed: list[tuple[int, bool, int]] | tuple = ()  # claims inside "assume ...", "suppose ..."
    only_bound: tuple[list[int], bool] | None = None
    ditto: bool = False  # "so is X", "X too": names left without a role take the last one
    ditto_here: bool = False  # ... said in this clause ("X too, and Y is a knave")
    last_role_sentence: int = -1
    elliptic: bool = False
    hedge: bool = False
    explaining: bool = False
    declining: bool = False
    muted: bool = False  # inside reported speech
    quoted: bool = False  # inside double quotes
    supposing: bool = False  # inside a supposition, to the sentence end
    _assigned_upto: int = 0
    short_quote_end: int = -1  # the closing quote of a quoted word or two

    def __init__(self, n: int, people: dict[str, int], extra: Collection[str]) -> None:
        self.n = n
        self.people = people  # token -> person; invented people join as they are met
        self.extra = extra  # invented people beyond KNOWN_NAMES (capitalised mid-sentence)
        self.claimed: list[tuple[int, bool, int]] = []  # (person, knight?, sentence)
        self.events = self.claimed  # where claims go: `claimed`, or `assumed` inside an assumption
        self.cur: list[int] = []  # names in this clause, not yet bound
        self.carry: list[int] = []  # names of earlier role-less clauses, this sentence
        self.touched: list[int] = []  # people named or bound in this sentence
        self.pending: list[tuple[str, bool]] = []  # quantified roles, bound at the sentence end
        self.excluded: list[int] = []  # "everyone except X": X
        self.sentence: int = 0
        self.last_role: bool | None = None  # what "so is X" repeats and "X is not." denies
        self.fwd: bool | None = None  # a role taking the names after it ("Knights: A, B")
        self.fwd_here: bool = False  # ... set in the current clause
        self.fwd_took: bool = False  # ... took a name in its own sentence (else it may be a heading)
        self.heading: bool = False  # ... survived a line break and takes names on the next lines
        self.neg: int = 0  # negations in this clause since the last role word
        self.neg_carried: int = 0  # ... in earlier clauses, carried with their names
        self.neg_at: int = -2  # index of the latest negation ("Penelope is not." ends right after it)
        self.saw_role: bool = False
        self.rare: bool = False
        self.quant: str | None = None
        self.excepting: bool = False
        self.only: bool = False
        self.quiet: bool = False  # any of the three

    def person(self, tok: str) -> int | None:
        """The person `tok` names, if any; an invented person gets the next index on first sight."""
        person = self.people.get(tok)
        if person is None and (tok in self.extra or KIND.get(tok) == "stranger"):
            person = self.people[tok] = self.n + len(self.invented)
            self.invented = self.invented or []  # the class default is an empty tuple
            self.invented.append(tok)
        return person

    def named(self, people: list[int], role: bool) -> None:
        """Names given a role by the text itself (not by a quantifier)."""
        sentence, events = self.sentence, self.events
        for person in people:
            events.append((person, role, sentence))
        self.last_role, self.last_role_sentence = role, self.sentence
        if self.only and self.only_bound is None:
            self.only_bound = (people, role)

    def bind(self, people: list[int], role: bool) -> None:
        """People a quantifier gives a role ("the rest are knaves")."""
        self.events.extend((person, role, self.sentence) for person in people)
        self.touched.extend(people)

    def hedge_people(self, people: Sequence[int]) -> None:
        """Leave `people` undecided, and this sentence out of a reasoning's last claims."""
        self.hedged = self.hedged or set()  # the class defaults are empty and immutable; start own sets
        self.hedged_sentences = self.hedged_sentences or set()
        self.hedged.update(people)
        self.hedged_sentences.add(self.sentence)

    def assigned(self) -> set[int]:
        """Everyone given a role so far (kept incrementally, so "the rest" stays linear)."""
        self._assigned = self._assigned or set()
        self._assigned.update(person for person, _, _ in self.claimed[self._assigned_upto:])
        self._assigned_upto = len(self.claimed)
        return self._assigned

    def role(self, tok: str, tokens: Sequence[str], at: int) -> None:
        role = ROLE_WORDS[tok]
        if self.neg or self.neg_carried:
            role ^= (self.neg + self.neg_carried) % 2 == 1
            self.neg = self.neg_carried = 0
        self.saw_role = True
        if self.rare:
            self.excepting = self.ditto = self.ditto_here = self.elliptic = False
        cur, carry = self.cur, self.carry
        if cur and self.fwd is not None and self.fwd_here:
            # "Knight: Zoey knave: Oliver" -- names right after a role in its own clause are its.
            self.named(cur, self.fwd)
            cur = self.cur = []
        if cur or carry:
            self.named(cur + carry if carry else cur, role)
            self.cur = []
            if carry:
                self.carry = []
        elif self.quant is not None:
            self.pending.append((self.quant, role))
        else:
            self.fwd, self.fwd_here, self.fwd_took, self.heading = role, True, False, False
            self.fwd_at, self.fwd_alone, self.colon = at, at == 0 or tokens[at - 1] in SENTENCE_BREAKS, False
            return
        self.fwd, self.heading, self.quant = None, False, None

    def clause_break(self, at: int) -> None:
        if self.rare:
            self._rare_clause_break(at)
        if self.cur:
            if self.fwd is None:
                # names waiting for a role keep their clause's negations ("Neither A, nor B, is a knight")
                self.carry.extend(self.cur)
                self.neg_carried += self.neg
            else:
                self.named(self.cur, self.fwd)
                self.fwd_took = True
            self.cur = []
        # any other negation ends with its clause: "A is a knave (no doubt), B is a knight"
        self.fwd_here, self.neg = False, 0

    def _rare_clause_break(self, at: int) -> None:
        if self.neg_at == at - 1:
            self.elliptic = True  # "but Penelope is not."
        if self.ditto_here and self.cur and self.fwd is None and self.last_role_sentence == self.sentence:
            self.named(self.cur, self.last_role)  # "as is Evelyn, and Penelope is a knave"
            self.cur = []
        self.ditto_here = False

    def sentence_break(self, tok: str, at: int) -> None:
        if self.cur or self.rare:
            self.clause_break(at)
        else:
            self.fwd_here, self.neg = False, 0
        if tok == "?" and self.touched:
            self.hedge = self.rare = True  # a question is no claim: "Zoey - knight?"
        if self.rare:
            self._end_rare_sentence()
        if self.fwd is not None and not self.heading:
            # a role that took no name is a heading only as "Knights:" (or "Knights" alone) ending its line
            heading = not self.fwd_took and tok == "\n" and (self.colon or self.fwd_alone and self.fwd_at == at - 1)
            self.fwd, self.heading = (self.fwd, True) if heading else (None, False)
        if self.carry:
            self.carry = []
        if self.touched:
            self.touched = []
        self.neg_carried, self.saw_role = 0, False
        self.sentence += 1

    def _end_rare_sentence(self) -> None:
        self._resolve()
        if self.hedge and self.touched:
            self.hedge_people(self.touched)
        elif self.hedge and not self.saw_role:
            self.void = self.void or []
            self.void.append("a hedge that names nobody")
        if self.declining and self.touched:
            self.hedge_people(self.touched)  # "Zoey is a knight, but I am not sure"
        elif self.declining:
            self.void = self.void or []
            self.void.append("a sentence saying the roles cannot be determined")
        self.quant, self.only_bound, self.excluded, self.pending = None, None, [], []
        self.excepting = self.only = self.ditto = self.ditto_here = self.elliptic = self.hedge = False
        self.explaining = False
        self.declining = self.muted = self.quoted = self.supposing = self.quiet = self.rare = False
        self.events = self.claimed  # an assumption ends with its sentence

    def _resolve(self) -> None:
        """Bind what waits for the sentence's end: repeated or denied roles, quantifiers, "only"."""
        if self.carry and self.last_role is not None:
            if self.ditto:
                self.named(self.carry, self.last_role)
            elif self.elliptic:
                self.named(self.carry, not self.last_role)
        for quant, role in self.pending:
            excluded, assigned = set(self.excluded), self.assigned() if quant == "rest" else ()
            self.bind([p for p in range(self.n) if p not in excluded and p not in assigned], role)
            self.bind(self.excluded, not role)  # "everyone except Jacob is a knight": Jacob is not
        if self.only_bound is not None:
            people, role = self.only_bound
            self.bind([p for p in range(self.n) if p not in people], not role)

    def wake(self, tok: str, kind: str) -> bool:
        """While quiet: does `tok` end the quiet part (and is read)?"""
        sentence = kind == "sentence"
        if self.quoted and tok != "\n" or self.supposing and not sentence:
            return False
        if self.muted and not sentence and tok not in UNMUTE:
            return False
        if self.muted and tok not in KEEP_SPEAKER:
            self.cur, self.carry = [], []  # the speaker of "Zoey says ..., so ..." is no subject of what follows
        self.quoted = self.supposing = self.muted = self.quiet = False
        return True


def _set(flag: str):
    """An action that sets one of the binder's rare flags."""
    def action(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
        setattr(b, flag, True)
        b.rare = True
    return action


def _modifier(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    b.rare = True
    if tok in NEGATIONS:
        b.neg += 1
        b.neg_at = i
    if tok in HEDGES and not _hedge_exempt(b, tok, tokens, i):
        b.hedge = True
    if tok in CONDITIONS:
        b.hedge = b.hedge or (bool(b.touched) and not b.explaining)
        b.supposing = b.quiet = True
    elif tok in SUPPOSITIONS:
        b.supposing = b.quiet = True
    elif tok in ASSUMPTIONS and b.events is b.claimed:
        b.assumed = b.assumed or []
        b.events = b.assumed  # "Assume Zoey is a knight": what follows in the sentence is assumed
    if tok == "neither":
        b.ditto = True  # "Zoey is not a knight, and neither is Liam" (a role word after it cancels this)
    after = tokens[i + 1] if i + 1 < len(tokens) else ""
    if tok == "other" and after == "than":
        b.excepting = True  # "other than X, all are knights"
    elif tok in QUANT_REST:
        b.quant = "rest"
    elif (tok in QUANT_ALL or tok == "no" and after == "one") and b.quant is None and not _generic(tokens, i):
        b.quant = "all"  # "all three", "both", "no one"


def _generic(tokens: Sequence[str], i: int) -> bool:
    """A quantifier over a role is a rule, not an answer: "all knights tell the truth", "every knave lies"."""
    after = tokens[i + 1] if i + 1 < len(tokens) else ""
    if after == "the" and i + 2 < len(tokens):
        after = tokens[i + 2]
    return after in ROLE_WORDS


def _hedge_exempt(b: Binder, tok: str, tokens: Sequence[str], i: int) -> bool:
    """Hedge words that commit: "the only possible", "not possible", "could not", "not ... either"."""
    after = tokens[i + 1] if i + 1 < len(tokens) else "\n"
    if tok in ("possible", "possibly"):
        return b.neg > 0 or (i > 0 and tokens[i - 1] == "only")
    if tok == "could":
        return after == "not"
    if tok == "either":
        return after in SENTENCE_BREAKS or after in CLAUSE_SYMBOLS
    return False


def _clause(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    if tok == "but" and i > 0 and tokens[i - 1] in ALL_BUT:
        b.excepting = b.rare = True  # "all but Jacob are knights"
        return
    b.clause_break(i)
    if tok == "nor":
        _ditto(b, tok, tokens, i)  # "Zoey is not a knight, nor is Jacob"


def _declines_here(tokens: Sequence[str], i: int) -> bool:
    """A negation shortly before: "cannot determine", "impossible to say", "no way to tell"."""
    window = tokens[max(0, i - _DECLINE_WINDOW):i]
    return any(t in DECLINE_NEGATIONS for t in window) and "other" not in window  # not "no other solution"


def _decline(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    if tok in DECLINE_WORDS or _declines_here(tokens, i):
        b.declining = b.rare = True


def _report(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    if tok.startswith("tell") or tok == "told":
        if _declines_here(tokens, i):
            b.declining = b.rare = True
        if i + 1 >= len(tokens) or tokens[i + 1] not in TELL_REPORTS:
            return  # "tells the truth" is a role, not a report
    b.muted = b.quiet = b.rare = True


def _ditto(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    b.ditto = b.ditto_here = b.rare = True


def _colon(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    if b.fwd is not None and not b.cur:
        b.colon = True


def _resume(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    if (tok == "so" or tok == "as") and i + 1 < len(tokens) and tokens[i + 1] in SO_VERBS:
        _ditto(b, tok, tokens, i)  # "and so is Jacob", "as is Jacob"


def _only(b: Binder, tok: str, tokens: Sequence[str], i: int) -> None:
    # "Only X is ...", "the only knight is X", "X is the only knight", "the only one who ..."; not "X only lies"
    after = tokens[i + 1] if i + 1 < len(tokens) else ""
    names_or_role = after in ROLE_WORDS or after in ("one", "ones") or b.person(after) is not None
    if (not b.cur or tokens[i - 1] == "the") and names_or_role:
        b.only = b.rare = True


_ACTIONS = {
    "role": Binder.role,
    "clause": _clause,
    "sentence": lambda b, tok, tokens, i: b.sentence_break(tok, i),
    "report": _report,
    "modifier": _modifier,
    "colon": _colon,
    "resume": _resume,
    "explain": _set("explaining"),
    "except": _set("excepting"),
    "ditto": _ditto,
    "decline": _decline,
    "only": _only,
    "respectively": lambda b, tok, tokens, i: None,  # only in a sentence `pair_respectively` did not take
}


_QUOTES = frozenset({'"', "“", "”", "‘", "'"})


def _quote(b: Binder, kind: str, tokens: Sequence[str], i: int) -> None:
    """A quote opens or closes quoted speech, except around one word or two without a name
    ('"Zoey": "knight"', 'a "truth-teller"'): those are no claim, and no reason to stop reading."""
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
    people, extra = b.people, b.extra
    cur, touched, quiet, excepting = b.cur, b.touched, b.quiet, b.excepting
    for i, tok in enumerate(tokens[start:end], start):
        person = people.get(tok)
        if person is None:
            kind = KIND.get(tok)
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
        elif tok in ROLE_WORDS:
            roles.append(ROLE_WORDS[tok] ^ (neg % 2 == 1))
            neg = 0
        elif tok in NEGATIONS:
            neg += 1
        elif tok in HEDGES or tok in CONDITIONS:
            b.hedge = b.rare = True
    b.touched.extend(names)
    if len(names) == len(roles):
        for person, role in zip(names, roles, strict=True):
            b.named([person], role)
    else:
        b.hedge_people(names)
        b.notes = b.notes or []
        b.notes.append(f"'respectively' pairs {len(names)} names with {len(roles)} roles")
    b.sentence_break(".", end)

"""The binding state machine behind `claims` (read its docstring first): its state and the moves a role word, a
clause break and a sentence break make; `claims.feed` drives it over tokens."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from curriculum.tasks.kk.grading.claim_words import KEEP_SPEAKER, KIND, ROLE_WORDS, SENTENCE_BREAKS, UNMUTE


class Binder:
    """The binding state machine of step 3 (`claims`), one per text (people are indices, the puzzle's `n` first).
    `rare` marks a sentence that set state few set (it starts from the class defaults below), so most end cheaply."""

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
            self.own("invented").append(tok)
        return person

    def own(self, name: str) -> list:
        """The binder's own list `name`, made on first write (its class default is an empty, immutable tuple)."""
        if isinstance(getattr(self, name), tuple):
            setattr(self, name, [])
        return getattr(self, name)

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
        if isinstance(self.hedged, frozenset):  # the class defaults are empty and immutable; start own sets
            self.hedged = set()
        if isinstance(self.hedged_sentences, frozenset):
            self.hedged_sentences = set()
        self.hedged.update(people)
        self.hedged_sentences.add(self.sentence)

    def assigned(self) -> set[int]:
        """Everyone given a role so far (kept incrementally, so "the rest" stays linear)."""
        if isinstance(self._assigned, frozenset):
            self._assigned = set()
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
            self.own("void").append("a hedge that names nobody")
        if self.declining and self.touched:
            self.hedge_people(self.touched)  # "Zoey is a knight, but I am not sure"
        elif self.declining:
            self.own("void").append("a sentence saying the roles cannot be determined")
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

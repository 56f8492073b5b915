"""The words the claims parser (`claims`) knows, each of one kind (`KIND`: a role, a negation, a hedge ...), and
how text becomes its tokens; everything else is noise, but names (the puzzle's, `KNOWN_NAMES`, `capitalised_strangers`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from curriculum.tasks.kk.english import COMMON_NAMES

_TOKEN = re.compile(r"[^\W_]+|[\n.;!?]|[,&()\[\]{}|/:\"“”‘]|'(?!\w)")
# An apostrophe that opens a word is an opening single quote; one that ends a word may close it
# (or be a plural possessive: "James' role").
_OPENING_QUOTE = re.compile(r"(?<!\w)'(?=\w)")
SENTENCE_BREAKS = frozenset("\n.;!?")
CLAUSE_SYMBOLS = frozenset(",&()[]{}|")

ROLE_WORDS = {
    **dict.fromkeys(("knight", "knights", "truth", "truthful", "truthfully", "honest", "honestly", "truthteller"),
                    True),
    **dict.fromkeys(("knave", "knaves", "liar", "liars", "lie", "lies", "lying", "lied", "dishonest", "falsely",
                     "untruthful", "deceitful"), False),
}
NEGATIONS = frozenset({"not", "no", "never", "cannot", "neither", "none", "nobody", "impossible"})
# Words that offer alternatives: the sentence commits to nothing about the people it names.
HEDGES = frozenset({
    "or", "/", "either", "might", "may", "maybe", "perhaps", "possibly", "possible", "probably", "likely", "unlikely",
    "could", "unknown", "unclear", "uncertain", "unsure", "undecided", "guess", "depends", "seems", "seem",
    "alternatively", "versa",
})
# A condition on a claim already made qualifies it (a hedge); at a sentence's start it opens a supposition.
CONDITIONS = frozenset({"if", "unless", "whether", "otherwise", "iff"})
# What would follow from something is no claim; what is assumed is kept apart (`Claims.assumed`).
SUPPOSITIONS = frozenset({"would"})
ASSUMPTIONS = frozenset({"assume", "assuming", "assumed", "suppose", "supposing", "supposed", "hypothetically",
                         "hypothetical"})
# Not "they": in "Zoey is a knight since they told the truth" it would sweep in everyone.
QUANT_ALL = frozenset({"all", "both", "everyone", "everybody", "every", "each", "neither", "none", "nobody"})
QUANT_REST = frozenset({"other", "others", "rest", "remaining", "else"})
JOINERS = frozenset({"and", "but", "while", "whereas", "nor", "plus", "also"})
EXCEPT = frozenset({"except", "excluding", "besides", "apart"})
DITTO = frozenset({"too", "likewise", "same", "well"})
# Reported speech: what follows quotes a claim, not the answer.
REPORTING = frozenset({
    "said", "says", "saying", "claim", "claims", "claimed", "claiming", "statement", "statements", "stated", "states",
    "stating", "remarked", "asserted", "asserts", "assertion", "mentioned", "commented", "noted", "declared",
    "expressed", "insisted", "insists", "accused", "accuses", "according", "words", "told", "tells", "tell",
})
# "told the truth" is a role; "told you that ..." is a report.
TELL_REPORTS = frozenset({"you", "us", "me", "him", "her", "them", "that", "everyone"})
# Words that end a report and start a new claim ("... is false, so Zoey is a knave").
RESUMES = frozenset({"so", "thus", "therefore", "hence", "which", "meaning", "consequently", "however"})
EXPLAINS = frozenset({"because", "since"})
UNMUTE = RESUMES | EXPLAINS | frozenset({"but", ")", "]", "}", "|"})
KEEP_SPEAKER = frozenset({"but", ")", "]", "}", "|"})  # "Zoey claims to be a knight but is a knave"
ALL_BUT = frozenset({"all", "everyone", "everybody"})
SO_VERBS = frozenset({"is", "are", "was", "does", "do", "did"})

# "cannot determine", "not enough information", "no way to tell", "impossible to say", "no solution", ...
DECLINE_WORDS = frozenset({"undetermined", "undeterminable", "indeterminate", "inconclusive", "insufficient",
                           "unknowable", "unsolvable", "ambiguous"})
DECLINE_AFTER_NEGATION = frozenset({"determine", "determined", "decide", "decided", "tell", "know", "conclude",
                                    "identify", "say", "solve", "sure", "certain", "enough", "solution"})
DECLINE_NEGATIONS = NEGATIONS | {"unable"}

# First names a model invents: the K&K pool (every puzzle draws from it) and common English ones.
KNOWN_NAMES = frozenset(n.lower() for n in COMMON_NAMES) | frozenset({
    "alice", "bob", "carol", "charlie", "dave", "george", "hannah", "john", "mary", "peter", "sam", "sarah", "tom",
    "anna", "ben", "emily", "jane", "kate", "leo", "lucy", "max", "nora", "ruby", "zephyr", "zara", "ella", "layla",
    "luna", "nathan", "ryan", "tyler", "dylan", "adam", "isaac",
})
KIND = {
    **dict.fromkeys(NEGATIONS | HEDGES | QUANT_ALL | QUANT_REST | CONDITIONS | SUPPOSITIONS | ASSUMPTIONS,
                    "modifier"),
    **dict.fromkeys(CLAUSE_SYMBOLS | JOINERS, "clause"),
    **dict.fromkeys(SENTENCE_BREAKS, "sentence"),
    **dict.fromkeys(ROLE_WORDS, "role"),
    **dict.fromkeys(REPORTING, "report"),
    **dict.fromkeys(RESUMES, "resume"),
    **dict.fromkeys(EXPLAINS, "explain"),
    **dict.fromkeys(EXCEPT, "except"),
    **dict.fromkeys(DITTO, "ditto"),
    **dict.fromkeys(DECLINE_WORDS | DECLINE_AFTER_NEGATION - REPORTING, "decline"),
    **dict.fromkeys(KNOWN_NAMES, "stranger"),  # unless the puzzle's: its names are looked up first
    ":": "colon", '"': "quote", "“": "quote", "”": "quote", "‘": "open", "'": "close",
    "as": "resume", "/": "modifier", "only": "only", "respectively": "respectively",
}

# Capitalised words that are no person, though they can sit mid-sentence ("Final Answer", "Case 2").
NOT_NAMES = frozenset({
    "the", "a", "an", "and", "or", "but", "so", "thus", "therefore", "hence", "final", "answer", "answers",
    "conclusion", "summary", "solution", "solutions", "step", "steps", "case", "cases", "person", "people", "name",
    "names", "role", "roles", "identity", "identities", "status", "type", "verification", "verify", "check", "checking",
    "note", "yes", "true", "false", "correct", "incorrect", "wrong", "is", "are", "in", "on", "of", "for", "to", "this",
    "that", "these", "those", "it", "its", "we", "they", "he", "she", "his", "her", "their", "then", "now", "let",
    "lets", "as", "when", "given", "based", "after", "first", "second", "third", "fourth", "fifth", "sixth", "seventh",
    "eighth", "last", "finally", "next", "consistent", "inconsistent", "contradiction", "result", "results", "table",
    "list", "island", "inhabitant", "inhabitants", "character", "characters", "reasoning", "explanation", "analysis",
    "who", "what", "whom", "whose", "from", "with", "by", "assignment", "assignments", "one", "two", "three", "four",
    "five", "six", "seven", "eight", "option", "scenario", "hypothesis", "assumption", "ok", "okay", "here", "there",
    "overall", "clearly", "indeed", "wait", "good", "done", "puzzle", "problem", "question", "am", "was", "were", "be",
    "been", "has", "have", "had", "do", "does", "did", "can", "will", "should", "must", "lastly", "similarly",
    "additionally", "furthermore", "moreover", "conversely", "statement", "knight", "knave", "liar", "truth", "teller",
    "boxed", "text", "proof", "premise", "rule", "rules", "scenarios", "options", "remember", "recall", "again", "also",
    "if", "not", "all", "islander", "islanders", "resident", "residents", "individual", "individuals", "speaker",
    "speakers", "native", "natives", "villager", "villagers", "persons", "participant", "participants", "member",
    "members", "logic", "verified", "confirmed", "valid", "invalid", "key", "legend", "total", "count", "number",
    "part", "section", "quiz", "condition", "conditions", "reason", "reasons", "hint",
})
# A capital, then fixed-width look-behinds for what precedes it (a letter, digit or comma, a space and
# up to two emphasis marks): no nested quantifiers, linear, and the capital lets the scan skip ahead.
_MID_SENTENCE_CAPITALISED = re.compile(
    r"[A-Z](?:(?<=[a-z0-9,] [A-Z])|(?<=[a-z0-9,] [*_][A-Z])|(?<=[a-z0-9,] [*_][*_][A-Z]))[a-z]+\b")


def tokenize(text: str) -> list[str]:
    """Lower-case word and break tokens of `text`.

    >>> tokenize("**Zoey** isn't a Knave; (2) Ava-Avery")
    ['zoey', 'is', 'not', 'a', 'knave', ';', '(', '2', ')', 'ava', 'avery']
    >>> tokenize('William: knight/knave, "Ava lies"')
    ['william', ':', 'knight', '/', 'knave', ',', '"', 'ava', 'lies', '"']
    """
    text = text.lower()
    if "'" in text or "’" in text:
        text = text.replace("’", "'").replace("can't", "cannot").replace("n't", " not")
        text = _OPENING_QUOTE.sub("‘", text)
    return _TOKEN.findall(text)


def name_tokens(names: Sequence[str]) -> list[tuple[str, ...]]:
    """Each name as tokens; a name that is one word (the common case) skips the regex."""
    return [(name.lower(),) if name.isascii() and name.isalpha()
            else tuple(w for w in tokenize(name) if KIND.get(w, "stranger") == "stranger") for name in names]


def merge_names(tokens: list[str], words: list[tuple[str, ...]]) -> list[str]:
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


def capitalised_strangers(text: str, own: Collection[str]) -> set[str]:
    """Capitalised words mid-sentence that are no common word and not the puzzle's: people a model invents.

    >>> sorted(capitalised_strangers("Final Answer: Zoey and **Quinn** are knights. Therefore Zoey lies.", {"zoey"}))
    ['quinn']
    """
    words = _MID_SENTENCE_CAPITALISED.findall(text)
    return {word.lower() for word in words}.difference(own, NOT_NAMES, KIND) if words else set()

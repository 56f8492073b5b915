"""The GSM8K grader: numbers read exactly, anything else refused, and the format scans equal to the
recipe's regular expressions on every text."""

from __future__ import annotations

import itertools
import re
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curriculum.tasks.gsm8k.grader import SOFT_FORMAT, STRICT_FORMAT, grade, read_number, soft_format, strict_format

WELL_FORMED = "<reasoning>\n48 / 2 = 24\n24 + 48 = 72\n</reasoning>\n<answer>\n{}\n</answer>\n"


@pytest.mark.parametrize(("text", "number"), [
    ("72", "72"),
    (" 72 \n", "72"),  # the block's own newlines and spaces
    ("1,000", "1000"),  # thousands commas
    ("12,345,678", "12345678"),
    ("$18", "18"),  # a dollar sign
    ("-$18", "-18"),
    ("72.", "72"),  # a sentence's full stop
    ("2.50", "2.5"),  # trailing decimal zeros are the same number
    ("5.0", "5"),
    ("007", "7"),  # leading zeros too
    ("-0", "0"),  # minus zero is zero
    ("$1,234.50.", "1234.5"),  # all of it at once
    ("1,00", None),  # not a thousands group
    ("1,0000", None),
    ("about 72", None),  # words around the number
    ("72 dollars", None),  # units
    ("72%", None),
    ("5 or 6", None),  # two numbers
    ("5 6", None),
    ("5, 6", None),
    ("3/4", None),  # a fraction is not a decimal
    ("1e3", None),  # nor is scientific notation
    ("+5", None),  # a plus sign is not in GSM8K's answers
    ("−5", None),  # a Unicode minus is not '-'
    ("٥", None),  # another script's digit
    ("５", None),  # a full-width digit
    ("72..", None),  # one full stop only
    (".5", None),  # a decimal needs its leading digit
    ("", None),
    ("\\boxed{72}", None),  # LaTeX
    ("**72**", None),  # markdown
])
def test_read_number(text, number):
    read = read_number(text)
    assert (read.text if read else None) == number


@pytest.mark.parametrize(("completion", "answer", "correct", "format_ok", "why"), [
    (WELL_FORMED.format("72"), "72", True, True, "the recipe's output"),
    (WELL_FORMED.format("$72."), "72", True, True, "a dollar and a full stop are the same number"),
    (WELL_FORMED.format("72.00"), "72", True, True, "decimal zeros are the same number"),
    (WELL_FORMED.format("71"), "72", False, True, "well formed, wrong"),
    (WELL_FORMED.format("72.5"), "72", False, True, "exact: no tolerance"),
    (WELL_FORMED.format("about 72"), "72", False, True, "hedged: refused, whatever the number"),
    (WELL_FORMED.format("72 or 73"), "72", False, True, "two numbers: refused though one is right"),
    ("<answer>72</answer>", "72", True, False, "right without the format: correct, format not ok"),
    ("The answer is 72.", "72", False, False, "no answer block: the recipe would read the whole text"),
    ("<answer>71</answer> sorry, <answer>72</answer>", "72", True, False, "the final block is the answer"),
    ("<answer>72</answer> sorry, <answer>71</answer>", "72", False, False, "... either way round"),
    ("<reasoning>\n72\n</reasoning>\n<answer>\n72", "72", False, False, "an unclosed block is no answer"),
    ([{"role": "assistant", "content": "<answer>1,000</answer>"}], "1000", True, False, "TRL's chat form"),
    ("<answer>-5</answer>", "-5", True, False, "negative answers exist in GSM8K"),
])
def test_grade(completion, answer, correct, format_ok, why):
    graded = grade(completion, answer)
    assert (graded.correct, graded.format_ok) == (correct, format_ok), why
    assert graded.score == float(correct)
    assert bool(graded.reasons) == (not correct or not format_ok), graded.reasons


def test_a_refused_answer_says_why_and_a_reference_must_be_a_number():
    assert grade("<answer>five</answer>", "5").reasons == (
        r"format: not <reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>", "answer is not one number: 'five'")
    assert grade("no tags", "5").reasons[-1] == "no <answer> block"
    with pytest.raises(ValueError, match="reference answer 'five' is not a number"):
        grade("<answer>5</answer>", "five")


@pytest.mark.parametrize(("text", "strict", "soft"), [
    (WELL_FORMED.format("5"), True, True),
    (WELL_FORMED.format("5").rstrip("\n"), True, True),  # `\n?$`: the final newline is optional
    (WELL_FORMED.format("5") + "\n", True, True),  # `$` also matches before a last newline: two are allowed
    (WELL_FORMED.format("5") + "\n\n", False, True),  # three are not
    (WELL_FORMED.format("5") + "thanks", False, True),  # text after </answer> breaks strict only
    ("<reasoning>r</reasoning><answer>5</answer>", False, True),  # no newlines around the tags
    ("<reasoning>\n\n</reasoning>\n<answer>\n\n</answer>", True, True),  # `.*?` may be empty
    ("<reasoning>\n</reasoning>\n<answer>\n5\n</answer>", False, True),  # ... but its newlines are its own
    ("Sure! <reasoning>\nr\n</reasoning>\n<answer>\n5\n</answer>", False, False),  # re.match: nothing before
    ("<reasoning>\nr\n</reasoning>\n<answer>\n5\n</answer>\n<answer>\n6\n</answer>", True, True),  # the regex's own gap
    ("<answer>\n5\n</answer>\n<reasoning>\nr\n</reasoning>", False, False),  # the order matters
])
def test_format_table(text, strict, soft):
    assert (strict_format(text), soft_format(text)) == (strict, soft)


# The recipe's tag runs as whole pieces (so the texts often match) and as loose parts (so they often don't).
PIECES = ["<reasoning>\n", "\n</reasoning>\n<answer>\n", "\n</answer>", "\n", "x", "<reasoning>", "</reasoning>",
          "<answer>", "</answer>"]


def test_format_scans_equal_the_recipe_regexes_on_every_short_text():
    texts = ["".join(p) for n in range(6) for p in itertools.product(PIECES[:8], repeat=n)]
    strict = [(strict_format(t), bool(re.match(STRICT_FORMAT, t, re.DOTALL))) for t in texts]
    soft = [(soft_format(t), bool(re.match(SOFT_FORMAT, t, re.DOTALL))) for t in texts]
    assert [t for t, (ours, theirs) in zip(texts, strict, strict=True) if ours != theirs] == []
    assert [t for t, (ours, theirs) in zip(texts, soft, strict=True) if ours != theirs] == []
    # the comparison has teeth: both verdicts occur for both checks
    assert {v for v, _ in strict} == {v for v, _ in soft} == {True, False}


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=16))
def test_format_scans_equal_the_recipe_regexes_on_longer_texts(pieces):
    text = "".join(pieces)
    assert strict_format(text) == bool(re.match(STRICT_FORMAT, text, re.DOTALL)), repr(text)
    assert soft_format(text) == bool(re.match(SOFT_FORMAT, text, re.DOTALL)), repr(text)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="0123456789,.$- ab", max_size=12))
def test_read_number_never_accepts_what_decimal_reads_differently(text):
    read = read_number(text)
    if read is not None:  # what is accepted is a plain decimal once $, commas and one full stop are gone
        plain = text.strip().removesuffix(".").replace("$", "").replace(",", "")
        assert Decimal(plain) == Decimal(read.text)

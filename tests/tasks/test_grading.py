"""Grading on tricky responses: nested braces, equivalent forms, percentages, units, thinking blocks, letters."""

from __future__ import annotations

import threading

import pytest

from tokenrouter.tasks.grading import extract_answer, extract_choice, is_correct

MATH_CASES = [
    # (response, gold, expected)
    ("So the answer is \\boxed{\\dfrac{1}{2}}.", "\\frac{1}{2}", True),
    ("\\boxed{\\frac12}", "0.5", True),
    ("\\boxed{\\tfrac{3}{4}}", "3/4", True),
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\sqrt{2}/2", True),
    ("\\boxed{\\frac{4}{\\boxed{2}}}", "2", True),  # nested \boxed inside \boxed
    ("\\boxed{\\left(\\frac{1}{2}, \\frac{3}{4}\\right)}", "(1/2, 3/4)", True),  # nested braces
    ("\\boxed{\\{2,1\\}}", "\\{1,2\\}", True),
    ("\\boxed{50\\%}", "50", True),  # percent vs plain
    ("\\boxed{50}", "50\\%", True),
    ("\\boxed{25\\%}", "50", False),
    ("\\boxed{5 \\text{ cm}}", "5", True),  # units
    ("\\boxed{72\\text{ dollars}}", "72", True),
    ("\\boxed{\\$72}", "72", True),
    ("\\boxed{90^\\circ}", "90", True),
    ("\\boxed{1,000}", "1000", True),  # thousands separator
    ("\\boxed{1{,}000}", "1000", True),
    ("\\boxed{x = 3}", "3", True),  # equation vs value
    ("\\boxed{-3}", "3", False),
    ("\\boxed{3.0}", "3", True),
    ("\\boxed{\\sqrt{12}}", "2\\sqrt{3}", True),
    ("\\boxed{1+x^2}", "x^2+1", True),
    ("\\boxed{[1,2)}", "[1,2)", True),
    ("\\boxed{(1,2]}", "[1,2)", False),
    ("\\boxed{\\infty}", "\\infty", True),
    ("\\boxed{\\text{5}}", "5", True),
    ("\\boxed 7", "7", True),  # \boxed without braces
    ("\\fbox{12}", "12", True),
    ("First \\boxed{3}, but on reflection \\boxed{4}.", "4", True),  # the last box counts
    ("First \\boxed{3}, but on reflection \\boxed{4}.", "3", False),
    ("<think>maybe \\boxed{9}</think>The answer is \\boxed{10}.", "10", True),  # only after </think>
    ("<think>maybe \\boxed{9}</think>The answer is \\boxed{10}.", "9", False),
    ("<think>I think it is \\boxed{10} but let me check", "10", False),  # thinking never closed
    ("reasoning</think>\nFinal Answer: The final answer is $204$. I hope it is correct.", "204", True),
    ("The answer is 10.", "10", True),  # plain text, no box
    ("Answer: 1.5", "3/2", True),
    ("We get 12 apples and then 15 apples in total", "15", True),  # last number fallback
    ("We get 12 apples and then 15 apples in total", "12", False),
    ("no numbers at all", "5", False),
    ("", "5", False),
    ("\\boxed{}", "5", False),
    ("\\boxed{\\pi}", "3.14159", False),  # symbolic vs rounded value is not the same answer
    ("\\boxed{\\frac{1}{3}}", "\\dfrac{1}{3}", True),
    ("$\\boxed{204}$", "204", True),
    ("\\boxed{204}", "204.", True),
    ("\\boxed{0.333}", "1/3", False),
]

CHOICE_CASES = [
    ("\\boxed{B}", "B", True),
    ("\\boxed{(C)}", "C", True),
    ("\\boxed{\\text{D}}", "D", True),
    ("\\boxed{\\textbf{A}}", "A", True),
    ("\\boxed{b}", "B", True),
    ("\\boxed{B}", "C", False),
    ("Answer: B", "B", True),
    ("The correct answer is (D).", "D", True),
    ("the answer is **C**", "C", True),
    ("Comparing (A) and (B), the best is (B)", "B", True),
    ("Comparing (A) and (B), the best is (B)", "A", False),
    ("Long reasoning...\nC", "C", True),
    ("Long reasoning...\nBecause of that.", "B", False),  # a word starting with B is not a letter
    ("<think>\\boxed{A}</think>\\boxed{C}", "C", True),
    ("<think>\\boxed{A}</think>\\boxed{C}", "A", False),
    ("\\boxed{B) 3.2 eV}", "B", True),
    ("I cannot decide", "A", False),
]


@pytest.mark.parametrize(("response", "gold", "expected"), MATH_CASES)
def test_math(response: str, gold: str, expected: bool) -> None:
    assert is_correct(response, gold) is expected


@pytest.mark.parametrize(("response", "gold", "expected"), CHOICE_CASES)
def test_choice(response: str, gold: str, expected: bool) -> None:
    assert is_correct(response, gold, kind="choice") is expected


def test_enough_cases() -> None:
    assert len(MATH_CASES) + len(CHOICE_CASES) >= 40


def test_extract_answer() -> None:
    assert extract_answer("x \\boxed{\\frac{a}{b^{2}}} y") == "\\frac{a}{b^{2}}"
    assert extract_answer("<think>\\boxed{1}</think> so \\boxed{2}") == "2"
    assert extract_answer("<think>unfinished") is None
    assert extract_answer("The answer is $17$.") == "17"
    assert extract_choice("Answer: (c)") == "C"


def test_grading_off_main_thread() -> None:
    """math-verify's timeout uses SIGALRM; grading from a worker thread must still work."""
    out: list[bool] = []
    thread = threading.Thread(target=lambda: out.append(is_correct("\\boxed{\\dfrac{1}{2}}", "0.5")))
    thread.start()
    thread.join(30)
    assert out == [True]


def test_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown grading kind"):
        is_correct("1", "1", kind="essay")

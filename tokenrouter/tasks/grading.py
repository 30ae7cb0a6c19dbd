"""Grading responses against gold answers: math by equivalence (`math-verify`), multiple choice by letter.

Only the final answer counts: for reasoning models the text after the last `</think>` (a response whose
thinking never closed has no answer), and in it the last `\\boxed{...}` (braces may nest), else an
"answer is ..." / "Answer: ..." phrase, else the last number. Equivalence itself (fractions, \\dfrac, LaTeX vs
plain text, units, sets, intervals) is math-verify's; we only add the percent-sign leniency it lacks.
"""

from __future__ import annotations

import re
import threading

THINK_END = "</think>"
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")
_ANSWER_PHRASE = re.compile(r"answer\s*(?:is|:|=)\s*:?\s*(.+?)(?:\n|$)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
_PERCENT = re.compile(r"\\?%\s*$")
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\{([^{}]*)\}")


def final_text(response: str) -> str | None:
    """The part of a response that may hold the answer: after the last </think>; None while thinking is
    still open (the answer was never written)."""
    if THINK_END in response:
        return response.rsplit(THINK_END, 1)[1]
    if "<think>" in response:
        return None
    return response


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} / \\fbox{...} with nested braces, or of `\\boxed 5`."""
    found = None
    for match in _BOXED.finditer(text):
        start = match.end()
        if start < len(text) and text[start] == "{":
            depth = 0
            for pos in range(start, len(text)):
                depth += {"{": 1, "}": -1}.get(text[pos], 0)
                if depth == 0:
                    found = text[start + 1 : pos]
                    break
        else:
            token = re.match(r"[^\s$]+", text[start:])
            if token:
                found = token.group(0)
    return None if found is None else found.strip()


def extract_answer(response: str) -> str | None:
    """The final answer written in a response (see the module docstring), or None."""
    text = final_text(response)
    if text is None:
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    phrases = _ANSWER_PHRASE.findall(text)
    if phrases:
        phrase = phrases[-1].strip()
        math = re.match(r"\$+([^$]+)\$+", phrase)  # "$10$. I hope it is correct." -> 10
        answer = math.group(1) if math else re.split(r"\.(?=\s|$)|,\s", phrase)[0]
        if answer.strip():
            return answer.strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def is_correct(response: str, answer: str, kind: str = "math") -> bool:
    """Whether `response` states the gold `answer`: kind "math" (equivalence) or "choice" (same letter)."""
    if kind == "choice":
        letter = extract_choice(response)
        return letter is not None and letter == _letter(answer)
    if kind != "math":
        raise ValueError(f"unknown grading kind {kind!r} (math | choice)")
    predicted = extract_answer(response)
    if predicted is None or not str(answer).strip():
        return False
    gold = str(answer).strip()
    if _equivalent(gold, predicted):
        return True
    # math-verify reads "50\%" as text: compare the numbers when either side is a percentage
    bare_gold, bare_pred = _PERCENT.sub("", gold), _PERCENT.sub("", predicted)
    return (bare_gold, bare_pred) != (gold, predicted) and _equivalent(bare_gold, bare_pred)


def _equivalent(gold: str, predicted: str) -> bool:
    from math_verify import parse, verify

    # math-verify's timeouts use SIGALRM, which only the main thread may set
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    gold_parsed = parse(_as_latex(gold), parsing_timeout=timeout)
    pred_parsed = parse(_as_latex(predicted), parsing_timeout=timeout)
    if not gold_parsed or not pred_parsed:
        return _normalize(gold) == _normalize(predicted)
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))


def _as_latex(text: str) -> str:
    text = text.strip()
    return text if text.startswith("$") else f"${text}$"


def _normalize(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


def extract_choice(response: str) -> str | None:
    """The option letter a response chose: \\boxed{B} / \\boxed{(B)} / \\boxed{\\text{B}}, else
    "answer is (B)" / "Answer: B", else the last "(B)", else a final line that is just the letter."""
    text = final_text(response)
    if text is None:
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return _letter(boxed.upper() if len(boxed.strip()) == 1 else boxed)
    phrases = re.findall(r"answer\s*(?:is|:)\s*:?\s*\**\(?([A-J])\b\)?", text, re.IGNORECASE)
    if phrases:
        return phrases[-1].upper()
    parens = re.findall(r"\(([A-J])\)", text)
    if parens:
        return parens[-1]
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return _letter(lines[-1]) if lines else None


def _letter(text: str) -> str | None:
    """A single capital option letter once wrappers are removed: "B", "(B)", "\\text{B}", "**B**", "B) 42"."""
    core = _LATEX_TEXT.sub(lambda m: m.group(1), str(text)).strip()
    core = re.sub(r"^(?:option|choice)\s*", "", core.lstrip("([{*$ \t"), flags=re.IGNORECASE)
    match = re.match(r"([A-J])(?![A-Za-z0-9])", core)
    return match.group(1) if match else None

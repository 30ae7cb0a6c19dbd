"""Stop-string matching on text that arrives in pieces (tokenrouter/server/stop.py)."""

from __future__ import annotations

import pytest

from tokenrouter.server.stop import StopMatcher


def _run(stops: tuple[str, ...], pieces: list[str]) -> tuple[list[str], bool]:
    m = StopMatcher(stops)
    out = [m.feed(p) for p in pieces]
    if not m.stopped:
        out.append(m.flush())
    return out, m.stopped


@pytest.mark.parametrize(("stops", "pieces", "text", "stopped"), [
    (("\n\n",), ["a", "b\n", "\nc"], "ab", True),  # straddles two pieces
    (("END",), ["xE", "N", "Dy"], "x", True),
    (("END",), ["xE", "N", "y"], "xENy", False),  # a possible prefix held back, then released
    (("ab", "b"), ["cab"], "c", True),  # the earliest match wins
    (("Question:",), ["1 + 1 = 2", "Quest", "ion: next"], "1 + 1 = 2", True),
    ((), ["a", "b"], "ab", False),
])
def test_text_before_the_first_stop_string(stops: tuple[str, ...], pieces: list[str], text: str,
                                           stopped: bool) -> None:
    out, hit = _run(stops, pieces)
    assert "".join(out) == text and hit == stopped


def test_a_possible_stop_prefix_is_held_back_while_streaming() -> None:
    m = StopMatcher(("END",))
    assert m.feed("abcE") == "abc"  # "E" may start "END"
    assert m.feed("N") == ""
    assert m.feed("x") == "ENx"
    assert m.feed("y") == "y" and not m.stopped


def test_unarmed_text_is_released_and_cannot_start_a_match() -> None:
    m = StopMatcher(("ab",))
    assert m.feed("xa", armed=False) == "xa"  # before min_tokens: released whole, no hold-back
    assert m.feed("b") == "b" and not m.stopped  # "ab" would straddle the floor: not a match
    assert m.feed("zab") == "z" and m.stopped and m.text == "xabz"

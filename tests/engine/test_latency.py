"""LatencyProfile over context lengths: linear between measured contexts, clamped outside, and old
single-context profiles still load (the same table at every context)."""

from __future__ import annotations

import json

import pytest

from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.errors import UserError

OLD = {"model": "m", "device": "cpu", "dtype": "float32", "context": 256,
       "decode_ms": {"1": 2.0, "4": 3.0}, "extend_ms_per_token": 0.01}
NEW = {**OLD, "decode_ms_by_context": {"256": {"1": 2.0, "4": 3.0}, "2048": {"1": 4.0, "4": 7.0, "8": 11.0}},
       "contexts_skipped": {"8192": "the KV pool (1000 tokens) cannot hold batch 8 at this context"}}


def test_an_old_profile_loads_and_is_the_same_at_every_context(tmp_path) -> None:
    (tmp_path / "old.json").write_text(json.dumps(OLD))
    prof = LatencyProfile.from_json(tmp_path / "old.json")
    assert prof.by_context == () and prof.decode_ms(4) == 3.0
    assert prof.at_context(8192) is prof and prof.at_context(None) is prof


def test_step_times_interpolate_linearly_between_contexts_and_clamp_outside() -> None:
    prof = LatencyProfile.from_dict(NEW, "test")
    assert prof.decode_ms(1) == 2.0  # `decode_ms` (the base context) until a context is asked for
    assert prof.at_context(64).decode_ms(4) == 3.0 and prof.at_context(256).decode_ms(1) == 2.0
    assert prof.at_context(100_000).decode_ms(4) == 7.0 and prof.at_context(2048).decode_ms(8) == 11.0
    mid = prof.at_context(1152)  # halfway: batch 8 is extrapolated at 256 (3 + 4/3 * 4 = 4.33), measured at 2048
    assert mid.decode_ms(1) == pytest.approx(3.0) and mid.decode_ms(4) == pytest.approx(5.0)
    assert mid.decode_ms(8) == pytest.approx((3.0 + 4.0 / 3.0 + 11.0) / 2)
    assert mid.per_token_ms == 0.01 and mid.at_context(2048) == prof.at_context(2048)
    steps = [prof.at_context(c).decode_ms(b) for b in (1, 4, 8) for c in range(0, 4096, 128)]
    for b in range(3):  # monotone in context between and beyond the measured ones
        row = steps[b * 32:(b + 1) * 32]
        assert row == sorted(row)


@pytest.mark.parametrize("bad", [{"decode_ms_by_context": {"0": {"1": 1.0}}},
                                 {"decode_ms_by_context": {"256": {}}},
                                 {"decode_ms_by_context": {"x": {"1": 1.0}}}])
def test_a_bad_context_table_is_a_one_line_error(bad) -> None:
    with pytest.raises(UserError, match="test") as err:
        LatencyProfile.from_dict({**OLD, **bad}, "test")
    assert "\n" not in str(err.value)

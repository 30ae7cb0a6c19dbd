"""Runtime pieces without processes: wire format, feasible thresholds, delayed-batching decisions."""

from __future__ import annotations

import pytest

from tokenrouter.api import PeerRequest, RouterRequest
from tokenrouter.engine.base import SamplingParams
from tokenrouter.errors import UserError
from tokenrouter.runtime.messages import (
    Abort,
    Active,
    PeerMessage,
    Report,
    RequestMeta,
    Submit,
    decode,
    encode,
)
from tokenrouter.runtime.scheduler import Entry, Scheduler, Status
from tokenrouter.runtime.thresholds import ThresholdTable, make_feasible

META = RequestMeta(16, SamplingParams(0.7, 0.9, 5, 3), 4, [2])


def test_messages_round_trip_in_one_frame() -> None:
    msgs = [
        Submit("r1", [1, 2, 3], META),
        Active(3, [1, 2]),
        Active(3, [1, 2], [0b1010, 0b1100]),
        PeerMessage(PeerRequest("r1", 2, [3, 4], 2, fields={"x": 1.5}), 0, 7, META),
        PeerMessage(PeerRequest("r1", 0, [], 2, finished=True), 1, 8),
        Report(1, [("r1", 0, [5])], [("r1", "stop", 1, 8)], [], {"routes": {0: 1}}),
    ]
    assert decode(encode(msgs)) == msgs
    with pytest.raises(ValueError, match="malformed"):
        decode(b"\x93\x01\x02")
    with pytest.raises(ValueError, match="malformed"):  # a well-formed frame with a field of the wrong type
        decode(encode([Abort("r1")]).replace(b"\xa2r1", b"\x2a"))  # rid 42


def test_thresholds_are_clipped_to_be_feasible_for_every_n() -> None:
    assert make_feasible([1, 4], 4) == [1, 4]
    assert make_feasible([1, 4], 3) == [1, 3]
    assert make_feasible([5, 5, 5], 3) == [1, 2, 2]
    table = ThresholdTable([[1, 1], [1, 2], [2, 3]], 2)
    assert [table(n) for n in (1, 2, 3, 10)] == [[1, 1], [1, 2], [2, 2], [2, 3]]
    for n in range(1, 20):
        assert sum(b - 1 for b in table(n)) < n
    assert ThresholdTable([4, 4], 2, delayed_batching=False)(8) == [1, 1]
    assert ThresholdTable("auto", 2)(5) == [1, 1]  # no throughput-model inputs: plain continuous batching
    auto = ThresholdTable("auto", 2, auto_rows={1: [1, 1], 2: [1, 2], 3: [1, 3]})
    assert [auto(n) for n in (1, 2, 3, 4, 9)] == [[1, 1], [1, 2], [1, 3], [1, 3], [1, 3]]
    with pytest.raises(UserError, match="one per model"):
        ThresholdTable([1, 2, 3], 2)
    with pytest.raises(UserError, match="integers >= 1"):
        ThresholdTable([1, 0], 2)
    with pytest.raises(UserError, match="per-N table"):
        ThresholdTable("fast", 2)


def _entry(rid: str, prompt: int = 4, max_new: int = 8) -> Entry:
    return Entry(RouterRequest(rid, [1] * prompt, max_new_tokens=max_new), META)


def test_delayed_batching_waits_for_threshold_or_max_wait() -> None:
    s = Scheduler(capacity_tokens=1000, page_size=4, max_batch_size=8, max_step_tokens=100, max_wait_s=0.05)
    s.threshold = 3
    for i in range(2):
        assert s.add(_entry(f"r{i}"), now=0.0) is None
    assert s.next_batch(0.01) == [] and s.wait_timeout(0.01) == pytest.approx(0.04)
    assert [e.req.rid for e in s.next_batch(0.05)] == ["r0", "r1"]  # max wait reached
    batch = s.next_batch(0.06)
    assert batch == [] and s.wait_timeout(0.06) is None
    s.add(_entry("r2"), now=0.06)
    e0, e1 = s.entries["r0"], s.entries["r1"]
    s.make_ready([e0], 0.07)
    s.pend(e1)
    assert s.next_batch(0.07) == []
    s.make_ready([e1], 0.08)
    assert [e.req.rid for e in s.next_batch(0.08)] == ["r2", "r0", "r1"]  # threshold reached: whole queue
    assert e1.status is Status.RUNNING


def test_a_launch_rule_decides_on_the_own_ready_count_alone() -> None:
    s = Scheduler(capacity_tokens=1000, page_size=4, max_batch_size=8, max_step_tokens=100, max_wait_s=1.0)
    s.threshold = 1  # ignored while a rule is set
    s.launch_mask = 0b1010  # N = 3: launch with 1 or 3 ready, wait with 2
    assert [s.launches(k) for k in range(5)] == [False, True, False, True, True]  # above N: bit N
    for i in range(2):
        s.add(_entry(f"r{i}"), now=0.0)
    assert s.next_batch(0.01) == []
    s.add(_entry("r2"), now=0.02)
    assert [e.req.rid for e in s.next_batch(0.02)] == ["r0", "r1", "r2"]
    s.launch_mask = 0
    assert not s.launches(3)
    s.launch_mask = None
    assert s.launches(1) and not Scheduler(1000, 4, 8, 100, 1.0).launches(0)


def test_admission_reserves_kv_and_batches_respect_limits() -> None:
    s = Scheduler(capacity_tokens=60, page_size=4, max_batch_size=2, max_step_tokens=10, max_wait_s=0.0)
    assert "KV tokens" in s.add(_entry("huge", prompt=50, max_new=20), 0.0)
    for i in range(3):
        s.add(_entry(f"r{i}"), 0.0)  # each reserves 4 + 8 + 4 = 16 tokens: 3 fit in 60
    s.add(_entry("r3", prompt=11), 0.0)  # 11 + 8 + 4 = 23
    first = s.next_batch(0.0)
    assert [e.req.rid for e in first] == ["r0", "r1"]  # max batch size 2 (8 of 10 step tokens)
    assert [e.req.rid for e in s.next_batch(0.0)] == ["r2"]  # r3 waits for KV
    assert s.entries["r3"].status is Status.WAITING
    s.remove("r0")
    assert [e.req.rid for e in s.next_batch(0.0)] == ["r3"]  # over the token budget alone is ok
    s.make_ready([s.entries["r1"], s.entries["r2"]], 0.0, input_len=6)  # extends: 6 + 6 > 10 tokens
    assert [e.req.rid for e in s.next_batch(0.0)] == ["r1"]
    assert [e.req.rid for e in s.next_batch(0.0)] == ["r2"]

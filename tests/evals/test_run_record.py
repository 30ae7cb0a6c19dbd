"""summary.json has one definition, `RunRecord` (tokenrouter/evals/run_record.py): what the runner writes is
built as one and declared field by field, a summary read back is converted into it (a field of the wrong type
or range is a damaged summary), and a summary written before the record existed (schema_version 2,
tests/evals/data/summary_schema2.json, written by commit 1546cf7 on the sim pair with runtime.trace and SLOs)
still validates and round-trips unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import msgspec
import pytest

from tokenrouter.cli import main
from tokenrouter.evals import run_record
from tokenrouter.evals.metrics import serving_metrics, summarize
from tokenrouter.evals.run_record import DECLARED, RunRecord, build, decode, encode, field_docs
from tokenrouter.generation import GenerationResult

BEFORE = Path(__file__).parent / "data" / "summary_schema2.json"
SIM = ["models=sim-r2r", "algorithm=bernoulli", "workload=synthetic", "workload.num_requests=4",
       "workload.output_tokens=8"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """summary.json of bench runs that between them write every key but the graded and system-specific ones."""
    root = tmp_path_factory.mktemp("record")
    runs = {"traced": ["system=lockstep", "concurrency=2", "runtime.trace=true", "slo.ttft_ms=1e9", "slo.e2el_ms=1e9",
                       "warmup_requests=2"],
            "poisson": ["system=tokenrouter", "arrival=poisson", "request_rate=50"]}
    for name, args in runs.items():
        assert main(["bench", *SIM, *args, f"hydra.run.dir={root / name}"]) == 0
    return {name: json.loads((root / name / "summary.json").read_text()) for name in runs}


def test_every_key_the_runner_writes_is_declared(written: dict[str, dict]) -> None:
    conditional = {f.name for f in field_docs(RunRecord) if f.when} | {run_record.EXTRAS}
    for name, summary in written.items():
        assert set(summary) <= DECLARED, (name, sorted(set(summary) - DECLARED))
        assert decode(summary).extras == {}
    always = DECLARED - conditional
    assert always <= set(written["poisson"]), sorted(always - set(written["poisson"]))  # none is left unset
    traced = written["traced"]
    assert {"trace", "goodput_slos_ms", "request_goodput", "slo_attainment"} <= set(traced)
    # the keys of graded runs (a text model's) and of every SLO, as metrics.py makes them
    result = GenerationResult(index=0, prompt_ids=[1, 2], output_ids=[3, 4, 5], finish_reason="length",
                              arrival_s=0.0, first_token_s=0.1, finish_s=0.3, tokens_per_model={"small": 3})
    figures = {**summarize([result], 0.3, ["small", "large"], [True]),
               **serving_metrics([result], 0.3, {"ttft": 1.0, "tpot": 1.0, "e2el": 1.0})}
    assert set(figures) <= DECLARED, sorted(set(figures) - DECLARED)
    assert {f.name for f in field_docs(RunRecord) if f.when} - {"routellm", "official_r2r", "official_ensemble",
                                                                  "trace"} <= set(figures)


def test_what_systems_add_is_declared_as_they_make_it() -> None:
    """summary_extra of query_routing, official_r2r and official_ensemble: the record's parts have their shape."""
    from tokenrouter.baselines import official_ensemble, official_r2r
    from tokenrouter.baselines.query_routing import routellm_metrics

    for info, part in ((official_r2r.RunInfo, run_record.OfficialR2R),
                       (official_ensemble.RunInfo, run_record.OfficialEnsemble)):
        theirs = dataclasses.fields(info)
        assert [f.name for f in theirs] == list(part.__struct_fields__), part
        assert [f.name for f in theirs if f.default is f.default_factory is dataclasses.MISSING] == [
            f.name for f in msgspec.structs.fields(part) if f.required], part
    metrics = routellm_metrics({0: 0.9, 1: 0.1}, {0: False, 1: True}, {0: True, 1: True})
    assert list(metrics) == list(run_record.RouteLLM.__struct_fields__)
    info = official_r2r.RunInfo(commit="c", pinned_commit="p", server="s", router="r", threshold=0.5,
                                overlap_tp_schedule=False, cuda_visible_devices="0", random_routing=False)
    fields = {"model_names": ["small", "large"], "num_requests": 1, "throughput_tok_s": 1.0,
              "official_r2r": dataclasses.asdict(info), "routellm": metrics}
    record = build(fields, {"seed": 0})
    assert isinstance(record.official_r2r, run_record.OfficialR2R) and record.official_r2r.device == "cuda"
    assert encode(record)["official_r2r"] == dataclasses.asdict(info)


def test_round_trip(written: dict[str, dict], tmp_path: Path) -> None:
    for summary in written.values():
        record = decode(summary)
        assert isinstance(record.machine, run_record.Machine) and isinstance(record.provenance, run_record.Provenance)
        assert json.dumps(encode(record)) == json.dumps(summary)  # same keys, order and values
    traced = decode(written["traced"])
    assert isinstance(traced.trace, run_record.Trace) and traced.goodput_slos_ms == {"ttft": 1e9, "e2el": 1e9}
    # what write_summary writes is what read_summary reads
    run_record.write_summary(tmp_path, traced)
    stored = run_record.read_summary(tmp_path)
    assert stored.problem is None and stored.summary == written["traced"]


def test_a_summary_written_before_the_record_still_validates(tmp_path: Path) -> None:
    text = BEFORE.read_text()
    summary = json.loads(text)
    assert summary["schema_version"] == 2 and run_record.validate(summary) is None
    assert json.dumps(encode(decode(summary)), indent=2) + "\n" == text
    (tmp_path / "summary.json").write_text(text)
    assert run_record.read_summary(tmp_path).problem is None
    # and one from before `machine`, `trace` and `sweeper` were recorded (schema 2 all the same)
    older = {k: v for k, v in summary.items() if k not in ("machine", "trace", "sweeper")}
    assert run_record.validate(older) is None
    assert "schema_version 1" in run_record.validate({**summary, "schema_version": 1})


def _damaged(**fields: object) -> str | None:
    return run_record.validate({**json.loads(BEFORE.read_text()), **fields})


@pytest.mark.parametrize(("fields", "problem"), [
    ({"warmup_requests": "two"}, "'warmup_requests' is \"two\", expected an integer >= 0"),
    ({"elapsed_s": None}, "'elapsed_s' is null, expected a number >= 0"),
    ({"mean_ttft_ms": float("inf")}, "'mean_ttft_ms' is Infinity, expected a number >= 0 or null"),
    ({"slo_attainment": 1.5}, "'slo_attainment' is 1.5, expected a share in [0, 1] or null"),
    ({"stats": []}, "'stats' is [], expected a mapping of text to any value"),
    ({"sweeper": 3}, "'sweeper' is 3, expected text or null"),
    ({"provenance": {"date": "today"}}, "'provenance' is {\"date\": \"today\"}, expected a Provenance record "
                                        "(Object missing required field `git_commit` at provenance)"),
    ({"trace": {"window_s": 1.0, "requests": 1, "handoffs": 0, "flows": 0, "batches": 1, "capped": [],
                "models": {"small": {"batches": -1}}}},
     "expected a Trace record (Expected `int` >= 0 at trace.models[...].batches)"),
    ({"routellm": {"apgr": 0.5}}, "'routellm' is {\"apgr\": 0.5}, expected a RouteLLM record"),
    ({"my_latency_s": -1}, "'my_latency_s' is -1, expected a number >= 0 or null"),  # an undeclared measurement
])
def test_a_field_of_the_wrong_type_is_damage(fields: dict, problem: str) -> None:
    found = _damaged(**fields)
    assert found is not None and problem in found, found


def test_extras_are_kept_at_the_top_level(tmp_path: Path) -> None:
    """A key a system adds that the record does not declare: kept, in place, and written back as it was."""
    record = build({"model_names": ["a"], "num_requests": 1, "throughput_tok_s": 2.0, "stats": {},
                    "my_router": {"calls": 3}, "sweeper": None}, {"seed": 0})
    assert record.extras == {"my_router": {"calls": 3}}
    written = run_record.write_summary(tmp_path, record)
    assert list(written) == ["model_names", "num_requests", "throughput_tok_s", "stats", "my_router", "sweeper",
                             "schema_version", "config", "config_hash"]
    assert run_record.read_summary(tmp_path).summary == written


def test_the_writer_refuses_what_the_record_does_not_declare() -> None:
    fields = {"model_names": ["a"], "num_requests": 1, "throughput_tok_s": 2.0}
    with pytest.raises(ValueError, match=r"summary.json: Expected `int`, got `str` - at `\$.concurrency`"):
        build({**fields, "concurrency": "4"}, {})
    provenance = json.loads(BEFORE.read_text())["provenance"]
    with pytest.raises(ValueError, match=r"provenance.new_key is not declared in the run record"):
        build({**fields, "provenance": {**provenance, "new_key": 1}}, {})


def test_every_field_has_a_meaning_and_a_type_in_words() -> None:
    for struct in (RunRecord, *run_record.nested_structs()):
        for f in field_docs(struct):
            assert f.meaning.strip(), f"{struct.__name__}.{f.name} has no meaning: Annotated[..., doc('...')]"
            assert f.type and "Type" not in f.type, (struct.__name__, f.name, f.type)

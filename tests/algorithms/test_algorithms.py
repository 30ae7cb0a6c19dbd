"""The five algorithms' decision rules on hand-made step results (no runtime): thresholds, entropy, draws."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tokenrouter.algorithms import build_algorithm
from tokenrouter.algorithms.checkpoints import save_router
from tokenrouter.algorithms.routers import build_router
from tokenrouter.algorithms.rstitch import normalized_entropy
from tokenrouter.api import RouterRequest, StepResult
from tokenrouter.errors import UserError

D, VOCAB = 16, 120
NAMES = ["small", "large"]


class _EngineView:
    """What bind() reads from an engine: device, hidden size and the small model's input embedding."""

    device = torch.device("cpu")

    def __init__(self, embedding: torch.nn.Embedding | None, hidden_size: int = D) -> None:
        self._embedding = embedding
        self.hidden_size = hidden_size

    def input_embeddings(self) -> torch.nn.Embedding | None:
        return self._embedding


def _step(batch: int = 64, seed: int = 0, index: int = 0, with_tensors: bool = True) -> StepResult:
    g = torch.Generator().manual_seed(seed)
    reqs = [RouterRequest(f"r{i}", [1, 2], [5] * (i % 7), seed=i) for i in range(batch)]
    tokens = torch.randint(0, VOCAB, (batch,), generator=g).tolist()
    if not with_tensors:
        return StepResult(index, reqs, tokens)
    return StepResult(index, reqs, tokens, torch.randn(batch, VOCAB, generator=g), torch.randn(batch, D, generator=g))


@pytest.fixture(scope="module")
def routers(tmp_path_factory) -> dict[str, Path]:
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("routers")
    paths = {}
    for kind, cfg in (
        ("r2r", {"hidden_states_size": D, "vocab_size": VOCAB, "hidden_dims": [32] * 2, "logits_size": 20}),
        ("citer", {"hidden_states_size": D, "hidden_dims": [16]}),
        ("co_llm", {"hidden_states_size": D, "hidden_dims": []}),
    ):
        net = build_router(kind, cfg)
        save_router(net, out / kind / "router", 0.5, {"metrics": {"heldout_route_rate": 0.2}})
        paths[kind] = out / kind
    return paths


EMBEDDING = torch.nn.Embedding(VOCAB, D)


def _bound(name: str, path: Path, **params):
    algo = build_algorithm(name, 0, NAMES, {"router": str(path), **params})
    algo.bind(_EngineView(EMBEDDING))
    return algo


@pytest.mark.parametrize("name,param", [("r2r", "threshold"), ("citer", "tau"), ("co_llm", "eta")])
def test_learned_thresholds_span_never_to_always(routers, name: str, param: str) -> None:
    step = _step()
    never = 0.0 if name == "citer" else 1.0  # citer routes when confidence < tau
    always = 1.0 - never
    assert _bound(name, routers[name], **{param: never}).route(step) == [0] * len(step)
    assert _bound(name, routers[name], **{param: always}).route(step) == [1] * len(step)
    mid = _bound(name, routers[name]).route(step)  # the threshold saved with the router (0.5)
    assert mid == _bound(name, routers[name], **{param: 0.5}).route(step)
    large = build_algorithm(name, 1, NAMES, {"router": str(routers[name])})
    assert large.route(step) == [0] * len(step)  # the large model always hands back
    assert 0 < sum(mid) < len(mid)
    small = _bound(name, routers[name])
    assert not small.keeps_token(step.requests[0], 1) and large.keeps_token(step.requests[0], 0)


def test_learned_decisions_match_the_router_probability(routers) -> None:
    step = _step(batch=200)
    algo = _bound("r2r", routers["r2r"], threshold=0.3)
    probs = torch.sigmoid(algo.net.score(step.hidden, torch.tensor(step.next_tokens), step.logits).double())
    assert algo.route(step) == [int(p >= 0.3) for p in probs.tolist()]
    # Batch composition does not change a request's decision.
    half = StepResult(0, step.requests[:50], step.next_tokens[:50], step.logits[:50], step.hidden[:50])
    assert algo.route(half) == algo.route(step)[:50]


def test_learned_algorithms_explain_missing_inputs(routers) -> None:
    algo = _bound("r2r", routers["r2r"])
    with pytest.raises(UserError, match="hidden states and logits.*sim engines"):
        algo.route(_step(with_tensors=False))
    with pytest.raises(UserError, match="no router given.*train-router"):
        build_algorithm("citer", 0, NAMES, {}).bind(_EngineView(None))
    with pytest.raises(UserError, match="input embedding"):
        build_algorithm("r2r", 0, NAMES, {"router": str(routers["r2r"])}).bind(_EngineView(None))
    with pytest.raises(UserError, match="reads hidden states of size 16, model 'small' has 32"):
        build_algorithm("co_llm", 0, NAMES, {"router": str(routers["co_llm"])}).bind(_EngineView(None, 2 * D))
    from tokenrouter.config import ModelSpec
    from tokenrouter.engine.sim import SimEngine

    sim = SimEngine.from_spec(ModelSpec(name="small", engine="sim"))
    for name, params in [(k, {"router": str(v)}) for k, v in routers.items()] + [("rstitch", {})]:
        with pytest.raises(UserError, match="sim engines have no weights"):
            build_algorithm(name, 0, NAMES, params).bind(sim)
    with pytest.raises(UserError, match="eta must be in"):
        build_algorithm("co_llm", 0, NAMES, {"eta": 1.5})
    with pytest.raises(UserError, match="exactly 2 models"):
        build_algorithm("r2r", 0, ["a", "b", "c"], {})


def test_learned_rates_prefer_measurements_then_the_trained_route_rate(routers) -> None:
    algo = build_algorithm("r2r", 0, NAMES, {"router": str(routers["r2r"])})
    assert algo.rates() == {"preset": "r2r", "route_prob": 0.2}
    assert algo.rates([[70, 30], [100, 0]]) == {"preset": "r2r", "route_prob": 0.3}
    assert algo.rates([[3, 1], [4, 0]])["route_prob"] == 0.2  # too few decisions: the prior
    other = build_algorithm("r2r", 0, NAMES, {"router": str(routers["r2r"]), "threshold": 0.9})
    assert other.rates()["route_prob"] is None  # trained at another threshold, no score distribution saved
    assert build_algorithm("co_llm", 0, NAMES, {"router": str(routers["co_llm"])}).rates()["preset"] == "co_llm"


def test_learned_prior_at_another_threshold_comes_from_saved_score_quantiles(tmp_path) -> None:
    # raw (logit) quantiles -2 .. 2: r2r flags sigmoid(raw) >= threshold, i.e. raw >= logit(threshold)
    quantiles = [x / 50 for x in range(-100, 101)]
    cfgs = {"r2r": {"hidden_states_size": D, "vocab_size": VOCAB, "hidden_dims": [8], "logits_size": 20},
            "citer": {"hidden_states_size": D, "hidden_dims": [8]}, "co_llm": {"hidden_states_size": D, "hidden_dims": []}}
    for kind, cfg in cfgs.items():
        save_router(build_router(kind, cfg), tmp_path / kind / "router", 0.5,
                    {"metrics": {"heldout_route_rate": 0.5, "heldout_raw_quantiles": quantiles}})
    path = {k: str(tmp_path / k) for k in cfgs}
    assert build_algorithm("r2r", 0, NAMES, {"router": path["r2r"]}).rates()["route_prob"] == 0.5  # saved
    at = build_algorithm("r2r", 0, NAMES, {"router": path["r2r"], "threshold": 0.731}).rates()["route_prob"]
    assert at == pytest.approx(sum(q >= math.log(0.731 / 0.269) for q in quantiles) / len(quantiles))
    assert 0.25 < at < 0.3  # logit(0.731) ~ 1.0: a quarter of the scores lie above it
    co = build_algorithm("co_llm", 0, NAMES, {"router": path["co_llm"], "eta": 0.9}).rates()["route_prob"]
    ci = build_algorithm("citer", 0, NAMES, {"router": path["citer"], "tau": 0.9}).rates()["route_prob"]
    assert co < 0.1 and ci > 0.9  # co_llm defers rarely at a high eta; citer regenerates often at a high tau


def test_normalized_entropy_math() -> None:
    v = 50
    uniform = torch.zeros(1, v)
    one_hot = torch.full((1, v), -1e4)
    one_hot[0, 3] = 0.0
    two_way = torch.full((1, v), -1e4)
    two_way[0, :2] = 0.0
    p = torch.tensor([[0.7, 0.2, 0.1]]).log()
    values = normalized_entropy(torch.cat([uniform, one_hot, two_way]))
    assert values[0].item() == pytest.approx(1.0)
    assert values[1].item() == pytest.approx(0.0, abs=1e-12)
    assert values[2].item() == pytest.approx(math.log(2) / math.log(v))
    expected = -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1)) / math.log(3)
    assert normalized_entropy(p).item() == pytest.approx(expected)
    assert normalized_entropy(p + 5.0).item() == pytest.approx(expected)  # shift-invariant (raw logits)


def test_rstitch_is_symmetric_on_entropy() -> None:
    step = _step(batch=100)
    ent = normalized_entropy(step.logits)
    tau = float(ent.median())
    small = build_algorithm("rstitch", 0, NAMES, {"tau": tau})
    large = build_algorithm("rstitch", 1, NAMES, {"tau": tau})
    uncertain = [int(e > tau) for e in ent.tolist()]
    assert small.route(step) == uncertain  # uncertain -> large
    assert large.route(step) == uncertain  # large: stays while uncertain, returns when confident
    assert 0 < sum(uncertain) < len(uncertain)
    assert small.keeps_token(step.requests[0], 1) and large.keeps_token(step.requests[0], 0)
    assert build_algorithm("rstitch", 0, NAMES, {"tau": 0.0}).route(step) == [1] * len(step)
    assert build_algorithm("rstitch", 1, NAMES, {"tau": 0.0}).route(step) == [1] * len(step)
    with pytest.raises(UserError, match="needs next-token logits"):
        small.route(_step(with_tensors=False))
    assert small.rates([[60, 40], [10, 90]]) == {"preset": "rstitch", "p01": 0.4, "p10": 0.1}


def test_ensemble_draws_follow_the_weights_and_depend_only_on_seed_and_position() -> None:
    names = ["a", "b", "c"]
    algos = [build_algorithm("ensemble", i, names, {"weights": [5, 3, 2]}) for i in range(3)]
    reqs = [RouterRequest(f"r{i}", [1], [0] * (i % 13), seed=i // 13) for i in range(6000)]
    step = StepResult(0, reqs, [0] * len(reqs))
    dests = algos[0].route(step)
    shares = [dests.count(j) / len(dests) for j in range(3)]
    assert shares == pytest.approx([0.5, 0.3, 0.2], abs=0.02)
    assert algos[1].route(step) == dests == algos[2].route(step)  # the same draw on whichever model
    assert algos[0].route(StepResult(0, reqs[::-1], [0] * len(reqs))) == dests[::-1]
    assert all(a.keeps_token(reqs[0], 1) for a in algos)
    only_first = build_algorithm("ensemble", 1, ["a", "b"], {"weights": [1, 0]})
    assert set(only_first.route(step)) == {0}
    assert algos[0].rates() == {"preset": "ensemble", "weights": [0.5, 0.3, 0.2]}
    with pytest.raises(UserError, match="one weight per model"):
        build_algorithm("ensemble", 0, names, {"weights": [1, 1]})
    with pytest.raises(UserError, match="positive sum"):
        build_algorithm("ensemble", 0, ["a", "b"], {"weights": [0, 0]})


def test_rates_build_the_throughput_model_presets(routers) -> None:
    from tokenrouter.perfmodel.presets import preset_for_algorithm

    cases = [
        (build_algorithm("r2r", 0, NAMES, {"router": str(routers["r2r"])}), None, [[0.8, 0.2], [1.0, 0.0]]),
        (build_algorithm("citer", 0, NAMES, {"router": str(routers["citer"])}), [[90, 10], [50, 0]],
         [[0.9, 0.1], [1.0, 0.0]]),
        (build_algorithm("rstitch", 0, NAMES, {}), [[75, 25], [60, 40]], [[0.75, 0.25], [0.6, 0.4]]),
        (build_algorithm("ensemble", 0, ["a", "b", "c"], {"weights": [2, 1, 1]}), None, [[0.5, 0.25, 0.25]] * 3),
    ]
    for algo, routes, expected in cases:
        rates = algo.rates(routes)
        route, _commit = preset_for_algorithm(rates["preset"], rates)
        assert [pytest.approx(row) for row in expected] == route
    with pytest.raises(UserError, match="p01"):  # no measurements yet: no rates for R-Stitch
        rates = build_algorithm("rstitch", 0, NAMES, {}).rates()
        preset_for_algorithm(rates["preset"], rates)

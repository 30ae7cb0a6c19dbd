"""Router networks and their checkpoints: shapes, the official R2R layout, our safetensors format, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tokenrouter.algorithms.checkpoints import check_router, load_router, save_router
from tokenrouter.algorithms.routers import R2RConfig, R2RRouter, build_router
from tokenrouter.errors import UserError

D, VOCAB = 32, 120


def _r2r(seed: int = 0, **overrides) -> R2RRouter:
    torch.manual_seed(seed)
    cfg = {"hidden_states_size": D, "vocab_size": VOCAB, "hidden_dims": [48] * 6, "expansion_factor": 2}
    cfg.update(overrides)
    net = build_router("r2r", cfg)
    net.eval()
    return net


def _inputs(batch: int = 5, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, D, generator=g), torch.randint(0, VOCAB, (batch,), generator=g), torch.randn(batch, VOCAB, generator=g)


def _official_dict(net: R2RRouter, threshold: float = 0.4) -> dict:
    """What the public R2R code's save_model writes (token embedding stripped)."""
    cfg = net.config
    state = net.state_dict()
    del state["token_embeddings.weight"]
    return {
        "model_type": "HiddenStatesTokenLMHeadLogitsClassifier",
        "init_args": {
            "hidden_states_size": cfg.hidden_states_size,
            "logits_size": cfg.logits_size,
            "hidden_dims": list(cfg.hidden_dims),
            "expansion_factor": cfg.expansion_factor,
            "dropout_rate": cfg.dropout_rate,
            "use_position_embedding": False,
            "freeze_lm_head": True,
            "normalize_input": cfg.normalize_input,
            "pretrained_model_name": "Qwen/Qwen3-0.6B",
        },
        "common_args": {"threshold": threshold, "input_type": ["hidden_states", "token", "logits"]},
        "model_specific_args": {},
        "state_dict": state,
    }


def test_router_shapes_and_official_parameter_names() -> None:
    hidden, tokens, logits = _inputs()
    r2r = _r2r()
    assert r2r.score(hidden, tokens, logits).shape == (5,)
    top = torch.topk(logits, 100, dim=-1).values
    assert r2r(hidden, tokens, top).shape == (5, 1)
    names = set(r2r.state_dict())
    for key in (
        "token_embeddings.weight",
        "logits_projection.weight",
        "combined_projection.weight",
        "backbone.input_projection.weight",
        "backbone.blocks.0.layer_norm.weight",
        "backbone.blocks.5.mlp.0.weight",
        "backbone.blocks.5.mlp.3.bias",
        "backbone.output_layer.0.weight",
        "backbone.output_layer.1.weight",
    ):
        assert key in names
    assert "backbone.blocks.6.mlp.0.weight" not in names  # exactly six residual blocks
    assert r2r.combined_projection.in_features == 3 * D  # hidden ++ token embedding ++ projected top-k logits
    assert not r2r.token_embeddings.weight.requires_grad
    citer = build_router("citer", {"hidden_states_size": D, "hidden_dims": [16, 16]})
    assert citer.score(hidden, tokens, None).shape == (5,)
    co_llm = build_router("co_llm", {"hidden_states_size": D, "hidden_dims": []})
    assert co_llm.score(hidden, tokens, None).shape == (5,)
    assert sum(p.numel() for p in co_llm.parameters()) == D + 1  # linear deferral head
    with pytest.raises(UserError, match="linear"):
        build_router("co_llm", {"hidden_states_size": D, "hidden_dims": [8]})
    with pytest.raises(UserError, match="logits_size"):
        R2RRouter(R2RConfig(hidden_states_size=D, vocab_size=50))


def test_official_layout_checkpoint_gives_the_same_scores(tmp_path: Path) -> None:
    net = _r2r()
    embedding = torch.randn(VOCAB, D)
    net.load_embeddings(embedding)
    hidden, tokens, logits = _inputs(batch=7)
    expected = net.score(hidden, tokens, logits)
    path = tmp_path / "default_router.pt"
    torch.save(_official_dict(net, threshold=0.406), path)
    loaded = load_router(str(path), "r2r", embedding)
    assert loaded.threshold == pytest.approx(0.406)
    assert loaded.meta["common_args"]["input_type"] == ["hidden_states", "token", "logits"]
    torch.testing.assert_close(loaded.net.score(hidden, tokens, logits), expected, rtol=0, atol=0)
    # A different small model (embedding shape) is refused with a clear message.
    with pytest.raises(UserError, match="input embedding"):
        load_router(str(path), "r2r", torch.randn(VOCAB, D + 4))


def test_checkpoint_needing_arbitrary_unpickling_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    doc = _official_dict(_r2r())
    doc["model_specific_args"] = {"extra": Payload()}
    path = tmp_path / "evil.pt"
    torch.save(doc, path)
    with pytest.raises(UserError, match="unpickling arbitrary Python objects.*refused"):
        load_router(str(path), "r2r", torch.randn(VOCAB, D))
    with pytest.raises(UserError, match="unpickling arbitrary Python objects.*refused") as refused:
        check_router(str(path), "r2r")  # the front end's check, before any subserver starts
    assert "weights_only" not in str(refused.value)  # never the advice to load it anyway
    assert not marker.exists()
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="not a readable torch checkpoint"):
        load_router(str(tmp_path / "junk.pt"), "r2r", torch.randn(VOCAB, D))
    torch.save({"model_type": "LogitsClassifier", "init_args": {}, "state_dict": {}}, tmp_path / "other.pt")
    with pytest.raises(UserError, match="not supported"):
        load_router(str(tmp_path / "other.pt"), "r2r", torch.randn(VOCAB, D))


def test_our_format_round_trips_without_the_embedding(tmp_path: Path) -> None:
    embedding = torch.randn(VOCAB, D)
    hidden, tokens, logits = _inputs()
    for kind, cfg in (
        ("r2r", {"hidden_states_size": D, "vocab_size": VOCAB, "hidden_dims": [24] * 2, "logits_size": 10}),
        ("citer", {"hidden_states_size": D, "hidden_dims": [16]}),
        ("co_llm", {"hidden_states_size": D, "hidden_dims": []}),
    ):
        net = build_router(kind, cfg)
        if kind == "r2r":
            net.load_embeddings(embedding)
        net.eval()
        weights, sidecar = save_router(net, tmp_path / kind / "router", 0.25, {"labels": {"positives": 3}})
        doc = json.loads(sidecar.read_text())
        assert doc["kind"] == kind and doc["threshold"] == 0.25 and doc["labels"] == {"positives": 3}
        from safetensors.torch import load_file

        assert "token_embeddings.weight" not in load_file(str(weights))
        for where in (tmp_path / kind, sidecar, weights):
            loaded = load_router(str(where), kind, embedding)
            torch.testing.assert_close(loaded.net.score(hidden, tokens, logits), net.score(hidden, tokens, logits))
            assert loaded.threshold == 0.25
    with pytest.raises(UserError, match="is a 'citer' router, not 'r2r'"):
        load_router(str(tmp_path / "citer"), "r2r", embedding)
    with pytest.raises(UserError, match="needs the small model's input embedding"):
        load_router(str(tmp_path / "r2r"), "r2r", None)


def test_missing_local_router_and_offline_hub_path_are_clear_errors(monkeypatch, tmp_path: Path) -> None:
    import huggingface_hub.constants

    with pytest.raises(UserError, match="no such file"):
        load_router(str(tmp_path / "nope.pt"), "r2r", None)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError, match="nics-efc/R2R_router_collections.* not in the local Hugging Face cache .*local path"):
        load_router("nics-efc/R2R_router_collections/Qwen3-0.6B+Qwen3-32B/default_router.pt", "r2r", None)

"""Router resolution as official R2R does it, on local trees shaped like the official router repos."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tokenrouter.algorithms.r2r import R2R
from tokenrouter.algorithms.router_sources import HubRouter, choose_checkpoint, local_files, resolve_router
from tokenrouter.errors import UserError

# nics-efc/R2R_router_collections (one folder per pair, README-style names) and a GY2233-style repo (files at root)
COLLECTIONS = ["Qwen3-0.6B+Qwen3-32B/default_router.pt", "Qwen3-0.6B+Qwen3-32B/default_router_all.pt",
               "Qwen3-4B+Qwen-8B/router.pt", "Qwen3-4B+Qwen-8B/a_first.pt", "Qwen3-4B+Qwen-8B/README.md",
               "DeepSeek-R1-Distill-Qwen-1.5B+DeepSeek-R1-Distill-Qwen-1.5B-32B/classifier_b.pt",
               "DeepSeek-R1-Distill-Qwen-1.5B+DeepSeek-R1-Distill-Qwen-1.5B-32B/classifier_a.pt", "README.md"]
ROOT_REPO = ["default_router_sampling.pt", "a.pt", "old/default_router.pt", "config.json"]


def _tree(root: Path, files: list[str]) -> Path:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")
    return root


def test_choose_checkpoint_follows_the_official_order(tmp_path: Path) -> None:
    files = local_files(_tree(tmp_path / "collections", COLLECTIONS))
    assert choose_checkpoint(files, "Qwen3-0.6B+Qwen3-32B") == "Qwen3-0.6B+Qwen3-32B/default_router.pt"
    assert choose_checkpoint(files, "Qwen3-4B+Qwen-8B") == "Qwen3-4B+Qwen-8B/router.pt"  # candidate beats sort order
    assert choose_checkpoint(files, "Qwen3-4B+Qwen*-8B") == "Qwen3-4B+Qwen-8B/router.pt"  # glob over odd names
    assert choose_checkpoint(files, "DeepSeek-R1-*").endswith("/classifier_a.pt")  # no known name: first sorted
    assert choose_checkpoint(local_files(_tree(tmp_path / "gy", ROOT_REPO))) == "default_router_sampling.pt"
    with pytest.raises(UserError, match="matches several folders"):
        choose_checkpoint(files, "Qwen3-*")
    with pytest.raises(UserError, match="no .pt router checkpoint under 'Qwen3-4B\\+Qwen3-8B'"):
        choose_checkpoint(files, "Qwen3-4B+Qwen3-8B")


def test_hub_references_parse_like_the_official_configs() -> None:
    assert HubRouter.parse("GY2233/Qwen3_4B_Qwen_8B") == HubRouter("GY2233/Qwen3_4B_Qwen_8B")
    assert HubRouter.parse("nics-efc/R2R_router_collections/Qwen3-4B+Qwen-8B").folder == "Qwen3-4B+Qwen-8B"
    ref = HubRouter.parse("nics-efc/R2R_router_collections/Qwen3-0.6B+Qwen3-32B/default_router.pt")
    assert ref.filename == "Qwen3-0.6B+Qwen3-32B/default_router.pt" and ref.patterns() == [ref.filename]
    with pytest.raises(UserError, match="not a Hub reference"):
        HubRouter.parse("router.pt")


def test_local_official_tree_and_our_format_resolve(tmp_path: Path) -> None:
    root = _tree(tmp_path / "gy", ROOT_REPO)
    assert resolve_router(str(root)) == root / "default_router_sampling.pt"
    ours = tmp_path / "ours"
    _tree(ours, ["router.json", "router.safetensors"])
    assert resolve_router(str(ours)) == ours  # our safetensors + JSON directory: loaded as is
    with pytest.raises(UserError, match="no such file"):
        resolve_router(str(tmp_path / "missing.pt"))


def test_hub_listing_picks_then_downloads_one_file_in_the_front_end(monkeypatch, tmp_path: Path) -> None:
    import huggingface_hub
    import huggingface_hub.constants

    root = _tree(tmp_path / "collections", COLLECTIONS)
    fetched: list[str] = []
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda repo_id: local_files(root))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download",
                        lambda repo_id, filename: fetched.append(filename) or str(root / filename))
    params = R2R.resolve_params({"router": "nics-efc/R2R_router_collections/Qwen3-4B+Qwen-8B", "threshold": 0.4})
    assert params == {"router": str(root / "Qwen3-4B+Qwen-8B/router.pt"), "threshold": 0.4}
    assert fetched == ["Qwen3-4B+Qwen-8B/router.pt"]  # only the chosen checkpoint, not the folder
    assert R2R.resolve_params({"threshold": 0.4}) == {"threshold": 0.4}


def test_offline_without_cache_is_one_fast_line(monkeypatch, tmp_path: Path) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    start = time.monotonic()
    with pytest.raises(UserError) as err:
        resolve_router("GY2233/Qwen3_4B_Qwen_8B")
    assert time.monotonic() - start < 5
    message = str(err.value)
    assert "\n" not in message and "HF_HUB_OFFLINE=1" in message and "hf download GY2233/Qwen3_4B_Qwen_8B" in message


def test_offline_uses_the_cached_snapshot(monkeypatch, tmp_path: Path) -> None:
    import huggingface_hub.constants

    cache = tmp_path / "cache"
    repo = cache / "models--GY2233--Qwen3_4B_Qwen_8B"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    snapshot = _tree(repo / "snapshots" / ("0" * 40), ROOT_REPO)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    assert resolve_router("GY2233/Qwen3_4B_Qwen_8B") == snapshot / "default_router_sampling.pt"

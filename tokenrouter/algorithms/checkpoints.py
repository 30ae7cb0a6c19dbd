"""Router checkpoints: the official R2R layout (torch-saved dict) and our own (safetensors + JSON sidecar).

Official layout (public thu-nics/R2R code): `torch.save({"model_type", "init_args", "common_args":
{"threshold", "input_type"}, "model_specific_args", "state_dict"})`, with `token_embeddings.weight` stripped
from the state dict (it is a frozen copy of the small model's input embedding, rebuilt here from the serving
engine). It is read with `torch.load(weights_only=True)` ONLY: a file that needs arbitrary Python objects
unpickled is refused, never executed. A path that is not a local file is a Hub reference
`owner/repo[/folder][/file.pt]`, resolved as official R2R does (tokenrouter.algorithms.router_sources).

Our layout: `<stem>.safetensors` (weights, token embedding stripped too) + `<stem>.json` (router kind, init
config, threshold in the algorithm's own terms, label statistics and held-out metrics from training).
"""

from __future__ import annotations

import json
import pickle
import pickletools
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from tokenrouter.algorithms.router_sources import resolve_router
from tokenrouter.algorithms.routers import R2RRouter, RouterNet, build_router, router_config
from tokenrouter.errors import UserError, first_line
from tokenrouter.fsutil import atomic_write_text

FORMAT = "tokenrouter.router"
EMBEDDING_KEY = "token_embeddings.weight"
OFFICIAL_R2R_TYPES = {"hiddenstatestokenlmheadlogitsclassifier"}
# Official init_args that describe how the router was built or trained, not its shape: ignored on load.
OFFICIAL_IGNORED_ARGS = {"pretrained_model_name", "freeze_lm_head", "topk", "max_position_embeddings", "dtype", "output_dim"}


@dataclass
class LoadedRouter:
    """A router ready to score, the threshold saved with it (None: none saved) and its metadata."""

    net: RouterNet
    threshold: float | None
    meta: dict[str, Any] = field(default_factory=dict)


def load_router(path: str, kind: str, embeddings: torch.Tensor | None = None) -> LoadedRouter:
    """Load a router of `kind` from our format or (r2r) the official layout; `embeddings` = the small model's
    input embedding weight, needed by routers that embed the predicted token."""
    local = resolve_router(path)
    if is_ours(local):
        loaded = _load_ours(local, kind)
    else:
        loaded = load_official(_official_file(local, kind, path), embeddings)
    if isinstance(loaded.net, R2RRouter):
        if embeddings is None:
            raise UserError(f"{kind} router {path!r} needs the small model's input embedding (engine has none)")
        loaded.net.load_embeddings(embeddings)
    loaded.net.eval()
    return loaded


def check_router(path: str, kind: str) -> None:
    """Read the router file(s) as `load_router` will, without an engine: the front end calls this before it
    starts any subserver, so a corrupt, truncated or unsafe file is one clear line in a second, not a failed
    start-up after the models loaded."""
    local = resolve_router(path)
    if is_ours(local):
        _load_ours(local, kind)
    else:
        _read_official(_official_file(local, kind, path))


def is_ours(local: Path) -> bool:
    """Whether a local router path is in our layout (safetensors + JSON, or their directory)."""
    return local.is_dir() or local.suffix in (".json", ".safetensors")


def _official_file(local: Path, kind: str, path: str) -> Path:
    if kind != "r2r":
        raise UserError(f"{kind} router {path!r}: expected a .safetensors + .json pair (or their directory)")
    return local


def load_official(path: Path, embeddings: torch.Tensor | None = None) -> LoadedRouter:
    """Read an official R2R checkpoint dict (weights only) into an `R2RRouter`. Its token embedding comes from
    the checkpoint when present (the `_all` variant), else from `embeddings` (the small model's)."""
    ckpt = _read_official(path)
    model_type = str(ckpt.get("model_type", ""))
    state = dict(ckpt["state_dict"])
    args = dict(ckpt["init_args"])
    if args.pop("use_position_embedding", False):
        raise UserError(f"router checkpoint {str(path)!r}: position embeddings are not supported")
    for key in OFFICIAL_IGNORED_ARGS:
        args.pop(key, None)
    emb = state.pop(EMBEDDING_KEY, embeddings)
    if emb is None:
        raise UserError(f"router checkpoint {str(path)!r} has no token embedding: pass the small model's")
    hidden = int(args.get("hidden_states_size", 0))
    proj = state.get("combined_projection.weight")
    if proj is None or not hidden:
        raise UserError(f"router checkpoint {str(path)!r}: missing combined_projection weights or hidden_states_size")
    args["embed_dim"] = int(proj.shape[1]) - 2 * hidden
    args["vocab_size"] = int(emb.shape[0])
    net = build_router("r2r", args)
    _load_state(net, state, path)
    net.load_embeddings(emb)
    common = dict(ckpt.get("common_args") or {})
    threshold = common.get("threshold")
    meta = {"model_type": model_type, "common_args": common, "model_specific_args": ckpt.get("model_specific_args")}
    return LoadedRouter(net, None if threshold is None else float(threshold), meta)


def _read_official(path: Path) -> dict[str, Any]:
    """The checkpoint dict, read weights-only (nothing in it is executed), in the official R2R layout."""
    where = f"router checkpoint {str(path)!r}"
    try:
        with warnings.catch_warnings():  # e.g. torch's note on pickle protocols: the error below says it all
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = _unpickler_reason(str(exc))
        unsafe = "global" in reason.lower()
        if unsafe or _is_pickle(path):
            raise UserError(
                f"{where} needs unpickling arbitrary Python objects{f' ({reason})' if unsafe else ''}, which could "
                "run code: refused; only checkpoints of plain tensors, dicts, lists and numbers load"
            ) from None
        if zipfile.is_zipfile(path):
            raise UserError(f"{where} is not a readable torch checkpoint: {reason}") from None
        raise UserError(f"{where} is not a readable torch checkpoint: neither a torch zip archive nor a pickle") from None
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        raise UserError(f"{where} is not a readable torch checkpoint: {first_line(exc)}") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "init_args" not in ckpt:
        raise UserError(f"{where}: not the R2R layout (a dict with init_args and state_dict)")
    model_type = str(ckpt.get("model_type", ""))
    if model_type.lower() not in OFFICIAL_R2R_TYPES:
        raise UserError(
            f"{where}: model_type {model_type!r} is not supported "
            f"(supported: HiddenStatesTokenLMHeadLogitsClassifier, the R2R router)"
        )
    return ckpt


def _is_pickle(path: Path) -> bool:
    """Whether the file parses as one pickle stream (opcodes only: nothing is built or executed)."""
    try:
        with path.open("rb") as fh:
            for opcode, _, _ in pickletools.genops(fh):
                if opcode.name == "STOP":
                    return True
    except Exception:  # noqa: BLE001 - any parse failure: not a pickle
        return False
    return False


def save_official(net: R2RRouter, path: Path, threshold: float, pretrained: str = "") -> Path:
    """Write `net` as the official R2R code's `save_model` does (a torch-saved dict, token embedding stripped),
    so that code and ours read the same router; what `load_official` reads back."""
    cfg = net.config
    state = {k: v.detach().contiguous().cpu() for k, v in net.state_dict().items() if k != EMBEDDING_KEY}
    ckpt = {
        "model_type": "HiddenStatesTokenLMHeadLogitsClassifier",
        "init_args": {"hidden_states_size": cfg.hidden_states_size, "logits_size": cfg.logits_size,
                      "hidden_dims": list(cfg.hidden_dims), "expansion_factor": cfg.expansion_factor,
                      "dropout_rate": cfg.dropout_rate, "use_position_embedding": False, "freeze_lm_head": True,
                      "normalize_input": cfg.normalize_input, "pretrained_model_name": pretrained},
        "common_args": {"threshold": threshold, "input_type": ["hidden_states", "token", "logits"]},
        "model_specific_args": {},
        "state_dict": state,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path


def export_official(path: str, out: Path, pretrained: str) -> float | None:
    """Our R2R router (safetensors + JSON) written in the official layout at `out`, so the official code routes by
    the same weights; `pretrained`: the small model (path or Hub id) the official router copies its token
    embedding from. Returns the threshold saved with it."""
    loaded = _load_ours(resolve_router(path), "r2r")
    if not isinstance(loaded.net, R2RRouter):
        raise UserError(f"router {path!r}: not an R2R router")
    threshold = 0.5 if loaded.threshold is None else loaded.threshold
    save_official(loaded.net, out, threshold, pretrained=pretrained)
    return loaded.threshold


def saved_threshold(path: str) -> float | None:
    """The threshold saved with a router checkpoint (either layout), None when it has none."""
    local = resolve_router(path)
    if is_ours(local):
        return _load_ours(local, "r2r").threshold
    value = (_read_official(local).get("common_args") or {}).get("threshold")
    return None if value is None else float(value)


def save_router(net: RouterNet, stem: Path, threshold: float, meta: dict[str, Any]) -> tuple[Path, Path]:
    """Write `<stem>.safetensors` + `<stem>.json`; returns both paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in net.state_dict().items() if k != EMBEDDING_KEY}
    weights, sidecar = stem.with_suffix(".safetensors"), stem.with_suffix(".json")
    save_file(state, str(weights))
    doc = {"format": FORMAT, "version": 1, "kind": net.kind, "config": router_config(net), "threshold": threshold}
    doc.update(meta)
    atomic_write_text(sidecar, json.dumps(doc, indent=2, sort_keys=True) + "\n")  # last: marks the pair whole
    return weights, sidecar


def _unpickler_reason(message: str) -> str:
    """What torch's weights-only unpickler stumbled on (e.g. `Unsupported global: GLOBAL x.y`), without its
    advice on how to load the file anyway."""
    tail = message.split("WeightsUnpickler error:", 1)[-1]
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    reason = lines[0].split(" was not an allowed global", 1)[0].split(" Please use", 1)[0] if lines else ""
    return reason if reason and "weights_only" not in reason else "not weights only"


def _load_ours(path: Path, kind: str) -> LoadedRouter:
    if path.is_dir():
        found = sorted(path.glob("*.json"))
        if len(found) != 1:
            raise UserError(f"router directory {str(path)!r}: expected exactly one .json sidecar, found {len(found)}")
        path = found[0]
    sidecar, weights = path.with_suffix(".json"), path.with_suffix(".safetensors")
    for needed in (sidecar, weights):
        if not needed.is_file():
            raise UserError(f"router {str(path)!r}: missing {needed.name}")
    try:
        doc = json.loads(sidecar.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"router sidecar {str(sidecar)!r} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UserError(f"router sidecar {str(sidecar)!r}: not a {FORMAT} file")
    if doc.get("kind") != kind:
        raise UserError(f"router {str(path)!r} is a {doc.get('kind')!r} router, not {kind!r}")
    net = build_router(kind, dict(doc.get("config") or {}))
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError) as exc:  # truncated, corrupt or unreadable
        raise UserError(f"router weights {str(weights)!r} are not a readable safetensors file: {first_line(exc)}") from None
    _load_state(net, state, weights)
    threshold = doc.get("threshold")
    return LoadedRouter(net, None if threshold is None else float(threshold), doc)


def _load_state(net: RouterNet, state: dict[str, torch.Tensor], path: Path) -> None:
    state = {k: v for k, v in state.items() if k != EMBEDDING_KEY}
    missing, unexpected = net.load_state_dict(state, strict=False)
    missing = [k for k in missing if k != EMBEDDING_KEY]
    if missing or unexpected:
        raise UserError(f"router {str(path)!r}: weights do not match its config (missing {missing}, unexpected {unexpected})")

"""Load a decoder-only model and its tokenizer from wherever the config says it lives.

Sources: a local Hugging Face directory (safetensors), a GGUF file (transformers dequantizes it), a Hub id
(when the Hub is reachable), `tiny-random:small|large` (built from a seed, cached) and `tiny:small|large` (the
trained local pair). Every failure becomes one UserError line naming the source: a run that is
misconfigured should say so, not print a transformers traceback.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenrouter.errors import UserError, first_line

if TYPE_CHECKING:
    from tokenrouter.config import ModelSpec

DTYPES = ("float32", "float16", "bfloat16")
_HF_IMPORT = threading.Lock()
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class ResolvedSource:
    """Where from_pretrained should look: a directory or Hub id, plus the GGUF file name inside it if any."""

    location: str
    gguf_file: str | None = None
    is_local: bool = True


def resolve_source(source: str) -> ResolvedSource:
    """Map a config `source` string to a from_pretrained location, building built-in models on demand."""
    if not source:
        raise UserError("model source is empty")
    if source.startswith("tiny-random:"):
        from tokenrouter.models.tiny_random import tiny_random_path

        return ResolvedSource(str(tiny_random_path(source.split(":", 1)[1])))
    if source.startswith("tiny:"):
        try:
            from tokenrouter.models.pair import member_path
        except ImportError as exc:  # a dependency that fails to import: name it, and what made it fail
            cause = exc.__cause__ or exc.__context__
            raise UserError(f"{source}: the trained tiny pair cannot be loaded here: {exc}"
                            + (f" ({type(cause).__name__}: {cause})" if cause else "")) from None
        return ResolvedSource(str(member_path(source.split(":", 1)[1])))
    path = Path(source).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise UserError(f"model file {path} is not a .gguf file; give a model directory or a GGUF file")
        return ResolvedSource(str(path.resolve().parent), gguf_file=path.name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"model directory {path} has no config.json (not a Hugging Face model directory)")
        return ResolvedSource(str(path.resolve()))
    if _HUB_ID.match(source) and not source.startswith((".", "/", "~")):
        return ResolvedSource(source, is_local=False)
    raise UserError(f"model not found: {source!r} is neither a file, a directory nor a Hub id")


def loadable_source(source: str) -> ResolvedSource:
    """What processes that load a model use: `resolve_source`, except that a Hub id already in the Hugging
    Face cache (the front end downloads before any subserver or rank starts: engine/download.py) is its local
    snapshot, so loading makes no Hub lookup at all (offline nodes would stall on them). A Hub id not cached
    stays a Hub id (from_pretrained then downloads it)."""
    src = resolve_source(source)
    if src.is_local:
        return src
    from huggingface_hub import snapshot_download

    try:
        return ResolvedSource(snapshot_download(src.location, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached (huggingface_hub raises several types): load from the Hub
        return src


def check_source(source: str) -> None:
    """Check a local model source before any process loads it: the path, its config.json, and that each
    weights file is whole (safetensors headers cover their file, a GGUF header parses). Headers only, so a
    truncated copy fails in the front end in a second rather than in a subserver after start-up. Built-in
    and Hub sources are left to the loader (building or downloading them is its job)."""
    if source.startswith(("tiny-random:", "tiny:")):
        return
    src = resolve_source(source)
    if not src.is_local:
        return
    if src.gguf_file:
        _gguf_overrides(Path(src.location) / src.gguf_file)
        return
    from safetensors import SafetensorError, safe_open

    for weights in sorted(Path(src.location).glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="pt"):
                pass
        except (SafetensorError, OSError) as exc:
            raise UserError(f"model weights {weights} are not a readable safetensors file: {first_line(exc)}") from None


def local_dir(source: str) -> str:
    """The local directory holding `source`'s files: the path itself, or the Hub cache's snapshot of a Hub id
    (downloaded beforehand by engine/download.py; this never downloads)."""
    src = loadable_source(source)
    if not src.is_local:
        raise UserError(f"model {source!r} is not in the Hugging Face cache (download it first: the bench and serve "
                        "commands do, before any model loads)")
    return src.location


def torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise UserError(f"unknown dtype {name!r}; use one of {DTYPES}")
    return getattr(torch, name)


def _hf(name: str) -> Any:
    """`transformers.<name>`, resolved under a lock: transformers' lazy top-level import is not thread-safe, and
    `tokenrouter serve` loads the tokenizer in one thread while the front end checks and plans the models
    (check_tp, the memory plan: load_config) in another ("cannot import name 'AutoConfig'")."""
    with _HF_IMPORT:
        import transformers

        return getattr(transformers, name)


def _from_pretrained(fn: Any, src: ResolvedSource, what: str, **kwargs: Any) -> Any:
    with _HF_IMPORT:
        from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # CLI output stays one JSON line per result
    extra = {"gguf_file": src.gguf_file} if src.gguf_file else {}
    try:
        return fn(src.location, local_files_only=src.is_local, **extra, **kwargs)
    except UserError:
        raise
    except Exception as exc:  # transformers raises many types (OSError, ValueError, SafetensorError, ...)
        where = src.location + (f"/{src.gguf_file}" if src.gguf_file else "")
        hint = "" if src.is_local else " (is the Hugging Face Hub reachable from here?)"
        raise UserError(f"cannot load {what} from {where}{hint}: {first_line(exc)}") from None


def placement(device: str, tp: int) -> dict[str, Any]:
    """from_pretrained's placement arguments. tp == 1 off CPU: `device_map` loads the weights straight onto the
    GPU (a 32B model would need 64 GB of host RAM first). tp > 1: a DistributedConfig and NO device_map
    (transformers 5.x `prepare_distribute_model` refuses both: "Tensor parallelism and `device_map` are
    mutually exclusive"); it binds each rank to `<accelerator>:$LOCAL_RANK` itself, which engine/tp.py sets to
    the rank's device index."""
    if tp > 1:
        from transformers.distributed import DistributedConfig

        return {"distributed_config": DistributedConfig(tp_plan="auto", tp_size=tp)}
    return {"device_map": device} if device != "cpu" else {}


def load_model(source: str, dtype: str = "float32", device: str = "cpu", tp: int = 1):
    """The model (eval mode, on `device`) for `source`; with tp > 1 this rank's shard under the model's own
    TP plan (torch.distributed must already be initialised: engine/tp.py)."""
    src = loadable_source(source)
    extra = _gguf_overrides(Path(src.location) / src.gguf_file) if src.gguf_file else {}
    extra.update(placement(device, tp))
    model = _from_pretrained(_hf("AutoModelForCausalLM").from_pretrained, src, "model", dtype=torch_dtype(dtype), **extra)
    try:
        model = model.to(device)
    except (RuntimeError, AssertionError) as exc:
        raise UserError(f"cannot move model {source!r} to device {device!r}: {exc}") from None
    return model.eval()


def refuse_sglang_tp_on_cpu(spec: ModelSpec) -> None:
    """SGLang's tensor-parallel collectives need CUDA: the one line for it (our sglang engine's TP group, from
    check_tp, and the baselines' SGLang servers, baselines/sglang_server.py)."""
    if spec.tp > 1 and spec.device == "cpu":
        raise UserError(f"model {spec.name!r}: SGLang tensor parallelism needs CUDA (tp={spec.tp} on cpu)")


def check_tp(spec: ModelSpec) -> None:
    """The tensor-parallel checks, in one place, run once per model by the process that plans the set before
    any subserver or rank starts (engine/factory.py:prepare_models): our sglang engine's TP needs CUDA, and `tp`
    must split the model's attention heads evenly. The processes below it take the spec as checked."""
    if spec.tp <= 1 or spec.engine not in ("torch", "sglang"):  # sim refuses tp > 1 itself; plugins place their own
        return
    if spec.engine == "sglang":
        refuse_sglang_tp_on_cpu(spec)
    cfg = load_config(spec.source)
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    if heads % spec.tp or kv_heads % spec.tp:
        raise UserError(f"model {spec.name!r}: tp={spec.tp} must divide its {heads} attention heads and {kv_heads} "
                        "KV heads")


def _gguf_overrides(path: Path) -> dict[str, Any]:
    """Config fields transformers' GGUF mapping misses: Qwen3 files state head_dim as `attention.key_length`,
    which transformers ignores (it then assumes Qwen3Config's default of 128)."""
    try:
        from gguf import GGUFReader

        reader = GGUFReader(path)
        arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
        field = reader.fields.get(f"{arch}.attention.key_length")
    except Exception as exc:  # corrupt header: one line naming the file
        raise UserError(f"cannot load model from {path}: not a readable GGUF file ({exc})") from None
    return {"head_dim": int(field.parts[-1][0])} if field is not None else {}


def load_tokenizer(source: str):
    """The tokenizer for `source`, or None for engines without weights (empty source)."""
    if not source:
        return None
    return _from_pretrained(_hf("AutoTokenizer").from_pretrained, loadable_source(source), "tokenizer")


def load_config(source: str):
    """The model's config alone (no weights): what a server needs to know up front, e.g. its context length."""
    src = loadable_source(source)
    extra = {"gguf_file": src.gguf_file} if src.gguf_file else {}
    return _from_pretrained(_hf("AutoConfig").from_pretrained, src, "config", **extra)

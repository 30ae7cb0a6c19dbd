"""Fetch Hub models into the local Hugging Face cache before any engine process starts.

Why: a first download of a 16-65 GB model inside a subserver would count against its start-up timeout and,
with several subservers, download concurrently without a visible progress bar. Done once here, in the bench /
serve process, the subservers load from disk and their timeout only has to cover loading.
"""

from __future__ import annotations

from tokenrouter.engine.loader import resolve_source
from tokenrouter.errors import UserError, first_line

# what from_pretrained reads: configs, tokenizer files, chat templates, safetensors (no duplicate .bin / .pth)
WANTED = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"]


def download(source: str) -> None:
    """Download a Hub id's snapshot (progress bar on stderr); local paths and built-in models need nothing."""
    if source.startswith(("tiny-random:", "tiny:")):
        return  # built in code (or committed), never on the Hub
    src = resolve_source(source)
    if src.is_local:
        return
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(src.location, allow_patterns=WANTED)
    except Exception as exc:  # noqa: BLE001 - offline, unknown repo, gated, disk full: one line each
        raise UserError(f"cannot download model {source!r} from the Hugging Face Hub: {first_line(exc)}") from None


def download_all(specs: list) -> None:
    """Download every weighted model of a set (ModelSpecs), one after another, before anything starts."""
    for spec in specs:
        if spec.engine != "sim":
            download(spec.source)

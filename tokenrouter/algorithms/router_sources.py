"""Where a router checkpoint comes from: a local file, a local copy of an official router repo, or the Hub.

Why: official R2R names a router by repo (`GY2233/Qwen3_0_6B_Qwen3_8B`) or by file in a repo, and for a repo
it lists the repo's files and takes the first of `default_router.pt`, `router.pt`, `default_router_sampling.pt`
present, else the first `.pt` in sorted order (thu-nics/R2R `r2r/models/router.py`, `load_model`, read at
commit 14994a0). We pick the same way, within a folder of a repo when one is named (a glob, since folder names
in `nics-efc/R2R_router_collections` are irregular, e.g. `Qwen3-4B+Qwen-8B`), once, in the bench / serve
process, so subservers get a local file and never reach the Hub.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from tokenrouter.errors import UserError, first_line

CANDIDATES = ("default_router.pt", "router.pt", "default_router_sampling.pt")


@dataclass(frozen=True)
class HubRouter:
    """`owner/repo[/folder...][/file.pt]` on the Hub: no `.pt` at the end means a folder (glob allowed)."""

    repo_id: str
    folder: str = ""
    filename: str | None = None

    @classmethod
    def parse(cls, ref: str) -> HubRouter:
        parts = [p for p in ref.split("/") if p]
        if len(parts) < 2:
            raise UserError(f"router {ref!r}: no such file, and not a Hub reference owner/repo[/folder][/file.pt]")
        repo_id, rest = "/".join(parts[:2]), "/".join(parts[2:])
        if rest.endswith(".pt"):
            return cls(repo_id, filename=rest)
        return cls(repo_id, folder=rest)

    def __str__(self) -> str:
        return "/".join(p for p in (self.repo_id, self.filename or self.folder) if p)

    def patterns(self) -> list[str]:
        """The Hub `allow_patterns` of the files to choose from."""
        if self.filename:
            return [self.filename]
        return [f"{self.folder}/*.pt" if self.folder else "*.pt"]

    def download_hint(self) -> str:
        return f"hf download {self.repo_id} --include '{self.patterns()[0]}'"


def choose_checkpoint(files: Iterable[str], folder: str = "") -> str:
    """The official pick among a repo listing (paths relative to the repo root), within `folder` (a glob;
    "" = the whole repo): a known name directly in the folder, else the first `.pt` under it in sorted order."""
    pts = sorted(f for f in files if f.endswith(".pt") and (not folder or fnmatchcase(f, f"{folder}/*")))
    if not pts:
        raise UserError(f"no .pt router checkpoint under {folder or 'the repo root'!r}")
    folders = {posixpath.dirname(f) for f in pts if fnmatchcase(posixpath.dirname(f), folder)}
    if len(folders) > 1:
        raise UserError(f"router folder {folder!r} matches several folders {sorted(folders)}: name one")
    for base in folders:
        for name in CANDIDATES:
            if posixpath.join(base, name) in pts:
                return posixpath.join(base, name)
    return pts[0]


def local_files(root: Path) -> list[str]:
    """Every file under `root` as a repo-style relative path, like a Hub listing."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def resolve_router(path: str) -> Path:
    """A local router file or our router directory as is; a local directory of official checkpoints (`.pt`, no
    safetensors) or a Hub reference: the checkpoint chosen as official R2R would, downloaded if needed."""
    local = Path(path).expanduser()
    if local.is_dir() and not any(local.glob("*.safetensors")) and any(local.rglob("*.pt")):
        return local / choose_checkpoint(local_files(local))
    if local.exists():
        return local
    if str(path).startswith(("/", ".", "~")):
        raise UserError(f"router {path!r}: no such file")
    return resolve_hub_router(HubRouter.parse(str(path)))


def resolve_hub_router(ref: HubRouter) -> Path:
    """The local file of `ref`: listed and downloaded into the Hugging Face cache, or, with HF_HUB_OFFLINE=1,
    taken from the cache without any network call (one clear line if it is not there)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return _cached(ref)
    from huggingface_hub import hf_hub_download, list_repo_files

    try:
        name = ref.filename or choose_checkpoint(list_repo_files(ref.repo_id), ref.folder)
        return Path(hf_hub_download(repo_id=ref.repo_id, filename=name))
    except UserError as exc:
        raise UserError(f"router {str(ref)!r} on the Hugging Face Hub: {exc}") from None
    except Exception as exc:  # unknown repo or file, network down: one clear line, whatever the client raised
        raise UserError(
            f"router {str(ref)!r} could not be fetched from the Hugging Face Hub: {first_line(exc)}. "
            f"Download it ({ref.download_hint()}) and pass the local path."
        ) from None


def _cached(ref: HubRouter) -> Path:
    from huggingface_hub import snapshot_download

    try:
        root = Path(snapshot_download(ref.repo_id, allow_patterns=ref.patterns(), local_files_only=True))
        chosen = root / (ref.filename or choose_checkpoint(local_files(root), ref.folder))
    except Exception:  # noqa: BLE001 - not cached (whatever the client raises): the line below says what to do
        chosen = None
    if chosen is None or not chosen.is_file():
        raise UserError(
            f"router {str(ref)!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1: download it "
            f"({ref.download_hint()}) or pass a local path"
        )
    return chosen

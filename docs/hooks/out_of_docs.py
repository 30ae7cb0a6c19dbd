"""MkDocs hook: the repository files the pages link to outside the pages (results/, the README, conf/'s how-to,
the example package) copied into the built site, so those links lead somewhere there as they do on GitHub.

Why: with directory URLs a page at docs/X.md is served from site/X/, one level down, so its `../results/...`
link points at site/results/... exactly as it points at the repository's results/ from docs/; copying the
targets there is all it takes (tests/test_docs.py checks every relative link of the built site).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# repository path -> where in the site (docs/examples/ is left out of the pages: its files are code, not docs)
COPIED = {"results": "results", "README.md": "README.md", "conf/experiment/README.md": "conf/experiment/README.md",
          "docs/examples": "examples"}


def on_post_build(config: Any, **_: Any) -> None:
    site = Path(config["site_dir"])
    for name, where in COPIED.items():
        source, target = ROOT / name, site / where
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target)

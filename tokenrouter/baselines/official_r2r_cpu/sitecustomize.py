"""Runs at the start of every Python process of the official R2R server on CPU (see README.md)."""

import os

if os.environ.get("TOKENROUTER_R2R_CPU") == "1":
    import r2r_cpu_patches

    r2r_cpu_patches.install()

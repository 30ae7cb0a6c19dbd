"""Options shared by the commands that drive one model engine directly (generate, profile)."""

from __future__ import annotations

import argparse

from tokenrouter.config import ModelSpec
from tokenrouter.engine.base import Engine
from tokenrouter.engine.loader import DTYPES


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True,
                        help="local model dir, GGUF file, Hub id, or tiny-random:small|large / tiny:small|large")
    parser.add_argument("--engine", default="torch", choices=("torch", "sglang"),
                        help="torch, or sglang (needs SGLang: make sglang-venv) (default: torch)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default: cpu)")
    parser.add_argument("--dtype", default="float32", choices=DTYPES, help="weights and KV dtype (default: float32)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch (default: 1)")
    parser.add_argument("--kv-tokens", type=int, default=65536, help="KV pool size in tokens (default: 65536)")
    parser.add_argument("--page-size", type=int, default=16, help="KV page size in tokens (default: 16)")
    parser.add_argument("--tp", type=int, default=1,
                        help="tensor-parallel ranks, one process each (gloo on CPU, NCCL on GPU; default: 1)")


def spec_from_args(args: argparse.Namespace) -> ModelSpec:
    return ModelSpec(name=args.model, source=args.model, engine=args.engine, dtype=args.dtype, device=args.device,
                     threads=args.threads, kv_tokens=args.kv_tokens, page_size=args.page_size, tp=args.tp)


def engine_from_args(args: argparse.Namespace) -> Engine:
    from tokenrouter.engine.factory import build_engine, prepare_models

    return build_engine(prepare_models([spec_from_args(args)])[0])

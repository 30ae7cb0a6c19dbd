"""Router networks of the learned token-level routing algorithms (R2R, CITER, Co-LLM), as `torch.nn.Module`s.

Every router maps what the small model's forward already produced (last hidden state after the final norm,
next-token logits, the sampled token) to ONE raw logit per row; the algorithm turns it into a decision with
its threshold. They run batched on the engine's device inside the subserver process (`score`).

`R2RRouter` keeps the public R2R code's architecture AND parameter names, so its torch-saved checkpoints load
into it unchanged (see checkpoints.py): hidden state (d) ++ frozen copy of the small model's input embedding
of the predicted token ++ Linear(top-k raw logits -> d) -> Linear to the block width -> a backbone of residual
blocks (LayerNorm, Linear, GELU, Dropout, Linear, Dropout) -> LayerNorm -> Linear(width -> 1). The official
routers use width 1024 and 6 blocks (`hidden_dims=[1024] * 6`); smaller widths serve tiny local pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from tokenrouter.errors import UserError


class ResidualBlock(nn.Module):
    """Pre-norm MLP block with a residual path (a projection when the width changes)."""

    def __init__(self, in_dim: int, out_dim: int, expansion: int, dropout: float) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(in_dim)
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, in_dim * expansion),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(in_dim * expansion, out_dim),
            nn.Dropout(dropout),
        )
        self.dim_change = nn.Linear(in_dim, out_dim) if in_dim != out_dim else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dim_change(x) + self.mlp(self.layer_norm(x))


class Backbone(nn.Module):
    """input projection -> residual blocks over `widths` -> LayerNorm -> Linear(-> 1)."""

    def __init__(self, in_dim: int, widths: Sequence[int], expansion: int, dropout: float) -> None:
        super().__init__()
        widths = list(widths)
        self.input_projection = nn.Linear(in_dim, widths[0])
        dims = widths + [widths[-1]]
        self.blocks = nn.ModuleList(
            ResidualBlock(dims[i], dims[i + 1], expansion, dropout) for i in range(len(widths))
        )
        self.output_layer = nn.Sequential(nn.LayerNorm(widths[-1]), nn.Linear(widths[-1], 1))
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.kaiming_normal_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.input_projection(x)
        for block in self.blocks:
            x = block(x)
        return self.output_layer(x)


class RouterNet(nn.Module):
    """A router: `score(hidden, tokens, logits)` -> raw logit per row. `config` rebuilds the same module.

    `top_k` > 0 means the router reads the top-k raw next-token logits (descending); training stores only
    those, so `score_features` takes them directly.
    """

    kind: ClassVar[str] = ""
    config: Any

    @property
    def top_k(self) -> int:
        return 0

    def score(self, hidden: torch.Tensor, tokens: torch.Tensor, logits: torch.Tensor | None) -> torch.Tensor:
        top = None
        if self.top_k:
            if logits is None:
                raise UserError(f"{self.kind} router needs the small model's next-token logits")
            top = torch.topk(logits.float(), self.top_k, dim=-1).values
        return self.score_features(hidden.float(), tokens.long(), top)

    def score_features(self, hidden: torch.Tensor, tokens: torch.Tensor, top: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError


@dataclass
class R2RConfig:
    """Init args of `R2RRouter`; field names follow the official checkpoints' `init_args`."""

    hidden_states_size: int
    vocab_size: int
    embed_dim: int | None = None  # None: same as hidden_states_size (true for every Qwen/Llama pair)
    logits_size: int = 100
    hidden_dims: list[int] = field(default_factory=lambda: [1024] * 6)
    expansion_factor: int = 4
    dropout_rate: float = 0.1
    normalize_input: bool = False


class R2RRouter(RouterNet):
    """The official R2R router ("HiddenStatesTokenLMHeadLogitsClassifier" in the public code)."""

    kind = "r2r"

    def __init__(self, config: R2RConfig) -> None:
        super().__init__()
        self.config = config
        d = config.hidden_states_size
        embed_dim = config.embed_dim or d
        if config.logits_size > config.vocab_size:
            raise UserError(f"r2r router: logits_size {config.logits_size} exceeds the vocabulary ({config.vocab_size})")
        self.token_embeddings = nn.Embedding(config.vocab_size, embed_dim)
        self.token_embeddings.weight.requires_grad_(False)  # a frozen copy of the small model's embedding
        if config.normalize_input:
            self.layer_norm_hidden_states = nn.LayerNorm(d)
            self.layer_norm_token = nn.LayerNorm(embed_dim)
        self.logits_projection = nn.Linear(config.logits_size, d)
        self.combined_projection = nn.Linear(d + embed_dim + d, config.hidden_dims[0])
        self.backbone = Backbone(config.hidden_dims[0], config.hidden_dims, config.expansion_factor, config.dropout_rate)

    def forward(self, hidden_states: torch.Tensor, token: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """The official signature: `logits` are the top-k raw logits (descending). Returns [B, 1]."""
        emb = self.token_embeddings(token)
        if self.config.normalize_input:
            hidden_states = self.layer_norm_hidden_states(hidden_states)
            emb = self.layer_norm_token(emb)
            logits = torch.softmax(logits, dim=-1)
        features = torch.cat([hidden_states, emb, self.logits_projection(logits)], dim=-1)
        return self.backbone(self.combined_projection(features))

    @property
    def top_k(self) -> int:
        return self.config.logits_size

    def score_features(self, hidden: torch.Tensor, tokens: torch.Tensor, top: torch.Tensor | None) -> torch.Tensor:
        return self.forward(hidden, tokens, top).squeeze(-1)

    def load_embeddings(self, weight: torch.Tensor) -> None:
        """Rebuild the frozen token embedding from the small model (checkpoints strip it)."""
        if tuple(weight.shape) != tuple(self.token_embeddings.weight.shape):
            raise UserError(
                f"r2r router: the small model's input embedding is {tuple(weight.shape)}, the router expects "
                f"{tuple(self.token_embeddings.weight.shape)} (router trained for a different small model?)"
            )
        with torch.no_grad():
            self.token_embeddings.weight.copy_(weight.detach().to(self.token_embeddings.weight))


@dataclass
class MLPConfig:
    """Init args of `HiddenMLPRouter` (CITER) and `LinearRouter` (Co-LLM, `hidden_dims=[]`)."""

    hidden_states_size: int
    hidden_dims: list[int] = field(default_factory=lambda: [512, 512])
    dropout_rate: float = 0.1


class HiddenMLPRouter(RouterNet):
    """CITER's router: an MLP on the small model's last hidden state (its logit is the 'hard token' score)."""

    kind = "citer"

    def __init__(self, config: MLPConfig) -> None:
        super().__init__()
        self.config = config
        layers: list[nn.Module] = []
        width = config.hidden_states_size
        for out in config.hidden_dims:
            layers += [nn.Linear(width, out), nn.GELU(), nn.Dropout(config.dropout_rate)]
            width = out
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def score_features(self, hidden: torch.Tensor, tokens: torch.Tensor, top: torch.Tensor | None) -> torch.Tensor:
        return self.mlp(hidden).squeeze(-1)


class LinearRouter(HiddenMLPRouter):
    """Co-LLM's deferral head: one linear layer on the base (small) model's hidden state."""

    kind = "co_llm"

    def __init__(self, config: MLPConfig) -> None:
        if config.hidden_dims:
            raise UserError("co_llm deferral head is linear: hidden_dims must be empty")
        super().__init__(config)


ROUTERS: dict[str, tuple[type[RouterNet], type]] = {
    "r2r": (R2RRouter, R2RConfig),
    "citer": (HiddenMLPRouter, MLPConfig),
    "co_llm": (LinearRouter, MLPConfig),
}


def build_router(kind: str, config: dict[str, Any]) -> RouterNet:
    """Router module of `kind` from its init args (unknown args are a clear error)."""
    if kind not in ROUTERS:
        raise UserError(f"unknown router kind {kind!r} (known: {sorted(ROUTERS)})")
    net_cls, cfg_cls = ROUTERS[kind]
    try:
        cfg = cfg_cls(**config)
    except TypeError as exc:
        raise UserError(f"{kind} router config: {exc}") from None
    return net_cls(cfg)


def router_config(net: RouterNet) -> dict[str, Any]:
    return asdict(net.config)

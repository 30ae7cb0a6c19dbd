"""Train a token router (R2R, CITER, Co-LLM) for any local model pair.

Pipeline: (1) the large model answers the workload's prompts greedily (our batched torch engine); (2) the
small model reads every prompt + large answer teacher-forced in one forward and predicts each answer position;
(3) a position is labelled positive ("route to the large model") when the small model's greedy token differs
from the large model's; (4) the router learns the label from the small model's features at that position
(class-balanced BCE); (5) on a held-out split of PROBLEMS (not positions, so no prompt leaks between the
splits) the threshold is chosen for a target recall of positive positions, and the held-out AUC is reported;
(6) safetensors + JSON (config, threshold, label statistics, metrics) are written.

How the labels simplify the official R2R judgment: the public R2R pipeline also starts from the positions
where the small model's greedy token differs from the large model's, but then continues BOTH tokens with the
large model and asks a verifier LLM whether the two continuations diverge in meaning; only such "divergent"
mismatches are positives, and harmless ones (a synonym, a different but equivalent phrasing) count as
negatives. Here every mismatch is a positive: no continuation runs and no verifier model, so labels cost one
greedy generation plus one forward. The router therefore routes more often than an official one at equal
recall (it also flags neutral mismatches), which is conservative for quality. For CITER and Co-LLM, whose
papers train with other objectives (reinforcement-style preference labels; latent-variable deferral), the
same mismatch label is used as the supervision signal for their router shapes.

Determinism: greedy generation, fixed problem split and data order from `seed`, one thread.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import rankdata

from tokenrouter.algorithms.checkpoints import save_router
from tokenrouter.algorithms.routers import RouterNet, build_router
from tokenrouter.config import ModelSpec
from tokenrouter.engine.base import NO_STEP_OUTPUTS, StepItem
from tokenrouter.errors import UserError

KINDS = ("r2r", "citer", "co_llm")
QUANTILES = 201  # held-out raw-score quantiles saved with a router (route rate resolution 0.5%)
LABEL_RULE = "small-model greedy token != large-model greedy token (teacher-forced on the large model's output)"


@dataclass
class TrainSettings:
    """Knobs of one training run (saved in the JSON sidecar)."""

    algorithm: str
    seed: int = 0
    target_recall: float = 0.9
    holdout: float = 0.25  # fraction of problems held out for threshold and AUC
    epochs: int = 30
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 5e-4
    width: int | None = None  # r2r block width / MLP width; None: min(1024, 4 * hidden size)
    blocks: int = 6  # r2r residual blocks (official: 6)
    dropout: float = 0.1
    max_new_tokens: int | None = None  # cap on the large model's answers (None: the workload's)
    generation_batch: int = 16

    def __post_init__(self) -> None:
        if self.algorithm not in KINDS:
            raise UserError(f"train-router: --algorithm must be one of {KINDS}, got {self.algorithm!r}")
        if not 0.0 < self.target_recall <= 1.0:
            raise UserError(f"train-router: target recall must be in (0, 1], got {self.target_recall}")
        if not 0.0 < self.holdout < 1.0:
            raise UserError(f"train-router: holdout must be in (0, 1), got {self.holdout}")
        if self.epochs < 1 or self.batch_size < 1 or self.blocks < 1 or self.generation_batch < 1:
            raise UserError("train-router: epochs, batch size, blocks and generation batch must be >= 1")


@dataclass
class Positions:
    """Every labelled answer position: the small model's features there, the label and the problem it is from."""

    hidden: torch.Tensor  # [N, d] small model's last hidden state (after the final norm)
    top_logits: torch.Tensor  # [N, k] its top-k raw next-token logits, descending
    tokens: torch.Tensor  # [N] its greedy token
    labels: torch.Tensor  # [N] 1.0 = mismatch with the large model's token
    groups: torch.Tensor  # [N] problem number

    def __len__(self) -> int:
        return int(self.labels.numel())

    def subset(self, mask: torch.Tensor) -> Positions:
        return Positions(*(t[mask] for t in (self.hidden, self.top_logits, self.tokens, self.labels, self.groups)))


@dataclass
class TrainReport:
    threshold: float
    metrics: dict[str, float]
    labels: dict[str, Any]
    files: list[str] = field(default_factory=list)


def generate_greedy(engine: Any, prompts: list[list[int]], max_new_tokens: int, batch: int) -> list[list[int]]:
    """The engine's greedy answers (EOS included when reached), `batch` requests stepped together."""
    outputs: list[list[int]] = []
    eos = set(engine.eos_token_ids)
    for start in range(0, len(prompts), batch):
        chunk = prompts[start : start + batch]
        rids = [f"train-{start + i}" for i in range(len(chunk))]
        answers: list[list[int]] = [[] for _ in chunk]
        pending = {i: list(p) for i, p in enumerate(chunk)}
        try:
            while pending:
                order = sorted(pending)
                out = engine.step([StepItem(rids[i], pending[i]) for i in order], NO_STEP_OUTPUTS)
                pending = {}
                for i, tok in zip(order, out.next_tokens, strict=True):
                    answers[i].append(int(tok))
                    if int(tok) not in eos and len(answers[i]) < max_new_tokens:
                        pending[i] = [int(tok)]
        finally:
            for rid in rids:
                engine.release(rid)
        outputs.extend(answers)
    return outputs


@torch.inference_mode()
def label_positions(small: Any, prompts: list[list[int]], answers: list[list[int]], top_k: int, batch: int = 8) -> Positions:
    """Teacher-force the small HF model on prompt + answer (one forward per batch of sequences) and label every
    answer position by whether the small model's greedy prediction differs from the large model's token."""
    decoder, lm_head = small.get_decoder(), small.get_output_embeddings()
    device = next(small.parameters()).device
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in ("hidden", "top", "tokens", "labels", "groups")}
    for start in range(0, len(prompts), batch):
        seqs = [p + a for p, a in zip(prompts[start : start + batch], answers[start : start + batch], strict=True)]
        width = max(len(s) for s in seqs)
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        mask = torch.zeros(len(seqs), width, dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, : len(seq)] = 1
        hidden = decoder(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        for row in range(len(seqs)):
            number = start + row
            plen, answer = len(prompts[number]), answers[number]
            if not answer:
                continue
            h = hidden[row, plen - 1 : plen - 1 + len(answer)].float()  # predicts answer[0 .. len-1]
            logits = lm_head(h.to(lm_head.weight.dtype)).float()
            predicted = logits.argmax(dim=-1)
            target = torch.tensor(answer, device=device)
            parts["hidden"].append(h.cpu())
            parts["top"].append(torch.topk(logits, top_k, dim=-1).values.cpu() if top_k else torch.zeros(len(answer), 0))
            parts["tokens"].append(predicted.cpu())
            parts["labels"].append((predicted != target).float().cpu())
            parts["groups"].append(torch.full((len(answer),), number, dtype=torch.long))
    if not parts["labels"]:
        raise UserError("train-router: the large model produced no answer tokens")
    return Positions(*(torch.cat(parts[k]) for k in ("hidden", "top", "tokens", "labels", "groups")))


def split_problems(groups: torch.Tensor, holdout: float, seed: int) -> torch.Tensor:
    """Mask of held-out positions: whole problems, a seeded `holdout` fraction of them (at least one)."""
    problems = torch.unique(groups)
    if problems.numel() < 2:
        raise UserError("train-router: need at least 2 problems (one to train on, one to hold out)")
    perm = problems[torch.randperm(problems.numel(), generator=torch.Generator().manual_seed(seed))]
    count = min(max(1, round(holdout * problems.numel())), problems.numel() - 1)
    return torch.isin(groups, perm[:count])


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U with average ranks for ties); NaN when a class is missing."""
    pos = labels > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if not n_pos or not n_neg:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def raw_threshold_for_recall(raw: np.ndarray, labels: np.ndarray, recall: float) -> float:
    """The highest raw-score cut such that flagging `raw >= cut` catches >= `recall` of the positives."""
    positives = np.sort(raw[labels > 0.5])[::-1]
    if positives.size == 0:
        raise UserError("train-router: the held-out split has no positive (mismatch) positions")
    k = min(positives.size, max(1, math.ceil(recall * positives.size - 1e-9)))
    cut = float(positives[k - 1])
    return cut - 1e-6 * max(1.0, abs(cut))  # a hair lower: the algorithms' logit round trip keeps every tie


def algorithm_threshold(kind: str, raw_cut: float) -> float:
    """The threshold in each algorithm's own terms that flags exactly the rows with raw score above `raw_cut`:
    r2r sigmoid >= t, co_llm P(defer) > eta, citer confidence sigmoid(-raw) < tau."""
    return _sigmoid(-raw_cut) if kind == "citer" else _sigmoid(raw_cut)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def _router_config(settings: TrainSettings, hidden_size: int, vocab_size: int, top_k: int) -> dict[str, Any]:
    width = settings.width or min(1024, 4 * hidden_size)
    if settings.algorithm == "r2r":
        return {
            "hidden_states_size": hidden_size,
            "vocab_size": vocab_size,
            "logits_size": top_k,
            "hidden_dims": [width] * settings.blocks,
            "dropout_rate": settings.dropout,
        }
    dims = [] if settings.algorithm == "co_llm" else [width, width]
    return {"hidden_states_size": hidden_size, "hidden_dims": dims, "dropout_rate": settings.dropout}


def fit(net: RouterNet, data: Positions, settings: TrainSettings) -> list[float]:
    """Class-balanced BCE on the router's raw score; returns the mean loss per epoch."""
    labels = data.labels
    n_pos = float(labels.sum())
    n_neg = float(labels.numel()) - n_pos
    if n_pos == 0 or n_neg == 0:
        which = "mismatch" if n_neg == 0 else "match"
        raise UserError(f"train-router: every training position is a {which}; nothing to learn (try more problems)")
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(n_neg / n_pos))
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    gen = torch.Generator().manual_seed(settings.seed)
    history = []
    net.train()
    for _ in range(settings.epochs):
        perm = torch.randperm(len(data), generator=gen)
        total = 0.0
        for start in range(0, len(data), settings.batch_size):
            idx = perm[start : start + settings.batch_size]
            raw = net.score_features(data.hidden[idx], data.tokens[idx], data.top_logits[idx])
            loss = loss_fn(raw, labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * idx.numel()
        history.append(total / len(data))
    net.eval()
    return history


@torch.inference_mode()
def _scores(net: RouterNet, data: Positions) -> np.ndarray:
    return net.score_features(data.hidden, data.tokens, data.top_logits).double().numpy()


def _finite(x: float) -> float | None:
    """JSON has no NaN: an undefined metric (e.g. AUC with one class held out) is null."""
    return x if math.isfinite(x) else None


def _label_stats(data: Positions) -> dict[str, Any]:
    n = len(data)
    pos = int(data.labels.sum())
    return {"positions": n, "positives": pos, "positive_rate": pos / n if n else 0.0,
            "problems": int(torch.unique(data.groups).numel())}


def train_router(
    small: ModelSpec,
    large: ModelSpec,
    prompts: list[list[int]],
    max_new_tokens: int,
    settings: TrainSettings,
    out: Path,
    provenance: dict[str, Any] | None = None,
    progress: Any = None,
) -> TrainReport:
    """The whole pipeline for one model pair; writes `<out>/router.safetensors` + `<out>/router.json`."""
    from tokenrouter.engine.loader import load_model
    from tokenrouter.engine.torch_engine import TorchEngine

    say = progress or (lambda msg: None)
    torch.manual_seed(settings.seed)
    cap = min(max_new_tokens, settings.max_new_tokens or max_new_tokens)
    say(f"large model {large.name}: greedy answers to {len(prompts)} prompts (max {cap} new tokens)")
    engine = TorchEngine.from_spec(large)
    try:
        answers = generate_greedy(engine, prompts, cap, settings.generation_batch)
    finally:
        engine.close()
    del engine
    say(f"small model {small.name}: teacher-forced predictions at {sum(map(len, answers))} answer positions")
    small_model = load_model(small.source, small.dtype, small.device)
    vocab = int(small_model.get_input_embeddings().weight.shape[0])
    top_k = min(100, vocab) if settings.algorithm == "r2r" else 0
    data = label_positions(small_model, prompts, answers, top_k)
    held = split_problems(data.groups, settings.holdout, settings.seed)
    train, test = data.subset(~held), data.subset(held)
    net = build_router(settings.algorithm, _router_config(settings, data.hidden.shape[1], vocab, top_k))
    if hasattr(net, "load_embeddings"):
        net.load_embeddings(small_model.get_input_embeddings().weight.float().cpu())
    say(f"training the {settings.algorithm} router on {len(train)} positions ({int(train.labels.sum())} mismatches)")
    history = fit(net, train, settings)
    raw, labels = _scores(net, test), test.labels.numpy()
    cut = raw_threshold_for_recall(raw, labels, settings.target_recall)
    flagged = raw > cut
    positives = labels > 0.5
    metrics = {
        "heldout_auc": _finite(roc_auc(raw, labels)),
        "target_recall": settings.target_recall,
        "heldout_recall": float(flagged[positives].mean()),
        "heldout_precision": float(positives[flagged].mean()) if flagged.any() else 0.0,
        "heldout_route_rate": float(flagged.mean()),
        # the held-out raw scores' distribution: the route rate at any other threshold (thresholds=auto)
        "heldout_raw_quantiles": [float(q) for q in np.quantile(raw, np.linspace(0.0, 1.0, QUANTILES))],
        "final_train_loss": history[-1],
    }
    threshold = algorithm_threshold(settings.algorithm, cut)
    label_doc = {"rule": LABEL_RULE, "all": _label_stats(data), "train": _label_stats(train), "heldout": _label_stats(test)}
    meta = {
        "labels": label_doc,
        "metrics": metrics,
        "training": asdict(settings),
        "models": {"small": small.source, "large": large.source},
        **(provenance or {}),
    }
    files = save_router(net, Path(out) / "router", threshold, meta)
    return TrainReport(threshold, metrics, label_doc, [str(f) for f in files])

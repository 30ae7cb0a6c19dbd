"""The paper's Markov chain of delayed batching, built by breadth-first search and solved sparsely.

State, per model i: queue length k_i, running batch size b_i, remaining quanta r_i of the running batch; the
chain is observed at batch completions. From a state, the holding time tau is the smallest r_i among running
models; the models with r_i == tau finish and send each of their b_i requests to model j with probability
P[i][j] (one multinomial per finishing model); the others' r_i drop by tau; then every idle model whose queue
holds >= B_i requests launches its whole queue for d_i(b) quanta. Start: all N requests queued at model 0.

Throughput (renewal reward): sum_s pi(s) reward(s) / sum_s pi(s) tau(s), reward(s) = expected tokens the
finishing batches commit. The reachable chain may be periodic or keep transient states; pi is the long-run
distribution from the start state (closed classes found as strongly connected components).

Why vectorized: at N = 64 the chain has ~10^5 states and ~10^6 transitions. States are packed into one int64
code each; every BFS level expands its whole frontier with numpy (a ragged table of multinomial outcomes per
"which models finish with how many requests"), so Python runs once per level, not once per transition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import splu, spsolve
from scipy.special import gammaln

from tokenrouter.errors import UserError
from tokenrouter.perfmodel.spec import SystemSpec, check_thresholds

MAX_STATES = 3_000_000  # beyond this, ask for a coarser quantum instead of exhausting memory


@dataclass(frozen=True)
class ChainResult:
    """Solution of the chain for one (N, B): throughput and the per-model flows behind it."""

    throughput_tok_s: float
    num_states: int
    feasible: bool
    step_rate: tuple[float, ...]  # request-steps per second on each model
    batch_rate: tuple[float, ...]  # batches per second on each model
    quantum_ms: float

    @property
    def mean_batch(self) -> tuple[float, ...]:
        return tuple(s / b if b > 0 else 0.0 for s, b in zip(self.step_rate, self.batch_rate, strict=True))


@dataclass
class Chain:
    """The reachable chain: states (rows k | b | r per model), sparse transition matrix, start index."""

    states: np.ndarray  # (S, 3M) int64
    transitions: sp.csr_matrix  # (S, S), rows sum to 1
    start: int
    num_models: int

    @property
    def running(self) -> np.ndarray:
        return self.states[:, self.num_models : 2 * self.num_models]

    @property
    def remaining(self) -> np.ndarray:
        return self.states[:, 2 * self.num_models :]

    def holding_quanta(self) -> np.ndarray:
        r = np.where(self.running > 0, self.remaining, np.iinfo(np.int64).max)
        return r.min(axis=1)

    def finishing(self) -> np.ndarray:
        """(S, M) bool: which models complete their batch at the next event."""
        return (self.running > 0) & (self.remaining == self.holding_quanta()[:, None])


def throughput(spec: SystemSpec, n: int, thresholds: Sequence[int]) -> ChainResult:
    """Predicted committed-token throughput of N closed-loop requests under thresholds B."""
    return chain_throughput(spec, build_chain(spec, n, thresholds))


def threshold_rule(thresholds: Sequence[int], n: int) -> np.ndarray:
    """The launch rule of thresholds B: go[i, k] = (k >= B_i), for queue lengths k = 0..N (k = 0 never goes)."""
    k = np.arange(n + 1)
    go = k[None, :] >= np.asarray(thresholds, dtype=np.int64)[:, None]
    go[:, 0] = False
    return go


def chain_throughput(spec: SystemSpec, chain: Chain) -> ChainResult:
    """Throughput and flows of an already built chain (any launch rule)."""
    pi = long_run_distribution(chain)
    fin = chain.finishing()
    tau_ms = float(pi @ chain.holding_quanta()) * spec.quantum_ms
    steps = (pi[:, None] * (fin * chain.running)).sum(axis=0)  # request-steps per event, per model
    batches = (pi[:, None] * fin).sum(axis=0)
    per_s = 1000.0 / tau_ms
    return ChainResult(
        throughput_tok_s=float(steps @ spec.reward_per_step()) * per_s,
        num_states=len(chain.states),
        feasible=True,
        step_rate=tuple(float(x) * per_s for x in steps),
        batch_rate=tuple(float(x) * per_s for x in batches),
        quantum_ms=spec.quantum_ms,
    )


def build_chain(spec: SystemSpec, n: int, thresholds: Sequence[int]) -> Chain:
    """Breadth-first search from the start state; raises InfeasibleThresholds before building anything."""
    return build_rule_chain(spec, n, threshold_rule(check_thresholds(thresholds, n, spec.num_models), n))


def build_rule_chain(spec: SystemSpec, n: int, go: np.ndarray) -> Chain:
    """The chain of a local launch rule: an idle model i launches its whole queue of k iff go[i, k].

    Thresholds are the monotone rules (go[i, k] = k >= B_i); `tokenrouter.perfmodel.local` searches the
    others. The caller guarantees the rule cannot deadlock (some queue launches whenever all are idle).
    """
    m = spec.num_models
    rule = np.asarray(go, dtype=bool)
    quanta = spec.step_quanta(n)
    index = StateIndex(spec, n, quanta)
    outcomes = OutcomeTable(spec.route, n)

    start = np.zeros((1, 3 * m), dtype=np.int64)
    start[0, 0] = n
    _launch(start, rule, quanta, m)
    frontier, frontier_ids = start, index.add(start)[0]
    levels = [start]
    edges = Edges()
    while len(frontier):
        succ, rows, prob = _expand(frontier, outcomes, rule, quanta, m)
        succ_ids, new_rows = index.add(succ)
        edges.add(frontier_ids[rows], succ_ids, prob)
        frontier, frontier_ids = succ[new_rows], succ_ids[new_rows]
        levels.append(frontier)
    mat = edges.matrix((len(index), len(index)))
    return Chain(states=np.concatenate(levels), transitions=mat, start=0, num_models=m)


class Edges:
    """Transition probabilities collected one breadth-first level at a time, then one sparse matrix."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, src: np.ndarray, dst: np.ndarray, prob: np.ndarray) -> None:
        self.parts.append((src, dst, prob))

    def matrix(self, shape: tuple[int, int]) -> sp.csr_matrix:
        src, dst, prob = (np.concatenate(x) for x in zip(*self.parts, strict=True))
        return sp.csr_matrix((prob, (src, dst)), shape=shape)


class StateIndex:
    """Ids of states in discovery (breadth-first) order; each state is packed into one int64 code, and the
    codes are kept sorted next to their ids for vectorized lookup."""

    def __init__(self, spec: SystemSpec, n: int, quanta: np.ndarray) -> None:
        m = spec.num_models
        radix = [n + 1] * (2 * m) + [int(quanta.max()) + 1] * m
        if math.prod(radix) >= 2**62:
            raise UserError(
                f"state space too large to encode for N={n} and {m} models; use a coarser --quantum-ms"
            )
        self.n = n
        self.mult = np.cumprod([1] + radix[:-1]).astype(np.int64)
        self.codes = np.zeros(0, dtype=np.int64)
        self.ids = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(id of every row, rows holding the first occurrence of each state new to the index)."""
        uniq, first, inverse = np.unique(states @ self.mult, return_index=True, return_inverse=True)
        pos = np.searchsorted(self.codes, uniq)
        known = pos < len(self.codes)
        known[known] = self.codes[pos[known]] == uniq[known]
        uniq_ids = np.empty(len(uniq), dtype=np.int64)
        uniq_ids[known] = self.ids[pos[known]]
        new = np.flatnonzero(~known)
        uniq_ids[new] = len(self.ids) + np.arange(len(new))
        self.codes = np.insert(self.codes, pos[new], uniq[new])
        self.ids = np.insert(self.ids, pos[new], uniq_ids[new])
        if len(self.ids) > MAX_STATES:
            raise UserError(f"more than {MAX_STATES} states for N={self.n}; use a coarser --quantum-ms")
        return uniq_ids[inverse.ravel()], first[new]


def long_run_distribution(chain: Chain) -> np.ndarray:
    """Long-run fraction of events spent in each state, starting from the start state.

    Transient states get 0. With one closed class this is its stationary distribution; with several (possible
    for deterministic routing), each class's distribution is weighted by the probability of reaching it.
    """
    mat = chain.transitions
    _, labels = connected_components(mat, directed=True, connection="strong")
    coo = mat.tocoo()
    leaves = np.zeros(labels.max() + 1, dtype=bool)
    leaves[labels[coo.row[labels[coo.row] != labels[coo.col]]]] = True
    closed = np.flatnonzero(~leaves)
    pi = np.zeros(mat.shape[0])
    weights = _absorption(mat, labels, closed, chain.start) if len(closed) > 1 else [1.0]
    for cls, weight in zip(closed, weights, strict=True):
        members = np.flatnonzero(labels == cls)
        sub = mat if len(members) == mat.shape[0] else mat[members][:, members]
        pi[members] = weight * _stationary(sub)
    return pi


def _stationary(mat: sp.csr_matrix, tol: float = 1e-9, max_sweeps: int = 1000) -> np.ndarray:
    """Stationary vector of an irreducible stochastic matrix (periodic allowed), states in BFS order.

    Gauss-Seidel on (I - P^T) pi = 0 in breadth-first order: the chain mostly moves "forward" in that
    order, so one sweep carries probability mass around whole cycles and ~10-30 sweeps converge where power
    iteration needs thousands and a direct sparse LU fills in badly (minutes at N = 64).
    """
    size = mat.shape[0]
    if size == 1:
        return np.ones(1)
    coo = mat.tocoo()
    on_or_below = coo.col >= coo.row  # entry (col, row) of P^T lies on/below the diagonal
    lower = sp.csc_matrix(
        (
            np.concatenate([np.ones(size), -coo.data[on_or_below]]),
            (
                np.concatenate([np.arange(size), coo.col[on_or_below]]),
                np.concatenate([np.arange(size), coo.row[on_or_below]]),
            ),
        ),
        shape=(size, size),
    )
    upper = sp.csr_matrix(
        (-coo.data[~on_or_below], (coo.col[~on_or_below], coo.row[~on_or_below])), shape=(size, size)
    )
    solve = splu(lower, permc_spec="NATURAL", diag_pivot_thresh=0.0).solve
    x = np.full(size, 1.0 / size)
    for _ in range(max_sweeps):
        y = solve(-(upper @ x))
        y /= y.sum()
        done = np.abs(y - x).sum() < tol
        x = y
        if done:
            break
    pi = np.clip(x, 0.0, None)
    pi /= pi.sum()
    if np.abs(pi @ mat - pi).sum() > 1e-8:  # Gauss-Seidel stalled: exact (slow) direct solve instead
        a = (sp.identity(size, format="csr") - mat).T.tocsr()
        rest = spsolve(a[1:, 1:].tocsc(), -a[1:, 0].toarray().ravel())
        pi = np.clip(np.concatenate([[1.0], np.atleast_1d(rest)]), 0.0, None)
        pi /= pi.sum()
    return pi


def _absorption(mat: sp.csr_matrix, labels: np.ndarray, closed: np.ndarray, start: int) -> list[float]:
    """Probability that the chain from `start` ends in each closed class."""
    in_closed = np.isin(labels, closed)
    transient = np.flatnonzero(~in_closed)
    if not len(transient) or in_closed[start]:
        return [1.0 if labels[start] == c else 0.0 for c in closed]
    q = mat[transient][:, transient]
    system = (sp.identity(len(transient), format="csc") - q).tocsc()
    pos = int(np.searchsorted(transient, start))
    out = []
    for cls in closed:
        into = np.asarray(mat[transient][:, np.flatnonzero(labels == cls)].sum(axis=1)).ravel()
        out.append(float(np.atleast_1d(spsolve(system, into))[pos]))
    return out


def _launch(x: np.ndarray, rule: np.ndarray, quanta: np.ndarray, m: int) -> None:
    """In place: every idle model whose rule says go for its queue length starts a batch of its whole queue."""
    for i in range(m):
        go = (x[:, m + i] == 0) & rule[i, x[:, i]]
        x[go, m + i] = x[go, i]
        x[go, i] = 0
        x[go, 2 * m + i] = quanta[i, x[go, m + i]]


def _expand(
    frontier: np.ndarray, outcomes: OutcomeTable, rule: np.ndarray, quanta: np.ndarray, m: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All successors of the frontier: (successor states, index of their source row, probability)."""
    succ, rows, prob = route_events(frontier, outcomes, m)
    _launch(succ, rule, quanta, m)
    return succ, rows, prob


def route_events(
    frontier: np.ndarray, outcomes: OutcomeTable, m: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The next event from each state, before any launch: the earliest batches finish and route their requests,
    the others advance. Returns (successor states, index of their source row, probability)."""
    b, r = frontier[:, m : 2 * m], frontier[:, 2 * m :]
    running = b > 0
    if not running.any(axis=1).all():
        raise AssertionError("a reachable state has no running batch (feasibility check failed)")
    tau = np.where(running, r, np.iinfo(np.int64).max).min(axis=1)
    fin = running & (r == tau[:, None])
    base = frontier.copy()
    base[:, 2 * m :] = np.where(running, r - tau[:, None], 0)
    base[:, m : 2 * m] = np.where(fin, 0, b)
    offset, count = outcomes.lookup(np.where(fin, b, 0))
    rows = np.repeat(np.arange(len(frontier)), count)
    first = np.cumsum(count) - count
    pick = np.repeat(offset, count) + np.arange(len(rows)) - np.repeat(first, count)
    succ = base[rows]
    succ[:, :m] += outcomes.arrivals[pick]
    return succ, rows, outcomes.probs[pick]


class OutcomeTable:
    """Where the finishing requests go: for each vector (b_i of finishing model i, else 0), the list of
    arrival vectors and their probabilities, stored as slices of two flat arrays."""

    def __init__(self, route: tuple[tuple[float, ...], ...], n: int) -> None:
        self.route = route
        self.m = len(route)
        self.weights = (n + 1) ** np.arange(self.m, dtype=np.int64)
        self.slices: dict[int, tuple[int, int]] = {}
        self.arrivals = np.zeros((0, self.m), dtype=np.int64)
        self.probs = np.zeros(0)

    def lookup(self, fin_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keys = fin_b @ self.weights
        uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        new_a, new_p = [], []
        size = len(self.probs)
        for key, row in zip(uniq.tolist(), first.tolist(), strict=True):
            if key not in self.slices:
                arrivals, probs = _arrival_distribution(self.route, tuple(int(x) for x in fin_b[row]))
                self.slices[key] = (size, len(probs))
                size += len(probs)
                new_a.append(arrivals)
                new_p.append(probs)
        if new_a:
            self.arrivals = np.concatenate([self.arrivals, *new_a])
            self.probs = np.concatenate([self.probs, *new_p])
        table = np.array([self.slices[k] for k in uniq.tolist()], dtype=np.int64).reshape(-1, 2)
        return table[inverse, 0], table[inverse, 1]


def _arrival_distribution(
    route: tuple[tuple[float, ...], ...], fin_b: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Distribution of requests arriving at each queue when model i finishes a batch of fin_b[i] requests."""
    m = len(route)
    arrivals, probs = np.zeros((1, m), dtype=np.int64), np.ones(1)
    for i, count in enumerate(fin_b):
        if count == 0:
            continue
        part_a, part_p = _multinomial(count, route[i])
        merge = len(probs) > 1 and len(part_p) > 1  # two random splits can sum to the same vector
        arrivals = (arrivals[:, None, :] + part_a[None, :, :]).reshape(-1, m)
        probs = (probs[:, None] * part_p[None, :]).ravel()
        if merge:
            arrivals, inverse = np.unique(arrivals, axis=0, return_inverse=True)
            probs = np.bincount(inverse.ravel(), weights=probs, minlength=len(arrivals))
    return arrivals, probs


@lru_cache(maxsize=4096)
def _multinomial(count: int, probs: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """All ways `count` requests split over the destinations with positive probability, with probabilities."""
    support = [j for j, p in enumerate(probs) if p > 0]
    splits = np.zeros((1, len(probs)), dtype=np.int64)
    for j in support[:-1]:  # enumerate counts for all but the last destination, which takes the rest
        used = splits.sum(axis=1)
        reps = count - used + 1
        splits = np.repeat(splits, reps, axis=0)
        splits[:, j] = np.arange(len(splits)) - np.repeat(np.cumsum(reps) - reps, reps)
    splits[:, support[-1]] = count - splits.sum(axis=1)
    logp = np.full(len(splits), math.lgamma(count + 1))
    for j in support:
        logp += splits[:, j] * math.log(probs[j]) - gammaln(splits[:, j] + 1)
    splits.setflags(write=False)
    return splits, np.exp(logp)

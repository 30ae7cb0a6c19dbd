"""The optimal launch policy: the chain of delayed batching as an average-reward semi-Markov decision problem.

Why: thresholds are one policy class (launch iff the queue holds >= B_i). The chain's state space is also the
state space of a decision problem, so the best any stationary scheduler can do, knowing everything, is
computable, and it bounds what a better rule than thresholds could gain.

Decision epochs are the chain's events (and the start): after the finishing batches route their requests, each
idle model with a non-empty queue either launches its whole queue or waits. Any combination is allowed except
one that leaves no batch running: then nothing ever happens again (deadlock), so every policy of this problem
keeps the system live. A pre-decision state x and a launch set give a post-decision state y (deterministic);
from y the next event takes tau(y) quanta, commits reward(y) tokens in expectation and leads to pre-decision
states with the chain's multinomial routing.

Solved by policy iteration (Howard): evaluate the gain g and bias h of a policy with one sparse solve of
(I - P) h + g tau = r, h(start) = 0; switch every state to the action maximizing r - g tau + P h; stop when
none improves. It is exact, monotone, and takes few iterations; it needs each policy's chain to have a single
recurrent class (true whenever the all-queued-at-model-0 state is reachable from everywhere, e.g. for R2R and
ensembles with positive rates), which it checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from tokenrouter.errors import UserError
from tokenrouter.perfmodel.chain import Edges, OutcomeTable, StateIndex, route_events
from tokenrouter.perfmodel.spec import SystemSpec, check_thresholds

MAX_ITERATIONS = 100


@dataclass
class DecisionProblem:
    """States (rows k | b | r per model), the actions from each pre-decision state, and the post-decision
    transitions. Actions are sorted by their pre-decision state; `act_launch` is the bitmask of models launched."""

    pre: np.ndarray  # (X, 3M) pre-decision states: routed, not launched yet
    post: np.ndarray  # (Y, 3M) post-decision states: some batch runs
    act_pre: np.ndarray  # (A,) pre-decision state of each action
    act_post: np.ndarray  # (A,) where it leads
    act_launch: np.ndarray  # (A,) bitmask of the models it launches
    transitions: sp.csr_matrix  # (Y, X): the next event's routing
    reward: np.ndarray  # (Y,) expected tokens the finishing batches commit
    tau: np.ndarray  # (Y,) quanta until the next event
    start: int
    num_models: int
    quantum_ms: float

    @property
    def first_action(self) -> np.ndarray:
        """(X,) index of each pre-decision state's first action (actions are contiguous per state)."""
        return np.searchsorted(self.act_pre, np.arange(len(self.pre)))

    def action_for(self, launch: np.ndarray) -> np.ndarray:
        """(X,) the action index that launches bitmask launch[x] in each state (-1: not an allowed action)."""
        keys = self.act_pre * (1 << self.num_models) + self.act_launch
        want = np.arange(len(self.pre)) * (1 << self.num_models) + launch
        pos = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
        return np.where(keys[pos] == want, pos, -1)


@dataclass(frozen=True)
class PolicyResult:
    """A policy (one action per pre-decision state) with its gain and bias."""

    problem: DecisionProblem
    choice: np.ndarray  # (X,) action index per pre-decision state
    gain: float  # tokens per quantum
    bias: np.ndarray  # (X,) relative values, bias[start] = 0
    iterations: int

    @property
    def throughput_tok_s(self) -> float:
        return self.gain * 1000.0 / self.problem.quantum_ms

    @property
    def num_states(self) -> int:
        return len(self.problem.pre)


def build_problem(spec: SystemSpec, n: int) -> DecisionProblem:
    """Every state reachable from the start (all N queued at model 0) under any policy, breadth first."""
    m = spec.num_models
    quanta = spec.step_quanta(n)
    pre_index, post_index = StateIndex(spec, n, quanta), StateIndex(spec, n, quanta)
    outcomes = OutcomeTable(spec.route, n)
    start = np.zeros((1, 3 * m), dtype=np.int64)
    start[0, 0] = n
    pre_parts, post_parts = [start], []
    frontier, frontier_ids = start, pre_index.add(start)[0]
    acts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    edges = Edges()
    while len(frontier):
        posts, rows, launch = _actions(frontier, quanta, m)
        post_ids, new_post = post_index.add(posts)
        acts.append((frontier_ids[rows], post_ids, launch))
        fresh, fresh_ids = posts[new_post], post_ids[new_post]
        post_parts.append(fresh)
        succ, srows, prob = route_events(fresh, outcomes, m)
        succ_ids, new_pre = pre_index.add(succ)
        edges.add(fresh_ids[srows], succ_ids, prob)
        frontier, frontier_ids = succ[new_pre], succ_ids[new_pre]
        pre_parts.append(frontier)
    act_pre, act_post, act_launch = (np.concatenate(part) for part in zip(*acts, strict=True))
    order = np.lexsort((act_launch, act_pre))
    post = np.concatenate(post_parts)
    running, remaining = post[:, m : 2 * m] > 0, post[:, 2 * m :]
    tau = np.where(running, remaining, np.iinfo(np.int64).max).min(axis=1)
    finishing = running & (remaining == tau[:, None])
    return DecisionProblem(
        pre=np.concatenate(pre_parts),
        post=post,
        act_pre=act_pre[order],
        act_post=act_post[order],
        act_launch=act_launch[order],
        transitions=edges.matrix((len(post_index), len(pre_index))),
        reward=(finishing * post[:, m : 2 * m]) @ spec.reward_per_step(),
        tau=tau.astype(float),
        start=0,
        num_models=m,
        quantum_ms=spec.quantum_ms,
    )


def _actions(x: np.ndarray, quanta: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every allowed launch set from each state: (post-decision states, source row, launch bitmask). A model
    can launch when it is idle with a non-empty queue; waiting everywhere is allowed only while a batch runs."""
    eligible = (x[:, m : 2 * m] == 0) & (x[:, :m] > 0)
    busy = (x[:, m : 2 * m] > 0).any(axis=1)
    posts, rows, masks = [], [], []
    for mask in range(1 << m):
        sel = np.array([(mask >> i) & 1 for i in range(m)], dtype=bool)
        ok = np.flatnonzero((eligible | ~sel).all(axis=1) & (busy if mask == 0 else True))
        y = x[ok].copy()
        for i in np.flatnonzero(sel):
            y[:, m + i] = y[:, i]
            y[:, i] = 0
            y[:, 2 * m + i] = quanta[i, y[:, m + i]]
        posts.append(y)
        rows.append(ok)
        masks.append(np.full(len(ok), mask, dtype=np.int64))
    return np.concatenate(posts), np.concatenate(rows), np.concatenate(masks)


def threshold_launch(problem: DecisionProblem, thresholds: Sequence[int]) -> np.ndarray:
    """(X,) action index of the threshold rule: launch every idle model whose queue holds >= B_i."""
    m = problem.num_models
    k, b = problem.pre[:, :m], problem.pre[:, m : 2 * m]
    go = (b == 0) & (k >= np.asarray(thresholds)[None, :])
    choice = problem.action_for(go @ (1 << np.arange(m)))
    if (choice < 0).any():
        raise UserError(f"thresholds {list(thresholds)} leave some state with nothing running (deadlock)")
    return choice


def evaluate(problem: DecisionProblem, choice: np.ndarray) -> tuple[float, np.ndarray]:
    """(gain in tokens per quantum, bias with bias[start] = 0) of a policy: one sparse solve of
    (I - P) h + g tau = r with the column of h[start] replaced by g's (tau)."""
    y = problem.act_post[choice]
    size = len(problem.pre)
    a = (sp.identity(size, format="csr") - problem.transitions[y]).tocoo()
    keep = a.col != problem.start
    rows = np.concatenate([a.row[keep], np.arange(size)])
    cols = np.concatenate([a.col[keep], np.full(size, problem.start)])
    vals = np.concatenate([a.data[keep], problem.tau[y]])
    system = sp.csc_matrix((vals, (rows, cols)), shape=(size, size))
    r = problem.reward[y]
    try:
        z = splu(system).solve(r)
    except RuntimeError:  # exactly singular
        z = np.full(size, np.nan)
    if not np.isfinite(z).all() or np.abs(system @ z - r).max() > 1e-6 * max(1.0, np.abs(r).max()):
        raise UserError("this policy's chain has several recurrent classes (multichain): policy iteration "
                        "needs one; give routing rates that let every state reach 'all requests at model 0'")
    gain = float(z[problem.start])
    z[problem.start] = 0.0
    return gain, z


def solve(spec: SystemSpec, n: int, start: Sequence[int] | None = None,
          problem: DecisionProblem | None = None) -> PolicyResult:
    """The optimal stationary policy for N requests, by policy iteration from thresholds `start` (default
    all ones); each iteration can only raise the gain, so the result is at least the start's."""
    problem = problem or build_problem(spec, n)
    choice = threshold_launch(problem, check_thresholds(start or [1] * spec.num_models, n, spec.num_models))
    first = problem.first_action
    for iteration in range(1, MAX_ITERATIONS + 1):
        gain, bias = evaluate(problem, choice)
        q = problem.reward[problem.act_post] - gain * problem.tau[problem.act_post] + (
            problem.transitions @ bias)[problem.act_post]
        best = np.maximum.reduceat(q, first)
        tol = 1e-9 * (1.0 + np.abs(bias).max())
        better = best > q[choice] + tol
        if not better.any():
            return PolicyResult(problem, choice, gain, bias, iteration)
        order = np.lexsort((-q, problem.act_pre))  # per state, its best action first
        choice = np.where(better, order[first], choice)
    raise UserError(f"policy iteration did not converge in {MAX_ITERATIONS} iterations")




def launch_policy(result: PolicyResult) -> Callable[[tuple[int, ...], tuple[int, ...], tuple[float, ...]], list[bool]]:
    """The solved policy as simulate()'s launch decision: the state with the ms left of each running batch
    rounded to quanta, looked up. Run the simulator with `quantized=True` so that every state it meets is one of
    the problem's."""
    problem = result.problem
    m = problem.num_models
    masks = problem.act_launch[result.choice]
    table = {tuple(row): int(mask) for row, mask in zip(problem.pre.tolist(), masks.tolist(), strict=True)}

    def decide(queues: tuple[int, ...], running: tuple[int, ...], left_ms: tuple[float, ...]) -> list[bool]:
        quanta = tuple(round(x / problem.quantum_ms) if b else 0 for x, b in zip(left_ms, running, strict=True))
        mask = table.get((*queues, *running, *quanta))
        if mask is None:
            raise UserError(f"state {queues}, {running}, {quanta} quanta is not in the decision problem: "
                            "simulate with quantized=True")
        return [bool(mask >> i & 1) for i in range(m)]

    return decide

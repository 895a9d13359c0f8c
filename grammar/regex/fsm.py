"""Finite automata over Unicode scalar values, for what regular expressions cannot say directly.

JSON Schema asks for things such as "matches this pattern *and* is at most 20 characters long" or
"matches exactly one of these branches". A regex has no intersection or complement, so those pieces go
through automata: regex tree → NFA (Thompson) → DFA (subset construction, with a state budget) → boolean
operations (product / complement) → minimal DFA → regex tree (state elimination). The same bounded subset
construction also estimates how large a user's regex will become before outlines-core is asked to build it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from sprig.grammar.errors import too_complex
from sprig.grammar.regex import charset, ir

DEFAULT_MAX_STATES = 4000
MAX_ELIMINATION_WEIGHT = 20_000_000  # why: total regex size built while eliminating; bounds time (~1 s)
MAX_NFA_STATES = 200_000
Edge = tuple[int, int, int]  # (lo, hi, target): characters lo..hi lead to target


@dataclass
class Nfa:
    eps: list[list[int]]
    edges: list[list[tuple[charset.Ranges, int]]]
    start: int
    final: int

    def new_state(self) -> int:
        if len(self.eps) >= MAX_NFA_STATES:
            raise too_complex(f"more than {MAX_NFA_STATES} automaton states")
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1


def to_nfa(node: ir.Node) -> Nfa:
    nfa = Nfa([], [], 0, 0)
    nfa.start = nfa.new_state()
    nfa.final = _build(nfa, node, nfa.start)
    return nfa


def _build(nfa: Nfa, node: ir.Node, start: int) -> int:
    if isinstance(node, ir.Chars):
        end = nfa.new_state()
        nfa.edges[start].append((node.ranges, end))
        return end
    if isinstance(node, ir.Seq):
        for item in node.items:
            start = _build(nfa, item, start)
        return start
    if isinstance(node, ir.Alt):
        end = nfa.new_state()
        for item in node.items:
            branch = nfa.new_state()
            nfa.eps[start].append(branch)
            nfa.eps[_build(nfa, item, branch)].append(end)
        return end
    assert isinstance(node, ir.Rep)
    return _build_rep(nfa, node, start)


def _build_rep(nfa: Nfa, node: ir.Rep, start: int) -> int:
    cur = start
    for _ in range(node.lo):
        cur = _build(nfa, node.item, cur)
    if node.hi is None:
        loop = nfa.new_state()
        nfa.eps[cur].append(loop)
        nfa.eps[_build(nfa, node.item, loop)].append(loop)
        return loop
    end = nfa.new_state()
    for _ in range(node.hi - node.lo):
        nfa.eps[cur].append(end)
        cur = _build(nfa, node.item, cur)
    nfa.eps[cur].append(end)
    return end


@dataclass
class Dfa:
    """States 0..n-1, start 0; `trans[s]` sorted disjoint edges; a missing character means rejection."""

    trans: list[list[Edge]]
    accept: list[bool]

    @property
    def num_states(self) -> int:
        return len(self.accept)

    def step(self, state: int, cp: int) -> int:
        for lo, hi, target in self.trans[state]:
            if lo <= cp <= hi:
                return target
            if lo > cp:
                break
        return -1

    def accepts(self, text: str) -> bool:
        state = 0
        for c in text:
            state = self.step(state, ord(c))
            if state < 0:
                return False
        return self.accept[state]

    def is_empty(self) -> bool:
        return not any(self.accept[s] for s in _reachable(self))


def _closure(nfa: Nfa, states: set[int]) -> frozenset[int]:
    stack, seen = list(states), set(states)
    while stack:
        for nxt in nfa.eps[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return frozenset(seen)


def _split(moves: list[tuple[charset.Ranges, int]]) -> list[tuple[int, int, frozenset[int]]]:
    """Cut the alphabet into pieces on which every NFA edge is wholly in or out; the targets per piece."""
    events: dict[int, list[tuple[int, int]]] = {}
    for ranges, target in moves:
        for lo, hi in ranges:
            events.setdefault(lo, []).append((+1, target))
            events.setdefault(hi + 1, []).append((-1, target))
    active: dict[int, int] = {}
    out: list[tuple[int, int, frozenset[int]]] = []
    points = sorted(events)
    for i, point in enumerate(points[:-1]):
        for delta, target in events[point]:
            active[target] = active.get(target, 0) + delta
            if not active[target]:
                del active[target]
        if active:
            targets = frozenset(active)
            if out and out[-1][1] == point - 1 and out[-1][2] == targets:
                out[-1] = (out[-1][0], points[i + 1] - 1, targets)
            else:
                out.append((point, points[i + 1] - 1, targets))
    return out


def determinize(node: ir.Node, max_states: int = DEFAULT_MAX_STATES) -> Dfa:
    """Subset construction; raises GrammarTooComplex past `max_states` DFA states."""
    nfa = to_nfa(node)
    start = _closure(nfa, {nfa.start})
    ids = {start: 0}
    order = [start]
    trans: list[list[Edge]] = []
    for subset in order:  # why: `order` grows while we walk it, a breadth-first worklist
        moves = [m for s in subset for m in nfa.edges[s]]
        edges: list[Edge] = []
        for lo, hi, targets in _split(moves):
            closed = _closure(nfa, set(targets))
            if closed not in ids:
                if len(order) >= max_states:
                    raise too_complex(f"the automaton needs more than {max_states} states")
                ids[closed] = len(order)
                order.append(closed)
            edges.append((lo, hi, ids[closed]))
        trans.append(_merge_edges(edges))
    return Dfa(trans, [nfa.final in subset for subset in order])


def _merge_edges(edges: list[Edge]) -> list[Edge]:
    out: list[Edge] = []
    for lo, hi, target in sorted(edges):
        if out and out[-1][2] == target and out[-1][1] == lo - 1:
            out[-1] = (out[-1][0], hi, target)
        else:
            out.append((lo, hi, target))
    return out


def _reachable(dfa: Dfa) -> set[int]:
    seen, stack = {0}, [0]
    while stack:
        for _, _, target in dfa.trans[stack.pop()]:
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


# ---- boolean operations --------------------------------------------------------------------------------

def product(a: Dfa, b: Dfa, keep: str, max_states: int = DEFAULT_MAX_STATES) -> Dfa:
    """The product automaton; `keep` is 'and', 'or', 'xor' or 'diff' (in a, not in b)."""
    accept_of = {"and": lambda x, y: x and y, "or": lambda x, y: x or y,
                 "xor": lambda x, y: x != y, "diff": lambda x, y: x and not y}[keep]
    need_both = keep == "and"
    ids: dict[tuple[int, int], int] = {(0, 0): 0}
    order = [(0, 0)]
    trans: list[list[Edge]] = []
    for sa, sb in order:
        edges: list[Edge] = []
        for lo, hi, ta, tb in _pair_edges(a.trans[sa] if sa >= 0 else [], b.trans[sb] if sb >= 0 else []):
            if need_both and (ta < 0 or tb < 0):
                continue
            pair = (ta, tb)
            if pair not in ids:
                if len(order) >= max_states:
                    raise too_complex(f"the automaton needs more than {max_states} states")
                ids[pair] = len(order)
                order.append(pair)
            edges.append((lo, hi, ids[pair]))
        trans.append(_merge_edges(edges))
    accept = [accept_of(sa >= 0 and a.accept[sa], sb >= 0 and b.accept[sb]) for sa, sb in order]
    return minimize(Dfa(trans, accept))


def _pair_edges(ea: list[Edge], eb: list[Edge]) -> list[tuple[int, int, int, int]]:
    points = sorted({lo for lo, _, _ in ea + eb} | {hi + 1 for _, hi, _ in ea + eb})
    out = []
    for lo, nxt in zip(points, points[1:], strict=False):
        ta, tb = _target_at(ea, lo), _target_at(eb, lo)
        if ta >= 0 or tb >= 0:
            out.append((lo, nxt - 1, ta, tb))
    return out


def _target_at(edges: list[Edge], cp: int) -> int:
    for lo, hi, target in edges:
        if lo <= cp <= hi:
            return target
    return -1


def complement(a: Dfa) -> Dfa:
    """Every string over all scalar values that `a` rejects."""
    dead = a.num_states
    trans: list[list[Edge]] = []
    for edges in a.trans + [[]]:
        covered = charset.normalize((lo, hi) for lo, hi, _ in edges)
        gaps = [(lo, hi, dead) for lo, hi in charset.complement(covered)]
        trans.append(_merge_edges(list(edges) + gaps))
    return minimize(Dfa(trans, [not x for x in a.accept] + [True]))


def minimize(dfa: Dfa) -> Dfa:
    """Trim states that cannot reach acceptance, then merge equivalent states (Moore refinement)."""
    dfa = _trim(dfa)
    cls = [int(x) for x in dfa.accept]
    while True:
        sigs = [(cls[s], tuple(_merge_edges([(lo, hi, cls[t]) for lo, hi, t in dfa.trans[s]])))
                for s in range(dfa.num_states)]
        numbering: dict[tuple, int] = {}
        new_cls = [numbering.setdefault(sig, len(numbering)) for sig in sigs]
        if len(numbering) == len(set(cls)):
            break
        cls = new_cls
    return _quotient(dfa, new_cls)


def _quotient(dfa: Dfa, cls: list[int]) -> Dfa:
    remap = {cls[0]: 0}
    for s in range(dfa.num_states):
        remap.setdefault(cls[s], len(remap))
    trans: list[list[Edge]] = [[] for _ in remap]
    accept = [False] * len(remap)
    for s in range(dfa.num_states):
        c = remap[cls[s]]
        trans[c] = _merge_edges([(lo, hi, remap[cls[t]]) for lo, hi, t in dfa.trans[s]])
        accept[c] = dfa.accept[s]
    return Dfa(trans, accept)


def _trim(dfa: Dfa) -> Dfa:
    reach = _reachable(dfa)
    back: dict[int, set[int]] = {}
    for s in reach:
        for _, _, t in dfa.trans[s]:
            back.setdefault(t, set()).add(s)
    live = {s for s in reach if dfa.accept[s]}
    stack = list(live)
    while stack:
        for p in back.get(stack.pop(), ()):
            if p not in live:
                live.add(p)
                stack.append(p)
    if 0 not in live:
        return Dfa([[]], [False])
    keep = sorted(live)
    index = {s: i for i, s in enumerate(keep)}
    trans = [[(lo, hi, index[t]) for lo, hi, t in dfa.trans[s] if t in index] for s in keep]
    return Dfa(trans, [dfa.accept[s] for s in keep])


# ---- back to a regex -------------------------------------------------------------------------------------

def to_ir(dfa: Dfa, max_weight: int = 200_000) -> ir.Node:
    """State elimination: the language of `dfa` as a regex tree (small automata only).

    States go cheapest first (predecessors x successors), from a heap kept up to date for the neighbours of
    each eliminated state (a full scan per step made this cubic: 18 s for a 30-character date-time).
    """
    dfa = minimize(dfa)
    n = dfa.num_states
    start, final = n, n + 1
    edges: dict[int, dict[int, ir.Node]] = {s: {} for s in range(n + 2)}
    for s in range(n):
        by_target: dict[int, list[tuple[int, int]]] = {}
        for lo, hi, t in dfa.trans[s]:
            by_target.setdefault(t, []).append((lo, hi))
        for t, ranges in by_target.items():
            edges[s][t] = ir.chars(charset.normalize(ranges))
        if dfa.accept[s]:
            edges[s][final] = ir.EMPTY
    edges[start][0] = ir.EMPTY
    preds: dict[int, set[int]] = {s: set() for s in range(n + 2)}
    for p, out in edges.items():
        for q in out:
            preds[q].add(p)
    heap = [(_cost(edges, preds, k), k) for k in range(n)]
    heapq.heapify(heap)
    pending = set(range(n))
    budget = [MAX_ELIMINATION_WEIGHT]
    while pending:
        cost, k = heapq.heappop(heap)
        if k not in pending or cost != _cost(edges, preds, k):
            continue  # why: a stale heap entry; the state's current cost was pushed when it changed
        pending.discard(k)
        for s in _eliminate(edges, preds, k, max_weight, budget) & pending:
            heapq.heappush(heap, (_cost(edges, preds, s), s))
    return edges[start].get(final, ir.NEVER)


def _cost(edges: dict[int, dict[int, ir.Node]], preds: dict[int, set[int]], k: int) -> int:
    return (len(preds[k]) - (k in preds[k])) * (len(edges[k]) - (k in edges[k]))


def _eliminate(edges: dict[int, dict[int, ir.Node]], preds: dict[int, set[int]], k: int, max_weight: int,
               budget: list[int]) -> set[int]:
    """Remove state k, routing its predecessors to its successors; returns the states whose cost changed."""
    out = edges.pop(k)
    loop = ir.star(out.pop(k)) if k in out else ir.EMPTY
    sources = preds.pop(k) - {k}
    for q in out:
        preds[q].discard(k)
    for p in sources:
        p_out = edges[p]
        into = p_out.pop(k)
        for q, label in out.items():
            path = ir.seq(into, loop, label)
            p_out[q] = ir.alt(p_out[q], path) if q in p_out else path
            preds[q].add(p)
            budget[0] -= p_out[q].weight
            if p_out[q].weight > max_weight or budget[0] < 0:
                raise too_complex("a combined string constraint is too large to express as a regex")
    return sources | set(out)

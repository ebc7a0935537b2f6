#!/usr/bin/env python3
"""A checker of transaction histories in the manner of Jepsen's Elle, for the
list-append workload of histdrv.c (Kingsbury and Alvaro, "Elle: Inferring
Isolation Anomalies from Experimental Observations", VLDB 2020; Adya's
anomalies, "Weak Consistency", 1999).

A history is histdrv's output, the lines of every process together (their
order does not matter):
  I NAME SEQ OP ...      an attempt, OP = a:KEY:ELEM or r:KEY:E1,E2,...
  C NAME SEQ             committed
  A NAME SEQ             aborted (a conflict: nothing applied)
  U NAME SEQ CODE MSG    outcome unknown (the commit met a crash)
  E NAME SEQ CODE MSG    a driver error (reported, and fails the check)
  O, X, D lines          opens, restarts, ends: counted only
An I line without a C, A or U line is an outcome unknown too (its process
was killed).  Transactions of the client "final" are the reads made after
everything else (histdrv --final): the last of them (highest SEQ) must hold
every committed append.

Because every element is appended once and a read returns the whole list,
each read tells the order of the appends it saw.  The checker:
  1. finds the committed transactions: those with a C line, and those whose
     outcome is unknown but one of whose appends some committed read saw;
  2. infers each key's version order, the longest list a committed read
     returned; every other read of the key must be a prefix of it, or the
     two orders are incompatible (an anomaly by itself);
  3. builds the dependency graph of the committed transactions:
       ww  T1 -> T2   T2 appended the element right after T1's
       wr  T1 -> T2   T2 read a list ending with T1's element
       rw  T1 -> T2   T1 read a list that lacks the element T2 appended
                      right after its last one (an anti-dependency)
     (elements a transaction appended itself and then read are left out of
     its reads' edges);
  4. finds its strongly connected components (Tarjan) and in each the
     cycles that make Adya's anomalies, with a witness cycle for each:
       G0        a cycle of ww edges only (dirty write)
       G1c       a cycle of ww and wr edges, at least one wr
       G-single  a cycle with exactly one rw edge (read skew)
       G2        a component whose cycles need two rw edges or more
                 (write skew: allowed under snapshot isolation)
  5. and, not in the graph:
       G1a       a committed read saw an element of an aborted attempt
       G1b       a read saw an element its writer appended to the key
                 before another of its own (an intermediate state)
       internal  a read that disagrees with its own transaction's earlier
                 reads and appends of the key
       lost      a committed append (or one a committed writing transaction
                 saw, or one of a transaction known committed so) missing
                 from the final read of its key
       unflushed-read  read-only transactions committed having read a write
                 whose outcome is unknown and that no final read holds: the
                 crash lost what they saw (a writing transaction's durable
                 commit would have made it durable: see find_unflushed; the
                 engine did that until commit 228e311,
                 repro_unflushed_read.py)
       garbage   a read element no attempt appended; duplicates in a list
       incompatible-order  two committed reads of a key, neither a prefix of
                 the other

usage: elle.py [--model serializable|snapshot] [--quiet] HISTORY...
       elle.py --selftest
Exit status 0: no anomaly the model forbids (snapshot isolation allows G2);
1: anomalies (or driver errors); 2: a history that cannot be read.
"""
import argparse, collections, sys

FINAL = "final"
EDGE_KINDS = ("ww", "wr", "rw")
# What each model forbids: every class but G2 under snapshot isolation.
CLASSES = ("G0", "G1a", "G1b", "G1c", "G-single", "G2", "internal", "lost", "unflushed-read",
           "garbage",
           "incompatible-order", "error")
ALLOWED = {"serializable": set(), "snapshot": {"G2"}}
EXAMPLES = 5       # witnesses printed per class
SEARCH_CAP = 4000  # reachability searches per component for G-single


class HistoryError(Exception):
    pass


class Txn:
    __slots__ = ("client", "seq", "ops", "outcome", "msg", "committed", "final", "idx")

    def __init__(self, client, seq, ops):
        self.client, self.seq, self.ops = client, seq, ops
        self.outcome = None  # "ok", "fail", "info", "error"
        self.msg = ""
        self.committed = False
        self.final = client == FINAL
        self.idx = -1

    @property
    def name(self):
        return f"{self.client}#{self.seq}"

    def show(self):
        ops = " ".join(f"a({k},{e})" if kind == "a" else f"r({k})={short(e)}"
                       for kind, k, e in self.ops)
        return f"{self.name} [{self.outcome}] {ops}"


def short(lst, n=4):
    if lst is None:
        return "?"
    if len(lst) <= 2 * n:
        return "[" + ",".join(map(str, lst)) + "]"
    return ("[" + ",".join(map(str, lst[:n])) + f",...({len(lst) - 2 * n} more)...,"
            + ",".join(map(str, lst[-n:])) + "]")


# ---------------------------------------------------------------- parsing

def parse_op(tok):
    kind, _, rest = tok.partition(":")
    key, sep, val = rest.partition(":")
    if kind not in ("a", "r") or not sep:
        raise ValueError(f"bad micro-op {tok!r}")
    if kind == "a":
        return ("a", int(key), int(val))
    return ("r", int(key), [int(x) for x in val.split(",")] if val else [])


def parse(lines):
    """The transactions of a history (a list of Txn) and the counts of its
    other lines; raises HistoryError on a line it cannot read."""
    txns = {}
    other = collections.Counter()
    errors = []
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        if not line.strip():
            continue
        parts = line.split(" ")
        kind = parts[0]
        try:
            if kind == "I":
                key = (parts[1], int(parts[2]))
                if key in txns:
                    raise ValueError(f"attempt {key} invoked twice")
                txns[key] = Txn(parts[1], int(parts[2]), [parse_op(t) for t in parts[3:] if t])
            elif kind in ("C", "A", "U", "E"):
                key = (parts[1], int(parts[2]))
                t = txns.get(key)
                if kind == "E":
                    errors.append(line)
                    if t is not None and t.outcome is None:
                        t.outcome, t.msg = "error", " ".join(parts[3:])
                    continue
                if t is None:
                    raise ValueError(f"{kind} line for attempt {key} never invoked "
                                     f"(or invoked later)")
                if t.outcome is not None:
                    raise ValueError(f"attempt {key} completed twice")
                t.outcome = {"C": "ok", "A": "fail", "U": "info"}[kind]
                t.msg = " ".join(parts[3:])
            elif kind in ("O", "X", "D"):
                other[kind] += 1
            else:
                raise ValueError(f"unknown line kind {kind!r}")
        except (ValueError, IndexError) as e:
            raise HistoryError(f"line {n}: {e}: {line[:200]!r}") from None
    out = list(txns.values())
    for t in out:
        if t.outcome is None or t.outcome == "error":
            t.outcome = "info"
    return out, other, errors


# ---------------------------------------------------------------- graph

def tarjan(nodes, succ):
    """Strongly connected components (lists of nodes, size > 1 only) of the
    graph @succ (node -> iterable of nodes), iteratively."""
    index, low, on, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(succ.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(succ.get(w, ()))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(comp)
    return comps


def path(src, dst, succ, allowed):
    """A shortest path src ~> dst through nodes of @allowed (BFS), as a list
    of nodes, or None."""
    if src == dst:
        return [src]
    prev = {src: None}
    q = collections.deque([src])
    while q:
        v = q.popleft()
        for w in succ.get(v, ()):
            if w in prev or w not in allowed:
                continue
            prev[w] = v
            if w == dst:
                out = [w]
                while prev[out[-1]] is not None:
                    out.append(prev[out[-1]])
                return out[::-1]
            q.append(w)
    return None


class Graph:
    def __init__(self):
        self.edges = {}  # (a, b) -> {kind: explanation}

    def add(self, a, b, kind, why):
        if a is b:
            return
        self.edges.setdefault((a, b), {}).setdefault(kind, why)

    def succ(self, kinds, within=None):
        s = collections.defaultdict(list)
        for (a, b), ks in self.edges.items():
            if within is not None and (a not in within or b not in within):
                continue
            if any(k in kinds for k in ks):
                s[a].append(b)
        return s

    def count(self):
        c = collections.Counter()
        for ks in self.edges.values():
            c.update(ks.keys())
        return c

    def explain(self, cycle, prefer):
        """'T1 -ww(...)-> T2 -wr(...)-> T1' for the nodes of @cycle (the first
        repeated at the end), each edge shown with the first kind of @prefer
        it has."""
        parts = [cycle[0].name]
        for a, b in zip(cycle, cycle[1:]):
            ks = self.edges[(a, b)]
            kind = next(k for k in prefer if k in ks)
            parts.append(f"-{kind}[{ks[kind]}]-> {b.name}")
        return " ".join(parts)


# ---------------------------------------------------------------- the check

class Result:
    def __init__(self):
        self.anomalies = collections.defaultdict(list)  # class -> [text]
        self.stats = collections.Counter()
        self.edge_counts = collections.Counter()

    def add(self, cls, text):
        self.anomalies[cls].append(text)

    def count(self, cls):
        return len(self.anomalies.get(cls, ()))

    def forbidden(self, model):
        """Class -> count of the anomalies @model forbids."""
        return {c: len(v) for c, v in self.anomalies.items() if v and c not in ALLOWED[model]}

    def report(self, model, out=sys.stdout, quiet=False):
        s = self.stats
        print(f"history: {s['attempts']} attempts: {s['ok']} committed, {s['fail']} aborted "
              f"(conflict), {s['info']} outcome unknown ({s['info_committed']} of them seen "
              f"committed); {s['appends']} appends and {s['reads']} reads committed over "
              f"{s['keys']} keys (longest list {s['longest']}); final reads of {s['final_keys']} "
              f"keys", file=out)
        print(f"graph: {s['nodes']} transactions, edges " +
              ", ".join(f"{k} {self.edge_counts.get(k, 0)}" for k in EDGE_KINDS) +
              f"; {s['sccs']} cyclic component(s)", file=out)
        for cls in CLASSES:
            items = self.anomalies.get(cls, [])
            if not items:
                continue
            tag = "allowed under " + model if cls in ALLOWED[model] else "ANOMALY"
            print(f"{cls}: {len(items)} ({tag})", file=out)
            if not quiet or cls not in ALLOWED[model]:
                for text in items[:EXAMPLES]:
                    print(f"  {text}", file=out)
                if len(items) > EXAMPLES:
                    print(f"  ... {len(items) - EXAMPLES} more", file=out)
        bad = self.forbidden(model)
        if bad:
            print(f"RESULT: anomalies forbidden under {model}: " +
                  ", ".join(f"{c} {n}" for c, n in bad.items()), file=out)
        else:
            print(f"RESULT: valid under {model} (no forbidden anomaly)", file=out)


def check(lines):
    """Checks a history (an iterable of lines); returns a Result."""
    txns, other, errors = parse(lines)
    res = Result()
    for e in errors:
        res.add("error", f"driver: {e[:300]}")
    st = res.stats
    st["attempts"] = len(txns)
    for t in txns:
        st[t.outcome] += 1

    # Who appended each element.
    writer = {}  # elem -> (txn, key, position among the txn's appends to key)
    for t in txns:
        per_key = collections.Counter()
        for kind, k, e in t.ops:
            if kind != "a":
                continue
            if e in writer:
                res.add("garbage", f"element {e} appended twice: by {writer[e][0].name} and "
                        f"{t.name} (a driver bug)")
                continue
            writer[e] = (t, k, per_key[k])
            per_key[k] += 1
    last_append = {}  # (txn, key) -> its number of appends to key
    for e, (t, k, i) in writer.items():
        last_append[(t, k)] = max(last_append.get((t, k), 0), i + 1)

    # Committed: ok, or unknown outcome with an append a committed read saw
    # (to a fixpoint: the reads of a transaction found committed count too).
    for t in txns:
        t.committed = t.outcome == "ok"
    changed = True
    while changed:
        changed = False
        for t in txns:
            if not t.committed:
                continue
            for kind, k, lst in t.ops:
                if kind != "r":
                    continue
                for e in lst:
                    w = writer.get(e)
                    if w is not None and w[0].outcome == "info" and not w[0].committed:
                        w[0].committed = True
                        changed = True
    unflushed = find_unflushed(txns, writer, res)
    committed = [t for t in txns if t.committed]
    st["info_committed"] = sum(1 for t in committed if t.outcome == "info")
    for i, t in enumerate(committed):
        t.idx = i

    # Internal consistency, and the reads each committed transaction made
    # (its own appends at the end of a list are left out: "external" reads).
    reads = collections.defaultdict(list)  # key -> [(txn, external list)]
    for t in committed:
        state = {}  # key -> what the transaction knows the list to be (None: only a suffix)
        mine = collections.defaultdict(list)  # key -> its appends so far
        for kind, k, v in t.ops:
            if kind == "a":
                mine[k].append(v)
                if k in state and state[k] is not None:
                    state[k] = state[k] + [v]
                continue
            st["reads"] += 1
            if any(e in unflushed for e in v):
                continue  # reported: it saw a write that never became durable
            own = mine.get(k, [])
            if k in state and state[k] is not None and v != state[k]:
                res.add("internal", f"{t.show()}: read({k}) gave {short(v)}, but its own "
                        f"earlier read and appends say {short(state[k])}")
            elif own and v[len(v) - len(own):] != own:
                res.add("internal", f"{t.show()}: read({k}) gave {short(v)}, which does not "
                        f"end with its own appends {short(own)}")
            state[k] = list(v)
            ext = v
            while ext and writer.get(ext[-1], (None,))[0] is t:
                ext = ext[:-1]
            reads[k].append((t, ext, v))
        st["appends"] += sum(1 for kind, _k, _v in t.ops if kind == "a")

    # Reads: garbage, duplicates, G1a, G1b.
    for k, rs in reads.items():
        for t, ext, full in rs:
            if len(set(full)) != len(full):
                dup = [e for e, n in collections.Counter(full).items() if n > 1]
                res.add("garbage", f"{t.name} read({k}) holds element(s) {dup[:3]} twice: "
                        f"{short(full)}")
            for e in full:
                w = writer.get(e)
                if w is None:
                    res.add("garbage", f"{t.name} read({k}) holds {e}, which no attempt "
                            f"appended")
                elif w[1] != k:
                    res.add("garbage", f"{t.name} read({k}) holds {e}, appended to key {w[1]} "
                            f"by {w[0].name}")
                elif w[0].outcome == "fail":
                    res.add("G1a", f"{t.name} read({k}) = {short(full)} holds {e}, appended by "
                            f"the aborted attempt {w[0].show()}")
            if ext:
                w = writer.get(ext[-1])
                if w is not None and w[0] is not t and w[1] == k \
                        and w[2] + 1 < last_append[(w[0], k)]:
                    res.add("G1b", f"{t.name} read({k}) = {short(ext)} ends with {ext[-1]}, "
                            f"but {w[0].show()} appended more to the key after it: an "
                            f"intermediate state")

    # Version orders: the longest read of each key; the others are prefixes.
    order = {}
    for k, rs in reads.items():
        longest = max((full for _t, _e, full in rs), key=len)
        order[k] = longest
        st["longest"] = max(st["longest"], len(longest))
        bad = 0
        for t, _ext, full in rs:
            if full != longest[:len(full)]:
                bad += 1
                if bad <= 2:
                    i = next(i for i, (a, b) in enumerate(zip(full, longest)) if a != b)
                    res.add("incompatible-order",
                            f"key {k}: {t.name} read {short(full)}, not a prefix of the longest "
                            f"read {short(longest)} (they differ at position {i}: {full[i]} "
                            f"vs {longest[i]})")
    st["keys"] = len({k for t in committed for _kind, k, _v in t.ops})
    pos = {k: {e: i for i, e in enumerate(o)} for k, o in order.items()}

    # Lost: committed appends (and the elements committed reads saw) missing
    # from the final read of their key.
    final = final_reads(committed)
    st["final_keys"] = len(final)
    for k, fin in final.items():
        have = set(fin)
        for e in order.get(k, []):
            if e not in have:
                w = writer.get(e)
                wt = w[0].show() if w else "?"
                res.add("lost", f"key {k}: {e} ({wt}) was seen by a committed read but is "
                        f"missing from the final read {short(fin)}")
    for e, (t, k, _i) in writer.items():
        if t.committed and k in final and e not in set(final[k]) and e not in pos.get(k, {}):
            why = "committed" if t.outcome == "ok" else "seen committed"
            res.add("lost", f"key {k}: {e} appended by {t.show()} ({why}) is missing from the "
                    f"final read {short(final[k])}")

    # The dependency graph.
    g = Graph()
    for k, o in order.items():
        for a, b in zip(o, o[1:]):
            wa, wb = writer.get(a), writer.get(b)
            if wa and wb and wa[0].committed and wb[0].committed:
                g.add(wa[0], wb[0], "ww", f"{k}: {a} then {b}")
    for k, rs in reads.items():
        o, p = order[k], pos[k]
        for t, ext, full in rs:
            if ext:
                w = writer.get(ext[-1])
                if w and w[0].committed:
                    g.add(w[0], t, "wr", f"{k}: read ...{ext[-1]}]")
            if full != o[:len(full)]:
                continue  # no place in the version order
            m = len(ext)
            if m < len(o):
                w = writer.get(o[m])
                if w and w[0].committed:
                    g.add(t, w[0], "rw", f"{k}: read {'...' + str(ext[-1]) if ext else '[]'}"
                          f"], not {o[m]}")
    res.edge_counts = g.count()
    st["nodes"] = len(committed)

    full = g.succ(EDGE_KINDS)
    comps = tarjan(committed, full)
    st["sccs"] = len(comps)
    for comp in comps:
        classify(comp, g, res)
    return res


def final_reads(txns):
    """Key -> the list the last final read (highest seq) among @txns returned."""
    final = {}
    for t in sorted((t for t in txns if t.final and t.committed), key=lambda t: t.seq):
        for kind, k, v in t.ops:
            if kind == "r":
                final[k] = v
    return final


def find_unflushed(txns, writer, res):
    """Writes of unknown outcome that committed reads saw, but that are in no
    final read, and whose durability nothing proves: no acknowledged writing
    transaction saw them (its durable commit would have made them durable
    too: WAL is one stream), nor a write of unknown outcome that is itself
    durable or proven so.  Their readers committed at once, read-only,
    having read a write whose WAL the crash lost.  Marks those writes not
    committed, reports each acknowledged reader ("unflushed-read"), and
    returns their elements.  Writes that are proven durable yet missing stay
    committed: the lost check reports them."""
    final = final_reads(txns)
    if not final:
        return set()
    in_final = set()
    for v in final.values():
        in_final.update(v)
    readers = collections.defaultdict(set)  # elem -> committed txns whose reads hold it
    for t in txns:
        if t.committed:
            for kind, _k, v in t.ops:
                if kind == "r":
                    for e in v:
                        readers[e].add(t)
    cands = {}  # txn -> its appended elements: committed, unknown outcome, none in the final reads
    for w in txns:
        mine = [e for kind, k, e in w.ops if kind == "a" and k in final]
        if w.outcome == "info" and w.committed and mine and len(mine) == sum(
                1 for kind, _k, _e in w.ops if kind == "a") and not in_final & set(mine):
            cands[w] = mine
    who = {w: set().union(*(readers[e] for e in mine)) - {w} for w, mine in cands.items()}

    def writes(t):
        return any(kind == "a" for kind, _k, _v in t.ops)
    proven = set()
    changed = True
    while changed:
        changed = False
        for w in cands:
            if w not in proven and any(writes(r) and (r not in cands or r in proven)
                                       for r in who[w]):
                proven.add(w)
                changed = True
    out = set()
    for w in sorted(set(cands) - proven, key=lambda t: t.name):
        w.committed = False
        out.update(cands[w])
        for r in sorted((r for r in who[w] if r.outcome == "ok"), key=lambda r: r.name):
            res.add("unflushed-read", f"{r.name} (read-only, committed) read "
                    f"{sorted(e for e in cands[w] if r in readers[e])} of {w.show()}, "
                    f"whose outcome is unknown and which no final read holds: it read a "
                    f"write the crash lost")
    return out


def classify(comp, g, res):
    """The anomalies of one strongly connected component."""
    within = set(comp)
    found = False
    ww = g.succ(("ww",), within)
    for sub in tarjan(comp, ww):
        cyc = cycle_through(sub, ww)
        res.add("G0", g.explain(cyc, ("ww",)))
        found = True
    wwr = g.succ(("ww", "wr"), within)
    for sub in tarjan(comp, wwr):
        subset = set(sub)
        for (a, b), ks in g.edges.items():
            if "wr" in ks and "ww" not in ks and a in subset and b in subset:
                p = path(b, a, wwr, subset)
                res.add("G1c", g.explain([a] + p, ("wr", "ww")))
                found = True
                break
    # G-single: an rw edge a -> b with a path b ~> a of ww and wr edges.
    searches = 0
    for (a, b), ks in g.edges.items():
        if "rw" not in ks or len(ks) > 1 or a not in within or b not in within:
            continue
        if searches >= SEARCH_CAP:
            break
        searches += 1
        p = path(b, a, wwr, within)
        if p is not None:
            res.add("G-single", g.explain([a] + p, ("rw", "ww", "wr")))
            return
    if not found:
        # Cycles here need two anti-dependencies or more.
        start = comp[0]
        cyc = cycle_through([start] + [n for n in comp if n is not start], full_succ(g, within))
        res.add("G2", g.explain(cyc, ("ww", "wr", "rw")))


def full_succ(g, within):
    return g.succ(EDGE_KINDS, within)


def cycle_through(comp, succ):
    """A cycle through comp[0] inside the component @comp of @succ."""
    a = comp[0]
    within = set(comp)
    for b in succ.get(a, ()):
        if b in within:
            p = path(b, a, succ, within)
            if p is not None:
                return [a] + p
    raise AssertionError("no cycle in a strongly connected component")


# ---------------------------------------------------------------- self-test

SELFTEST = [
    # (name, history, model, expected classes found (exactly))
    ("serial", """
I p.t0 1 a:0:1 a:1:2
C p.t0 1
I p.t1 1 r:0:1 a:0:3 r:1:2
C p.t1 1
I p.t0 2 r:0:1,3 r:1:2
C p.t0 2
I final 1 r:0:1,3 r:1:2
C final 1
""", "serializable", set()),
    ("G0 (ww cycle)", """
I p.t0 1 a:0:1 a:1:2
C p.t0 1
I p.t1 1 a:0:3 a:1:4
C p.t1 1
I p.t2 1 r:0:1,3 r:1:4,2
C p.t2 1
""", "serializable", {"G0"}),
    ("G1a (aborted read)", """
I p.t0 1 a:0:1
A p.t0 1
I p.t1 1 r:0:1
C p.t1 1
""", "serializable", {"G1a"}),
    ("G1b (intermediate read)", """
I p.t0 1 a:0:1 a:0:2
C p.t0 1
I p.t1 1 r:0:1
C p.t1 1
""", "serializable", {"G1b"}),
    ("G1c (ww and wr cycle)", """
I p.t0 1 a:0:1 r:1:2
C p.t0 1
I p.t1 1 a:1:2 r:0:1
C p.t1 1
""", "serializable", {"G1c"}),
    ("G-single (read skew)", """
I p.t0 1 a:0:1 a:1:2
C p.t0 1
I p.t1 1 r:0: r:1:2
C p.t1 1
I p.t2 1 r:0:1 r:1:2
C p.t2 1
""", "serializable", {"G-single"}),
    ("G2 (write skew), allowed under SI", """
I p.t0 1 r:0: a:1:1
C p.t0 1
I p.t1 1 r:1: a:0:2
C p.t1 1
I final 1 r:0:2 r:1:1
C final 1
""", "snapshot", {"G2"}),
    ("G2 (write skew), forbidden when serializable", """
I p.t0 1 r:0: a:1:1
C p.t0 1
I p.t1 1 r:1: a:0:2
C p.t1 1
I final 1 r:0:2 r:1:1
C final 1
""", "serializable", {"G2"}),
    ("lost append", """
I p.t0 1 a:0:1
C p.t0 1
I p.t1 1 a:0:2
C p.t1 1
I final 1 r:0:2
C final 1
""", "serializable", {"lost"}),
    ("seen by a read-only transaction, then lost (unknown outcome)", """
I p.t0 1 a:0:1
I p.t1 1 r:0:1
C p.t1 1
I final 1 r:0:
C final 1
""", "serializable", {"unflushed-read"}),
    ("seen by a writing transaction, then lost (unknown outcome)", """
I p.t0 1 a:0:1
I p.t1 1 r:0:1 a:1:2
C p.t1 1
I final 1 r:0: r:1:2
C final 1
""", "serializable", {"lost", "G-single"}),
    ("a chain of unknown writes seen read-only, then lost", """
I p.t0 1 a:0:1
I p.t1 1 r:0:1 a:1:2
I p.t2 1 r:1:2
C p.t2 1
I final 1 r:0: r:1:
C final 1
""", "serializable", {"unflushed-read"}),
    ("an unknown write lost under a durable one that read it", """
I p.t0 1 a:0:1
I p.t1 1 r:0:1 a:1:2
I final 1 r:0: r:1:2
C final 1
""", "serializable", {"lost", "G-single"}),
    ("unknown outcomes either way", """
I p.t0 1 a:0:1
I p.t1 1 a:0:2
U p.t1 1 -9 restarted
I final 1 r:0:1
C final 1
""", "serializable", set()),
    ("half of an unknown transaction", """
I p.t0 1 a:0:1 a:1:2
I final 1 r:0:1 r:1:
C final 1
""", "serializable", {"lost"}),
    ("incompatible order", """
I p.t0 1 a:0:1
C p.t0 1
I p.t1 1 a:0:2
C p.t1 1
I p.t2 1 r:0:1
C p.t2 1
I p.t3 1 r:0:2
C p.t3 1
""", "serializable", {"incompatible-order"}),
    ("internal", """
I p.t0 1 a:0:1 r:0:
C p.t0 1
""", "serializable", {"internal"}),
    ("garbage", """
I p.t0 1 r:0:7
C p.t0 1
""", "serializable", {"garbage"}),
]


def selftest():
    failed = 0
    for name, text, model, expect in SELFTEST:
        res = check(text.strip().splitlines())
        got = {c for c, v in res.anomalies.items() if v}
        ok = got == expect
        want = "" if ok else f", expected {sorted(expect) or 'nothing'}"
        print(f"{'ok  ' if ok else 'FAIL'} {name}: found {sorted(got) or 'nothing'}{want}")
        if not ok:
            failed += 1
            res.report(model)
        elif expect - ALLOWED[model] and not res.forbidden(model):
            print(f"FAIL {name}: not reported as forbidden under {model}")
            failed += 1
    print(f"{len(SELFTEST) - failed} of {len(SELFTEST)} self-test histories as expected")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(ALLOWED), default="serializable")
    ap.add_argument("--quiet", action="store_true", help="no witnesses of allowed anomalies")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("history", nargs="*")
    a = ap.parse_args()
    if a.selftest:
        return selftest()
    if not a.history:
        ap.error("no history")
    lines = []
    for p in a.history:
        with open(p) as f:
            lines.extend(f)
    try:
        res = check(lines)
    except HistoryError as e:
        print(f"elle: {e}", file=sys.stderr)
        return 2
    res.report(a.model, quiet=a.quiet)
    return 1 if res.forbidden(a.model) else 0


if __name__ == "__main__":
    sys.exit(main())

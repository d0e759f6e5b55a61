"""Compiled kernels (numba): circulant diameters on bitsets, and the BFB evaluator's
pieces: source types by bitset partition refinement, their bounds, and exact U* by interval windows or
subset sums.

A set of nodes is a row of uint64 words (bit v of word v // 64). For a receiver u at step t the sources at
distance t form the sphere B_t(u) minus B_{t-1}(u); in-arc k = (w_k, u) may carry exactly the sources in
E_k = sphere intersected with B_{t-1}(w_k) (Definition 15). Sources with the same set of eligible in-arcs
are interchangeable in LP (1), so the problem is its "types": the classes of the partition of the sphere
refined by E_1, ..., E_d, each with its in-arc mask and its size. Refinement costs (classes x words) per
in-arc and never visits sources one by one. Breadth-first distances and balls on a graph are
services.synthesis.topology.distances; `warm` (services.synthesis.bfb.warm) loads them all.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic


@intrinsic
def _ctpop(typingctx, x):
    """Population count of a uint64 (the LLVM ctpop intrinsic: one POPCNT instruction where available)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


@njit(cache=True, nogil=True)
def _popcount(row) -> int:
    total = 0
    for x in row:
        total += _ctpop(x)
    return total


def step_types(prev: np.ndarray, ball: np.ndarray, preds: np.ndarray, receivers: np.ndarray | None = None):
    """Source types of every receiver (or of `receivers`) at one step.

    prev, ball: (N, words) uint64, rows B_{t-1}(u) and B_t(u); preds: (N, d) in-arc tails (slot order).
    Returns (offsets, masks, counts): the i-th receiver's types are masks[offsets[i]:offsets[i + 1]]
    (bit k: in-arc slot k eligible) with their source counts. Every source at distance t has an eligible
    in-arc, so when the |E_k| add up to the sphere's size no source has two and the types are the E_k."""
    if receivers is None:
        receivers = np.arange(ball.shape[0], dtype=np.int64)
    return _step_types(prev, ball, preds, np.asarray(receivers, dtype=np.int64))


@njit(cache=True, nogil=True)
def _step_types(prev: np.ndarray, ball: np.ndarray, preds: np.ndarray, receivers: np.ndarray):
    n = receivers.size
    words = ball.shape[1]
    d = preds.shape[1]
    cap = max(16, 4 * n)
    masks = np.empty(cap, dtype=np.int64)
    counts = np.empty(cap, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    nodes = ball.shape[0]          # a sphere has at most `nodes` sources, so at most that many classes
    classes = np.empty((nodes + 1, words), dtype=np.uint64)     # scratch: the current partition of u's sphere
    cmask = np.empty(nodes + 1, dtype=np.int64)
    ccount = np.empty(nodes + 1, dtype=np.int64)
    sphere = np.empty(words, dtype=np.uint64)
    elig = np.empty(words, dtype=np.uint64)
    inter = np.empty(words, dtype=np.uint64)
    per_arc = np.empty(d, dtype=np.int64)
    total = 0
    for i in range(n):
        u = receivers[i]
        size = 0
        for j in range(words):
            sphere[j] = ball[u, j] & ~prev[u, j]
            size += _ctpop(sphere[j])
        covered = 0
        for k in range(d):
            c = 0
            w = preds[u, k]
            for j in range(words):
                c += _ctpop(sphere[j] & prev[w, j])
            per_arc[k] = c
            covered += c
        nc = 0
        if size == 0:
            pass
        elif covered == size:                 # no source has two eligible in-arcs
            for k in range(d):
                if per_arc[k]:
                    cmask[nc] = 1 << k
                    ccount[nc] = per_arc[k]
                    nc += 1
        else:
            nc = 1
            cmask[0] = 0
            classes[0, :] = sphere
            for k in range(d):
                if per_arc[k] == 0:
                    continue
                w = preds[u, k]
                for j in range(words):
                    elig[j] = sphere[j] & prev[w, j]
                base = nc
                for c in range(base):
                    hit = False
                    miss = False
                    for j in range(words):
                        x = classes[c, j] & elig[j]
                        inter[j] = x
                        if x != 0:
                            hit = True
                        if classes[c, j] & ~elig[j] != 0:
                            miss = True
                    if not hit:
                        continue
                    if miss:                      # split: the part outside E_k becomes a new class
                        for j in range(words):
                            classes[nc, j] = classes[c, j] & ~elig[j]
                            classes[c, j] = inter[j]
                        cmask[nc] = cmask[c]
                        nc += 1
                    cmask[c] |= 1 << k
            for c in range(nc):
                ccount[c] = _popcount(classes[c])
        if total + nc > cap:
            cap = max(2 * cap, total + nc)
            masks = _grow(masks, cap)
            counts = _grow(counts, cap)
        for c in range(nc):
            masks[total] = cmask[c]
            counts[total] = ccount[c]
            total += 1
        offsets[i + 1] = total
    return offsets, masks[:total].copy(), counts[:total].copy()


@njit(cache=True, nogil=True)
def sphere_sizes(prev: np.ndarray, ball: np.ndarray) -> np.ndarray:
    """|B_t(u) - B_{t-1}(u)| for every row u: the number of sources at distance exactly t."""
    n, words = ball.shape
    out = np.zeros(n, dtype=np.int64)
    for u in range(n):
        c = 0
        for j in range(words):
            c += _ctpop(ball[u, j] & ~prev[u, j])
        out[u] = c
    return out


@njit(cache=True, nogil=True)
def step_u_star_by_runs(prev: np.ndarray, ball: np.ndarray, preds: np.ndarray, active: np.ndarray):
    """LP (1)'s optimum U* = num/den of every receiver at one step, computed straight from the bitsets when
    no source has two eligible in-arcs (U* is the largest |E_k|) or when every source's eligible in-arcs
    form one run of the in-slot cycle (then only windows of slots matter, as in `interval_u_star`): a source
    starts its run at slot s when it is in E_s and not in E_(s-1); following E_s, E_(s+1), ... from those
    starts counts the runs by (end, length) in a few word operations, and the runs add up to the sphere's
    size exactly when every source has one run. ok[u] is False where some source's slots are not one run
    (the caller refines those receivers into source types instead). Receivers with active[u] False are
    skipped (U* = 0, exact): the caller knows an automorphism maps them onto active ones."""
    n, words = ball.shape
    d = preds.shape[1]
    num = np.zeros(n, dtype=np.int64)
    den = np.ones(n, dtype=np.int64)
    ok = np.ones(n, dtype=np.bool_)
    sphere = np.empty(words, dtype=np.uint64)
    elig = np.empty((d, words), dtype=np.uint64)
    cur = np.empty(words, dtype=np.uint64)
    per_arc = np.empty(d, dtype=np.int64)
    ends = np.zeros((d, d + 1), dtype=np.int64)
    for u in range(n):
        if not active[u]:
            continue
        size = 0
        for j in range(words):
            sphere[j] = ball[u, j] & ~prev[u, j]
            size += _ctpop(sphere[j])
        if size == 0:
            continue
        covered = 0
        for k in range(d):
            w = preds[u, k]
            c = 0
            for j in range(words):
                elig[k, j] = sphere[j] & prev[w, j]
                c += _ctpop(elig[k, j])
            per_arc[k] = c
            covered += c
        if covered == size:                      # no source has two eligible in-arcs
            num[u] = per_arc.max()
            continue
        ends[:, :] = 0
        runs = 0
        for s in range(d):
            before = (s - 1) % d
            alive = False
            for j in range(words):
                cur[j] = elig[s, j] & ~elig[before, j]
                if cur[j] != 0:
                    alive = True
            length = 1
            while alive and length < d:
                nxt = (s + length) % d
                alive = False
                c = 0
                for j in range(words):
                    c += _ctpop(cur[j] & ~elig[nxt, j])
                    cur[j] &= elig[nxt, j]
                    if cur[j] != 0:
                        alive = True
                ends[(s + length - 1) % d, length] += c
                runs += c
                length += 1
        # sources eligible on every slot have no run start; every other source has at least one (a source at
        # distance t has an eligible in-arc), so runs + full == size exactly when each has one run. `full` is
        # counted even when runs == size: two sources with two runs each and two on every slot also give
        # runs == size (random_regular_digraph(28, 5, 1072), receiver 16, step 3: U* 3 was priced, 2 is right)
        full = 0
        for j in range(words):
            x = sphere[j]
            for k in range(d):
                x &= elig[k, j]
            full += _ctpop(x)
        if runs + full != size:
            ok[u] = False
            continue
        num[u], den[u] = _best_window(ends, d, size)
    return num, den, ok


@njit(cache=True, nogil=True)
def type_bounds(offsets: np.ndarray, masks: np.ndarray, counts: np.ndarray, d: int):
    """Per receiver, from its types: (alone, sources, used, upper, multi) = the largest count of sources
    eligible on one in-arc only (S = {k}), the number of sources and of in-arcs some source may use
    (S = all of them), the largest number of sources that may use one in-arc (an upper bound on U*), and
    whether some source has two eligible in-arcs."""
    n = offsets.size - 1
    alone = np.zeros(n, dtype=np.int64)
    sources = np.zeros(n, dtype=np.int64)
    used = np.zeros(n, dtype=np.int64)
    upper = np.zeros(n, dtype=np.int64)
    multi = np.zeros(n, dtype=np.bool_)
    per_arc = np.empty(d, dtype=np.int64)
    for u in range(n):
        per_arc[:] = 0
        union = 0
        for i in range(offsets[u], offsets[u + 1]):
            m, c = masks[i], counts[i]
            sources[u] += c
            union |= m
            if m & (m - 1):
                multi[u] = True
            elif c > alone[u]:
                alone[u] = c
            for k in range(d):
                if (m >> k) & 1:
                    per_arc[k] += c
        used[u] = _ctpop(np.uint64(union))
        upper[u] = per_arc.max()
    return alone, sources, used, upper, multi


@njit(cache=True, nogil=True)
def balanced_upper(offsets: np.ndarray, masks: np.ndarray, counts: np.ndarray, d: int, sweeps: int) -> np.ndarray:
    """Per problem, an upper bound on U*: the largest in-arc load of a feasible solution of LP (1). It starts
    from every source splitting its shard evenly over its eligible in-arcs, then each type in turn pours its
    sources over its arcs by water-filling (raising the least-loaded ones to a common level) for `sweeps`
    rounds, which approaches the optimum from above."""
    problems = offsets.size - 1
    out = np.zeros(problems, dtype=np.float64)
    load = np.empty(d, dtype=np.float64)
    level = np.empty(d, dtype=np.float64)
    slots = np.empty(d, dtype=np.int64)
    width = 1
    for p in range(problems):
        width = max(width, offsets[p + 1] - offsets[p])
    x = np.zeros((width, d), dtype=np.float64)
    for p in range(problems):
        lo, hi = offsets[p], offsets[p + 1]
        load[:] = 0.0
        for i in range(lo, hi):
            m = masks[i]
            share = counts[i] / _ctpop(np.uint64(m))
            for k in range(d):
                x[i - lo, k] = share if (m >> k) & 1 else 0.0
                load[k] += x[i - lo, k]
        for _ in range(sweeps):
            for i in range(lo, hi):
                m = masks[i]
                r = 0
                for k in range(d):
                    if (m >> k) & 1:
                        load[k] -= x[i - lo, k]
                        slots[r] = k
                        level[r] = load[k]
                        r += 1
                for q in range(1, r):                     # insertion sort of the r <= d levels
                    v = level[q]
                    z = q - 1
                    while z >= 0 and level[z] > v:
                        level[z + 1] = level[z]
                        z -= 1
                    level[z + 1] = v
                amount = float(counts[i])
                height = level[0]
                used = 1
                while used < r and (level[used] - height) * used <= amount:
                    amount -= (level[used] - height) * used
                    height = level[used]
                    used += 1
                height += amount / used
                for q in range(r):
                    k = slots[q]
                    v = height - load[k]
                    x[i - lo, k] = v if v > 0.0 else 0.0
                    load[k] += x[i - lo, k]
        out[p] = load.max()
    return out


@njit(cache=True, nogil=True)
def _grow(a: np.ndarray, cap: int) -> np.ndarray:
    out = np.empty(cap, dtype=a.dtype)
    out[:a.size] = a
    return out


@njit(cache=True, nogil=True)
def cyclic_distances(n: int, gens: np.ndarray) -> np.ndarray:
    """Hop counts from node 0 in the Cayley graph of Z_n with generators `gens` (x -> x + g mod n), -1 where
    unreachable: one breadth-first search, no graph built."""
    dist = np.full(n, -1, dtype=np.int64)
    queue = np.empty(n, dtype=np.int64)
    dist[0] = 0
    queue[0] = 0
    head, tail = 0, 1
    while head < tail:
        x = queue[head]
        head += 1
        for g in gens:
            y = (x + g) % n
            if dist[y] < 0:
                dist[y] = dist[x] + 1
                queue[tail] = y
                tail += 1
    return dist


@njit(cache=True, nogil=True)
def _interval_start(m: int, d: int) -> int:
    """The first slot of m's run if m's bits form one run on the cycle of d slots (not all of them), else -1."""
    full = (1 << d) - 1
    if m == 0 or m == full:
        return -1
    rotated = ((m << 1) | (m >> (d - 1))) & full      # a run starts where a bit is set and its predecessor is not
    starts = m & ~rotated
    if _ctpop(np.uint64(starts)) != 1:
        return -1
    k = 0
    while not (starts >> k) & 1:
        k += 1
    return k


@njit(cache=True, nogil=True)
def interval_u_star(offsets: np.ndarray, masks: np.ndarray, counts: np.ndarray, d: int, which: np.ndarray):
    """Exact U* = max_S load(S)/|S| for the receivers in `which` whose types are all cyclic intervals of
    in-arc slots (or all slots). Then only cyclic intervals S (and all slots) need checking: any other S
    splits into maximal runs, each interval type inside S lies in one run, so S's ratio is at most its best
    run's. Windows grow one slot at a time: extending [s, e-1] to [s, e] adds the types that end at e and
    start at s or later (ends[e][length <= e - s + 1], prefix sums over the length): O(d^2) per receiver.
    Returns (num, den, ok) per entry of `which`; ok False where some type is not an interval."""
    num = np.zeros(which.size, dtype=np.int64)
    den = np.ones(which.size, dtype=np.int64)
    ok = np.ones(which.size, dtype=np.bool_)
    full = (1 << d) - 1
    ends = np.zeros((d, d + 1), dtype=np.int64)
    for i in range(which.size):
        lo, hi = offsets[which[i]], offsets[which[i] + 1]
        ends[:, :] = 0
        everything = 0
        for j in range(lo, hi):
            everything += counts[j]
            if masks[j] == full:
                continue
            a = _interval_start(masks[j], d)
            if a < 0:
                ok[i] = False
                break
            length = _ctpop(np.uint64(masks[j]))
            ends[(a + length - 1) % d, length] += counts[j]
        if not ok[i]:
            continue
        num[i], den[i] = _best_window(ends, d, everything)
    return num, den, ok


@njit(cache=True, nogil=True)
def _best_window(ends: np.ndarray, d: int, everything: int):
    """max over cyclic windows S of in-slots (and all slots) of load(S) / |S|, from the counts of runs by
    (last slot, length) in ends (overwritten by its prefix sums over the length). Returns (num, den)."""
    for e in range(d):
        for length in range(1, d + 1):
            ends[e, length] += ends[e, length - 1]
    best_n, best_d = everything, d                  # S = every slot
    for s in range(d):
        load = 0
        for length in range(1, d):
            load += ends[(s + length - 1) % d, length]
            if load * best_d > best_n * length:
                best_n, best_d = load, length
    return best_n, best_d


@njit(cache=True, nogil=True)
def zeta_u_star(offsets: np.ndarray, masks: np.ndarray, counts: np.ndarray, d: int):
    """Exact U* = max_S load(S)/|S| of each problem (types masks[offsets[p]:offsets[p + 1]] with counts) by
    subset sums: load(S) = sum of the counts of masks inside S for every S at once (the zeta transform over
    the d-bit masks, d 2^d additions), then the best ratio, compared exactly. Returns (num, den)."""
    problems = offsets.size - 1
    num = np.zeros(problems, dtype=np.int64)
    den = np.ones(problems, dtype=np.int64)
    size = 1 << d
    table = np.zeros(size, dtype=np.int64)
    for p in range(problems):
        table[:] = 0
        for j in range(offsets[p], offsets[p + 1]):
            table[masks[j]] += counts[j]
        for i in range(d):
            bit = 1 << i
            for base in range(0, size, 2 * bit):           # sets with bit i += the same sets without it
                for j in range(base, base + bit):
                    table[j + bit] += table[j]
        best_n, best_d = 0, 1
        for s in range(1, size):
            if table[s] * best_d > best_n * _ctpop(np.uint64(s)):
                best_n, best_d = table[s], _ctpop(np.uint64(s))
        num[p], den[p] = best_n, best_d
    return num, den


@njit(cache=True, nogil=True)
def excluded_u_star(offsets: np.ndarray, masks: np.ndarray, counts: np.ndarray, scale: int, d: int,
                    walk_masks: np.ndarray, walk_weights: np.ndarray):
    """For problem p (types masks[offsets[p]:offsets[p + 1]] with counts) and its walks w: the largest over
    walks of U*(scale * counts - E_w), where E_w removes walk_weights[p, w, j] sources of type walk_masks[p, w, j]
    for each position j with a mask >= 0 (`bfb.line`: the sources a receiver of L^k(G) does not have). By
    subset sums: load(S) for every S once per problem, then for every walk the best of
    (scale load(S) - E_w(S)) / |S|. Returns (num, den) per problem."""
    problems = offsets.size - 1
    walks, k = walk_masks.shape[1], walk_masks.shape[2]
    size = 1 << d
    num = np.zeros(problems, dtype=np.int64)
    den = np.ones(problems, dtype=np.int64)
    table = np.zeros(size, dtype=np.int64)
    excl = np.zeros(size, dtype=np.int64)
    for p in range(problems):
        table[:] = 0
        for j in range(offsets[p], offsets[p + 1]):
            table[masks[j]] += counts[j] * scale
        for i in range(d):
            bit = 1 << i
            for base in range(0, size, 2 * bit):
                for j in range(base, base + bit):
                    table[j + bit] += table[j]
        best_n, best_d = 0, 1
        for w in range(walks):
            excl[:] = 0
            for j in range(k):
                if walk_masks[p, w, j] >= 0:
                    excl[walk_masks[p, w, j]] += walk_weights[p, w, j]
            for i in range(d):
                bit = 1 << i
                for base in range(0, size, 2 * bit):
                    for j in range(base, base + bit):
                        excl[j + bit] += excl[j]
            for s_ in range(1, size):
                c = _ctpop(np.uint64(s_))
                v = table[s_] - excl[s_]
                if v * best_d > best_n * c:
                    best_n, best_d = v, c
        num[p], den[p] = best_n, best_d
    return num, den


@njit(cache=True, nogil=True)
def _or_shifted_left(src: np.ndarray, shift: int, n: int, out: np.ndarray) -> None:
    """out |= (src << shift) restricted to bits 0..n-1 (src is an n-bit set in words of 64 bits)."""
    words = src.size
    q, r = shift // 64, shift % 64
    for j in range(words - 1, q - 1, -1):
        x = src[j - q] << np.uint64(r)
        if r and j - q - 1 >= 0:
            x |= src[j - q - 1] >> np.uint64(64 - r)
        out[j] |= x
    tail = n % 64
    if tail:
        out[words - 1] &= (np.uint64(1) << np.uint64(tail)) - np.uint64(1)


@njit(cache=True, nogil=True)
def _or_shifted_right(src: np.ndarray, shift: int, out: np.ndarray) -> None:
    """out |= src >> shift (src is an n-bit set in words of 64 bits)."""
    words = src.size
    q, r = shift // 64, shift % 64
    for j in range(0, words - q):
        x = src[j + q] >> np.uint64(r)
        if r and j + q + 1 < words:
            x |= src[j + q + 1] << np.uint64(64 - r)
        out[j] |= x


@njit(cache=True, nogil=True)
def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    for j in range(a.size):
        if a[j] != b[j]:
            return False
    return True


@njit(cache=True, nogil=True)
def circulant_eccentricities(n: int, gens: np.ndarray, keep: int = 0) -> np.ndarray:
    """For each row of gens (P, G) of elements of Z_n (0 < g < n): the largest hop count from node 0 in the
    circulant x -> x + g (mod n), or n if some node is unreachable. (Circulants are vertex-transitive, so
    this is the diameter.) The ball around 0 is an n-bit set; one hop rotates it by every generator.
    With keep > 0 only the `keep` smallest values are wanted: a row is abandoned (reported as n) once it
    exceeds the keep-th smallest diameter found so far."""
    words = (n + 63) // 64
    out = np.empty(gens.shape[0], dtype=np.int64)
    ball = np.empty(words, dtype=np.uint64)
    grown = np.empty(words, dtype=np.uint64)
    full = np.full(words, ~np.uint64(0), dtype=np.uint64)
    if n % 64:
        full[words - 1] = (np.uint64(1) << np.uint64(n % 64)) - np.uint64(1)
    best = np.full(max(keep, 1), n, dtype=np.int64)        # the keep smallest so far, ascending
    for p in range(gens.shape[0]):
        ball[:] = 0
        ball[0] = 1
        t = 0
        while True:
            if _equal(ball, full):
                out[p] = t
                break
            if keep > 0 and t >= best[keep - 1]:           # cannot be among the keep smallest any more
                out[p] = n
                break
            grown[:] = ball
            for g in gens[p]:
                _or_shifted_left(ball, g, n, grown)          # x -> x + g without wrapping ...
                _or_shifted_right(ball, n - g, grown)        # ... and with it (x + g - n)
            if _equal(grown, ball):
                out[p] = n
                break
            ball[:] = grown
            t += 1
        if keep > 0 and out[p] < best[keep - 1]:
            q = keep - 1
            while q > 0 and best[q - 1] > out[p]:
                best[q] = best[q - 1]
                q -= 1
            best[q] = out[p]
    return out


@njit(cache=True, nogil=True)
def walk_overlaps(out_arcs: np.ndarray, arc_head: np.ndarray, in_slot: np.ndarray, starts: np.ndarray, k: int):
    """The receivers of the iterated line digraph L^k(G) seen from G (`services.synthesis.bfb.line`).

    A node of L^k(G) is a walk J = (f_1, ..., f_k) of k arcs of G; J starts at a = tail(f_1) and visits
    b_1, ..., b_k. The nodes I whose last k - m arcs are J's first k - m arcs ("I overlaps J at m", so
    d(I, J) <= m) are the d^m walks (W, f_1, ..., f_{k-m}) with W any m-walk ending at a; I's last node is
    b_{k-m}. Each I counts at its smallest m (its distance to J when m <= k). It overlaps J at a
    smaller m' = m - p too iff J's prefix of length k - m + p has period p and W ends with F_p = (f_1..f_p),
    a closed walk at a; these events nest by suffix, so c_m (the walks counting at exactly m) is d^m minus
    d^(m-p) for every such p that has no shorter such F_p' as a suffix.

    out_arcs (n, d): arc id of each out-slot; arc_head (arcs,); in_slot (arcs,): the arc's position among
    its head's in-arcs; starts: the nodes a whose walks are listed. Returns (heads, late, early): for every
    start s and walk w (digits = out-slots, first arc most significant), heads[s, w, j - 1] = b_j and
    late[s, w, j - 1] = c_{k-j}, the overlapping walks with head b_j; early[m] = the largest number, over
    walks and in-slots of a, of walks counting at exactly m that enter a through that slot (m = 1..k)."""
    n, d = out_arcs.shape
    W = d ** k
    S = starts.size
    heads = np.empty((S, W, k), dtype=np.int64)
    late = np.empty((S, W, k), dtype=np.int64)
    early = np.zeros(k + 1, dtype=np.int64)
    f = np.empty(k + 1, dtype=np.int64)
    b = np.empty(k + 1, dtype=np.int64)
    inq = np.zeros(k + 1, dtype=np.bool_)
    slot_excl = np.zeros(d, dtype=np.int64)
    power = np.ones(k + 1, dtype=np.int64)
    for i in range(1, k + 1):
        power[i] = power[i - 1] * d
    for si in range(S):
        a = starts[si]
        for w in range(W):
            b[0] = a
            for i in range(1, k + 1):
                slot = (w // power[k - i]) % d
                f[i] = out_arcs[b[i - 1], slot]
                b[i] = arc_head[f[i]]
                heads[si, w, i - 1] = b[i]
            for m in range(0, k + 1):
                slot_excl[:] = 0
                excluded = 0
                for p in range(1, m + 1):
                    inq[p] = False
                    if b[p] != a:
                        continue
                    ok = True
                    for i in range(1, k - m + 1):
                        if f[i] != f[i + p]:
                            ok = False
                            break
                    inq[p] = ok
                for p in range(1, m + 1):
                    if not inq[p]:
                        continue
                    minimal = True
                    for q in range(1, p):
                        if not inq[q]:
                            continue
                        suffix = True
                        for i in range(1, q + 1):
                            if f[p - q + i] != f[i]:
                                suffix = False
                                break
                        if suffix:
                            minimal = False
                            break
                    if minimal:
                        excluded += power[m - p]
                        slot_excl[in_slot[f[p]]] += power[m - p]
                if m < k:
                    late[si, w, k - m - 1] = power[m] - excluded
                if m >= 1:
                    best = 0
                    for s in range(d):
                        c = power[m - 1] - slot_excl[s]
                        if c > best:
                            best = c
                    if best > early[m]:
                        early[m] = best
    return heads, late, early

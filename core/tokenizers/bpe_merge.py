"""BPE's merge loop in O(n log n) for a word of n symbols.

The rule is the reference's: repeatedly merge the adjacent pair of lowest rank, the
leftmost one among equals, until no adjacent pair has a merge. Scanning every pair for
the best one at each step costs O(n²) (a 40 KB word took 50 s); here the symbols form
a linked list (`prev`/`next` over their original positions) and the candidate pairs sit
in a heap ordered by (rank, position). A merge changes at most the two pairs around the
new symbol, so it pushes at most two entries; entries it made stale are not searched
for but recognised when they come out of the heap (their left symbol was absorbed, it
has no right neighbour any more, or the pair now there does not make the entry's
result), as the reference does. The heap never holds more than 3n entries.

Because the whole word is merged by this one algorithm, a long pre-token gives exactly
the reference's ids (cutting it into chunks would not) at a cost bounded by n log n.
"""

from heapq import heapify, heappop, heappush


def merge_symbols(symbols, merges):
    """symbols: [(id, start, end)]; merges: {(left_id, right_id): (rank, new_id)}.
    Returns the merged [(id, start, end)]."""
    n = len(symbols)
    if n < 2:
        return symbols
    ids = [s[0] for s in symbols]
    ends = [s[2] for s in symbols]
    nxt = list(range(1, n + 1))  # n: no right neighbour
    prv = list(range(-1, n - 1))  # -1: no left neighbour
    absorbed = [False] * n
    get = merges.get
    heap = []
    for k in range(n - 1):
        m = get((ids[k], ids[k + 1]))
        if m is not None:
            heap.append((m[0], k, m[1]))
    heapify(heap)
    while heap:
        _, pos, new = heappop(heap)
        if absorbed[pos]:
            continue
        right = nxt[pos]
        if right == n:
            continue
        m = get((ids[pos], ids[right]))
        if m is None or m[1] != new:
            continue  # a stale entry: the pair at pos changed since it was pushed
        ids[pos] = new
        ends[pos] = ends[right]
        absorbed[right] = True
        after = nxt[right]
        nxt[pos] = after
        if after < n:
            prv[after] = pos
            m = get((new, ids[after]))
            if m is not None:
                heappush(heap, (m[0], pos, m[1]))
        before = prv[pos]
        if before >= 0:
            m = get((ids[before], new))
            if m is not None:
                heappush(heap, (m[0], before, m[1]))
    out = []
    k = 0
    while k < n:
        out.append((ids[k], symbols[k][1], ends[k]))
        k = nxt[k]
    return out

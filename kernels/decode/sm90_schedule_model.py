#!/usr/bin/env python3
"""A discrete-event model of the bf16 64-row f16 P V kernel's two consumers (kcycles a kv
block), to compare consumer orders before spending device time on them. Not a simulator of the
GPU: each step is a fixed cost taken from the timeline probe (notes.md, session 26: softmax
0.96, P V 1.45 of which ~0.5 on the tensor cores, S 36 wgmma), the tensor cores are one FIFO
shared by both consumers, and the producer refills a slot position by position, each chunk
back R kcycles after its issue (TMA latency plus the producer's wake-up, ~2.2).

  python3 kernels/decode/sm90_schedule_model.py [R ...]

Orders (RunConsumer and RunPairConsumer in mla_decode_sm90_f16pv.h):
  slot     HEAD's: block n is consumer n % 2's; the non-owner issues the S of its next block,
           waits for the owner's statistics of n, retires S, then its P V of n; the owner runs
           the softmax of n, then its P V of n. Slot 1 filled 4-7, 0-3, 8.
  pair     kv blocks in pairs (i, i + 1): each consumer runs the softmax of its own block of the
           pair, its P V of i, then of i + 1 (the leader waits for the follower's statistics of
           i + 1 in between, the follower for the leader's of i before its softmax), then the
           S of its next own block; every slot filled in the leader's order (0-3, 4-7, 8).
It prints the period a kv block of each order (session 26 measured 4.37 for slot on the H200;
the model leaves out the statistics' shared-memory traffic and the barrier tests)."""
import sys

COST = dict(SM=0.96, SI=0.03, TS=0.128, PVS=0.22, TP=0.128, PUB=0.1, RES=0.15)
BLOCKS = 240


def chunk_order(slot, order):
    if order == "pair" or slot == 0:
        return list(range(9))
    return [4, 5, 6, 7, 0, 1, 2, 3, 8]


class Model:
    def __init__(self, refill, order):
        self.refill, self.order = refill, order
        self.free, self.stats, self.pv_done, self.pipe = {}, {}, {}, 0.0

    def landed(self, n, c):
        # The producer refills block n's slot position by position (CopyItemSm90): position p
        # is issued once its chunk was freed and position p - 1 was issued.
        if n < 2:
            return 0.0
        issued = 0.0
        for chunk in chunk_order(n % 2, self.order):
            f = self.free.get((n - 2, chunk))
            if f is None:
                return None
            issued = max(issued, f)
            if chunk == c:
                return issued + self.refill
        raise ValueError(c)

    # Steps: generators of ('wait', fn -> time or None), ('run', cost), ('now', fn(t)),
    # ('tensor', cost) -> the time the tensor cores finish it.
    def scores(self, n):
        last = 0.0
        for c in chunk_order(n % 2, self.order):
            yield ("wait", lambda c=c: self.landed(n, c))
            yield ("run", COST["SI"])
            last = yield ("tensor", COST["TS"])
        return last

    def retire(self, at):
        yield ("wait", lambda: at)

    def pv(self, n, w):
        yield ("run", COST["RES"])
        done = [0.0] * 4
        for m in range(4):  # four dims tiles, A registers double-buffered
            if m >= 2:
                yield ("wait", lambda m=m: done[m - 2])
            yield ("run", COST["PVS"])
            yield ("now", lambda t, m=m: self.free.__setitem__((n, 4 * w + m), t))
            done[m] = yield ("tensor", COST["TP"])
        yield ("wait", lambda: max(done))

        def finish(t):
            self.pv_done[(n, w)] = t
            if (n, 1 - w) in self.pv_done:
                self.free[(n, 8)] = max(t, self.pv_done[(n, 1 - w)])
        yield ("now", finish)

    def softmax(self, n):
        yield ("run", COST["SM"])
        yield ("now", lambda t: self.stats.__setitem__(n, t + COST["PUB"]))

    def take_stats(self, n):
        yield ("wait", lambda: self.stats.get(n))

    def slot_consumer(self, w):
        if w == 0:
            yield from self.retire((yield from self.scores(0)))
        for n in range(BLOCKS):
            if n % 2 == w:
                yield from self.softmax(n)
                yield from self.pv(n, w)
            else:
                s = None
                if n + 1 < BLOCKS:
                    s = yield from self.scores(n + 1)
                yield from self.take_stats(n)
                if s is not None:
                    yield from self.retire(s)
                yield from self.pv(n, w)

    def pair_consumer(self, w):
        for k in range(BLOCKS):
            own = (k & ~1) + w
            if k % 2 == 0 and own < BLOCKS:
                yield from self.retire((yield from self.scores(own)))
            if k % 2 != w:
                yield from self.take_stats(k)
            if k % 2 == 0 and own < BLOCKS:
                yield from self.softmax(own)
            yield from self.pv(k, w)

    def run(self):
        make = self.slot_consumer if self.order == "slot" else self.pair_consumer
        progs = [make(w) for w in (0, 1)]
        t, pend, res, done = [0.0, 0.0], [None, None], [None, None], [False, False]
        while not all(done):
            ready = []
            for w in (0, 1):
                if done[w]:
                    continue
                if pend[w] is None:
                    try:
                        pend[w] = progs[w].send(res[w])
                        res[w] = None
                    except StopIteration:
                        done[w] = True
                        continue
                kind, arg = pend[w]
                if kind == "wait" and arg() is None:
                    continue
                ready.append((t[w], w))
            if not ready:
                if all(done):
                    break
                raise RuntimeError("the order deadlocks")
            _, w = min(ready)  # the consumer furthest behind goes first (the FIFO's order)
            kind, arg = pend[w]
            pend[w] = None
            if kind == "wait":
                t[w] = max(t[w], arg())
            elif kind == "run":
                t[w] += arg
            elif kind == "now":
                arg(t[w])
            else:
                start = max(t[w], self.pipe)
                self.pipe = start + arg
                res[w] = self.pipe
                t[w] += 0.01  # the issue
        return (self.stats[200] - self.stats[40]) / 160


def main(argv):
    for refill in [float(a) for a in argv[1:]] or [1.9, 2.2, 2.6]:
        print("refill %.2f kcycles: %s" % (refill, ", ".join(
            "%s %.2f a kv block" % (o, Model(refill, o).run()) for o in ("slot", "pair"))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

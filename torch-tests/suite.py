"""PyTorch suite for oxccl: torch.distributed's NCCL backend end to end.

Run under torchrun, one process per GPU, with oxccl preloaded (or without, to check the suite
against NVIDIA's NCCL: it must pass there too):

  LD_PRELOAD=/path/liboxccl.so torchrun --nproc-per-node N torch-tests/suite.py [--init eager|lazy] [--out DIR]

torch-tests/run.sh runs every mode with both libraries and compares the training losses.
Every collective's result is compared with a reference each rank computes locally from the
inputs every rank is known to have contributed (inputs are functions of rank and index).
Exit status 0 only if every check passed on every rank.
"""
import argparse, datetime, json, os, struct, sys, traceback

import torch
import torch.distributed as dist

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.bool,
          torch.int32, torch.int64, torch.float64]
FLOATS = {torch.float32, torch.float16, torch.bfloat16, torch.float64}
N_ELEMS = [1, 7, 1000, 65537]


def inp(rank, n, dtype, salt=0, op=None):
    """Rank `rank`'s input: small integers, so every sum/product/min/max is exact in every dtype."""
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return ((i + rank + salt) % 3 == 0)
    if op == dist.ReduceOp.PRODUCT:
        v = (i + rank + salt) % 2 + 1  # 1 or 2: products stay exact in every float dtype
    else:
        v = (i * 3 + rank * 5 + salt) % 7 + (1 if dtype == torch.uint8 else -3 if dtype.is_signed or dtype in FLOATS else 0)
    return v.to(dtype)


def reference(xs, op, dtype):
    # Integers reduce in int64 and wrap on the final cast, as the GPU's narrow arithmetic does
    # (a product of 8 ranks' 1s and 2s reaches 256, which int8/uint8 hold as 0).
    wide = torch.float64 if dtype in FLOATS else torch.int64
    stack = torch.stack([x.to(wide) if dtype != torch.bool else x for x in xs])
    if dtype == torch.bool:
        return {dist.ReduceOp.SUM: stack.any(0), dist.ReduceOp.MAX: stack.any(0),
                dist.ReduceOp.PRODUCT: stack.all(0), dist.ReduceOp.MIN: stack.all(0)}[op]
    if op == dist.ReduceOp.SUM:
        r = stack.sum(0)
    elif op == dist.ReduceOp.PRODUCT:
        r = stack.prod(0)
    elif op == dist.ReduceOp.MIN:
        r = stack.min(0).values
    elif op == dist.ReduceOp.MAX:
        r = stack.max(0).values
    elif op == dist.ReduceOp.AVG:
        r = stack.mean(0)
    else:
        raise ValueError(op)
    return r


def same(got, want, dtype, approx=False):
    got = got.cpu()
    if dtype == torch.bool:
        return torch.equal(got, want)
    if approx:
        tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2}.get(dtype, 1e-6)
        return torch.allclose(got.to(torch.float64), want.to(torch.float64), rtol=tol, atol=tol)
    return torch.equal(got, want.to(dtype))


# For bfloat16, PyTorch (2.11, ProcessGroupNCCL getNcclReduceOp) hands NCCL the PREMUL_SUM scalar
# as a 4-byte float while declaring it bfloat16, and NCCL reads its first 2 bytes: the float's low
# half. 1.001953125 is the float 0x3F804000, whose low half 0x4000 is the bfloat16 2.0, so the
# multiplier NCCL (and so oxccl) applies is 2.0 and the result stays exact.
PREMUL_FACTOR = {torch.float32: 2.0, torch.float16: 2.0, torch.float64: 2.0, torch.bfloat16: 1.001953125}


def applied_premul_factor(factor, dtype):
    """The multiplier NCCL applies for torch's `_make_nccl_premul_sum(factor)` on `dtype`."""
    if dtype != torch.bfloat16:
        return factor
    bits = struct.unpack("<I", struct.pack("<f", factor))[0] & 0xFFFF
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]  # a bfloat16 is a float's top half


class Suite:
    def __init__(self, rank, world, dev):
        self.rank, self.world, self.dev = rank, world, dev
        self.failures, self.checks = [], 0

    def check(self, ok, what):
        self.checks += 1
        if not ok:
            self.failures.append(what)
            print(f"rank {self.rank}: FAIL {what}", flush=True)

    def run(self, name, fn):
        try:
            fn()
        except Exception:
            self.failures.append(f"{name}: exception")
            print(f"rank {self.rank}: EXCEPTION in {name}\n{traceback.format_exc()}", flush=True)

    # ---- collectives -------------------------------------------------------------------------
    def all_reduce(self):
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.AVG]
        for dtype in DTYPES:
            for op in ops:
                if op == dist.ReduceOp.AVG and dtype not in FLOATS:
                    continue  # torch allows AVG for floating types only
                for n in N_ELEMS:
                    x = inp(self.rank, n, dtype, op=op).to(self.dev)
                    dist.all_reduce(x, op=op)
                    want = reference([inp(r, n, dtype, op=op) for r in range(self.world)], op, dtype)
                    self.check(same(x, want, dtype, approx=op == dist.ReduceOp.AVG), f"all_reduce {dtype} {op} n={n}")
            if dtype in FLOATS:
                for n in N_ELEMS:
                    x = inp(self.rank, n, dtype).to(self.dev)
                    factor = PREMUL_FACTOR[dtype]
                    dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor))
                    want = applied_premul_factor(factor, dtype) * reference([inp(r, n, dtype) for r in range(self.world)], dist.ReduceOp.SUM, dtype)
                    self.check(same(x, want, dtype, approx=True), f"all_reduce {dtype} PREMUL_SUM n={n}")

    def all_gather(self):
        for dtype in (torch.float32, torch.bfloat16, torch.int8, torch.int64):
            for n in N_ELEMS:
                x = inp(self.rank, n, dtype).to(self.dev)
                outs = [torch.zeros(n, dtype=dtype, device=self.dev) for _ in range(self.world)]
                dist.all_gather(outs, x)
                for r in range(self.world):
                    self.check(same(outs[r], inp(r, n, dtype), dtype), f"all_gather {dtype} n={n} from {r}")
                flat = torch.zeros(n * self.world, dtype=dtype, device=self.dev)
                dist.all_gather_into_tensor(flat, x)
                want = torch.cat([inp(r, n, dtype) for r in range(self.world)])
                self.check(same(flat, want, dtype), f"all_gather_into_tensor {dtype} n={n}")

    def reduce_scatter(self):
        w = self.world
        for dtype in (torch.float32, torch.float16, torch.int32):
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
                for n in N_ELEMS:
                    full = [inp(r, n * w, dtype, op=op) for r in range(w)]
                    mine = [full[self.rank][k * n:(k + 1) * n].to(self.dev) for k in range(w)]
                    out = torch.zeros(n, dtype=dtype, device=self.dev)
                    dist.reduce_scatter(out, mine, op=op)
                    want = reference([f[self.rank * n:(self.rank + 1) * n] for f in full], op, dtype)
                    self.check(same(out, want, dtype), f"reduce_scatter {dtype} {op} n={n}")
                    out2 = torch.zeros(n, dtype=dtype, device=self.dev)
                    dist.reduce_scatter_tensor(out2, full[self.rank].to(self.dev), op=op)
                    self.check(same(out2, want, dtype), f"reduce_scatter_tensor {dtype} {op} n={n}")

    def broadcast_reduce(self):
        for root in range(self.world):
            for dtype in (torch.float32, torch.bfloat16, torch.uint8):
                for n in N_ELEMS:
                    x = (inp(root, n, dtype) if self.rank == root else torch.zeros(n, dtype=dtype)).to(self.dev)
                    dist.broadcast(x, src=root)
                    self.check(same(x, inp(root, n, dtype), dtype), f"broadcast {dtype} n={n} root {root}")
                    y = inp(self.rank, n, dtype).to(self.dev)
                    dist.reduce(y, dst=root, op=dist.ReduceOp.MAX)
                    if self.rank == root:
                        want = reference([inp(r, n, dtype) for r in range(self.world)], dist.ReduceOp.MAX, dtype)
                        self.check(same(y, want, dtype), f"reduce {dtype} n={n} root {root}")

    def large_mixed(self):
        """Large steps of different kinds back to back, as training interleaves them: an AllReduce
        that both sends and receives, then a Broadcast whose root only sends. Across hosts both are
        staged through the same host arena and pipelined above 1 MiB; the second must not refill
        the arena while the first's data is still going out (net_step.cu)."""
        for k in range(12):
            n = (1 << 20) + 4099 * k  # 4-4.2 MiB of float32: above the pipelining threshold
            x = inp(self.rank, n, torch.float32, salt=k).to(self.dev)
            dist.all_reduce(x)
            want = reference([inp(r, n, torch.float32, salt=k) for r in range(self.world)], dist.ReduceOp.SUM, torch.float32)
            root = k % self.world
            y = (inp(root, n, torch.float32, salt=k + 1) if self.rank == root else torch.zeros(n)).to(self.dev)
            dist.broadcast(y, src=root)
            self.check(same(x, want, torch.float32), f"large_mixed all_reduce k={k}")
            self.check(same(y, inp(root, n, torch.float32, salt=k + 1), torch.float32), f"large_mixed broadcast k={k} root {root}")

    def all_to_all(self):
        w = self.world
        for dtype in (torch.float32, torch.int64):
            for n in (1, 333, 4096):
                ins = [inp(self.rank, n, dtype, salt=d).to(self.dev) for d in range(w)]
                outs = [torch.zeros(n, dtype=dtype, device=self.dev) for _ in range(w)]
                dist.all_to_all(outs, ins)
                for s in range(w):
                    self.check(same(outs[s], inp(s, n, dtype, salt=self.rank), dtype), f"all_to_all {dtype} n={n} from {s}")
            # Uneven splits with zeros: what PyTorch turns into grouped send/recv with 0 counts.
            split = lambda s, d: 0 if (s + d) % 3 == 0 else (s * w + d) % 5 + 1
            send_splits = [split(self.rank, d) for d in range(w)]
            recv_splits = [split(s, self.rank) for s in range(w)]
            send = torch.cat([inp(self.rank, c, dtype, salt=d) for d, c in enumerate(send_splits)]).to(self.dev)
            recv = torch.full((sum(recv_splits),), 9, dtype=dtype, device=self.dev)
            dist.all_to_all_single(recv, send, recv_splits, send_splits)
            want = torch.cat([inp(s, c, dtype, salt=self.rank) for s, c in enumerate(recv_splits)])
            self.check(same(recv, want, dtype), f"all_to_all_single uneven {dtype}")

    def gather_scatter(self):
        for root in range(self.world):
            n = 513
            x = inp(self.rank, n, torch.float32).to(self.dev)
            gl = [torch.zeros(n, device=self.dev) for _ in range(self.world)] if self.rank == root else None
            dist.gather(x, gather_list=gl, dst=root)
            if self.rank == root:
                for r in range(self.world):
                    self.check(same(gl[r], inp(r, n, torch.float32), torch.float32), f"gather root {root} from {r}")
            sl = [inp(root, n, torch.float32, salt=d).to(self.dev) for d in range(self.world)] if self.rank == root else None
            y = torch.zeros(n, device=self.dev)
            dist.scatter(y, scatter_list=sl, src=root)
            self.check(same(y, inp(root, n, torch.float32, salt=self.rank), torch.float32), f"scatter root {root}")

    def point_to_point(self):
        w, r = self.world, self.rank
        nxt, prv = (r + 1) % w, (r - 1) % w
        for n in (1, 4097, 1 << 20):
            s = inp(r, n, torch.float32, salt=1).to(self.dev)
            t = torch.zeros(n, device=self.dev)
            if r % 2 == 0:
                dist.send(s, nxt)
                dist.recv(t, prv)
            else:
                dist.recv(t, prv)
                dist.send(s, nxt)
            self.check(same(t, inp(prv, n, torch.float32, salt=1), torch.float32), f"send/recv n={n}")
            t2 = torch.zeros(n, device=self.dev)
            # Unbatched isend/irecv are separate operations: order them as the blocking pair
            # above, or a large send could wait for a receive queued behind it (as with NCCL).
            reqs = [dist.isend(s, nxt), dist.irecv(t2, prv)] if r % 2 == 0 else [dist.irecv(t2, prv), dist.isend(s, nxt)]
            for q in reqs:
                q.wait()
            self.check(same(t2, inp(prv, n, torch.float32, salt=1), torch.float32), f"isend/irecv n={n}")
            bufs = {p: torch.zeros(n, device=self.dev) for p in range(w) if p != r}
            ops = []
            for p in bufs:
                ops += [dist.P2POp(dist.isend, inp(r, n, torch.float32, salt=p).to(self.dev), p),
                        dist.P2POp(dist.irecv, bufs[p], p)]
            for q in dist.batch_isend_irecv(ops):
                q.wait()
            for p, b in bufs.items():
                self.check(same(b, inp(p, n, torch.float32, salt=r), torch.float32), f"batch_isend_irecv n={n} from {p}")
        if w % 2 == 0:
            # Twenty pairs of separate buffers with one partner in one group (matched in order):
            # across 2 simulated hosts of 1 that is 40 copies through the host arena, more than a
            # step kernel's 32 slots (src/net/mod.rs, `overflow`). At 4 ranks the group is cut
            # into launches of 13 a pair (src/algo/batches.rs); there the 60-message test below
            # reaches the overflow: 13 each way with each of two remote peers, over 32 copies.
            partner = (r + w // 2) % w
            sizes = [1000 + 37 * i for i in range(20)]
            outs = [inp(r, m, torch.float32, salt=i).to(self.dev) for i, m in enumerate(sizes)]
            ins = [torch.zeros(m, device=self.dev) for m in sizes]
            ops = [dist.P2POp(dist.isend, t, partner) for t in outs] + [dist.P2POp(dist.irecv, t, partner) for t in ins]
            for q in dist.batch_isend_irecv(ops):
                q.wait()
            for i, m in enumerate(sizes):
                self.check(same(ins[i], inp(partner, m, torch.float32, salt=i), torch.float32), f"batch of 20 pairs with {partner}, #{i}")
        # Sixty messages each way with every peer in one group: more than one launch holds at any
        # world size, so oxccl cuts it into several (src/algo/batches.rs); NCCL has no limit.
        # Across simulated hosts each cut still overflows a step kernel's copy slots (above).
        sizes = [1 + 97 * i for i in range(60)]
        ops, ins = [], {}
        for p in (p for p in range(w) if p != r):
            ins[p] = [torch.zeros(m, device=self.dev) for m in sizes]
            ops += [dist.P2POp(dist.isend, inp(r, m, torch.float32, salt=100 + i + p).to(self.dev), p) for i, m in enumerate(sizes)]
            ops += [dist.P2POp(dist.irecv, t, p) for t in ins[p]]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        for p, bufs in ins.items():
            for i, m in enumerate(sizes):
                self.check(same(bufs[i], inp(p, m, torch.float32, salt=100 + i + r), torch.float32), f"batch of 60 messages from {p}, #{i}")

    def barriers_and_groups(self):
        dist.barrier()
        gloo = dist.new_group(backend="gloo")  # monitored_barrier is a gloo-only API
        dist.monitored_barrier(group=gloo, timeout=datetime.timedelta(seconds=60))
        # new_group: with an eagerly initialised default group PyTorch splits it (ncclCommSplit).
        evens = [p for p in range(self.world) if p % 2 == 0]
        odds = [p for p in range(self.world) if p % 2 == 1]
        groups = {0: dist.new_group(evens), 1: dist.new_group(odds) if odds else None}
        mine = groups[self.rank % 2]
        members = evens if self.rank % 2 == 0 else odds
        x = torch.full((1000,), float(self.rank + 1), device=self.dev)
        dist.all_reduce(x, group=mine)
        self.check(same(x, torch.full((1000,), float(sum(p + 1 for p in members))), torch.float32), "new_group all_reduce")
        b = torch.full((10,), float(self.rank), device=self.dev)
        dist.broadcast(b, src=members[-1], group=mine)
        self.check(same(b, torch.full((10,), float(members[-1])), torch.float32), "new_group broadcast")

    def cuda_graph(self):
        x = torch.ones(4096, device=self.dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                dist.all_reduce(x)  # warm up outside capture
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dist.all_reduce(x)
        for k in range(3):
            x.fill_(float(self.rank + k))
            g.replay()
            torch.cuda.synchronize()
            want = float(sum(p + k for p in range(self.world)))
            self.check(same(x, torch.full((4096,), want), torch.float32), f"CUDA graph replay {k}")

    # ---- training ----------------------------------------------------------------------------
    def ddp(self, losses):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(self.dev)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[self.dev.index])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(100 + self.rank)
        for step in range(20):
            xb = torch.randn(16, 32, generator=gen).to(self.dev)
            yb = xb.sum(1, keepdim=True).sin()
            loss = torch.nn.functional.mse_loss(ddp(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            l = loss.detach().clone()
            dist.all_reduce(l, op=dist.ReduceOp.AVG)
            losses.append(l.item())
        # DDP keeps replicas identical: every rank's parameters must agree bit for bit.
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        ref = flat.clone()
        dist.broadcast(ref, src=0)
        self.check(torch.equal(flat, ref), "DDP replicas identical after training")

    def fsdp(self, losses):
        from torch.distributed.fsdp import fully_shard
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 1)).to(self.dev)
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(200 + self.rank)
        for step in range(8):
            xb = torch.randn(32, 64, generator=gen).to(self.dev)
            yb = xb.mean(1, keepdim=True).cos()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            l = loss.detach().clone()
            dist.all_reduce(l, op=dist.ReduceOp.AVG)
            losses.append(l.item())
        self.check(all(v == v and v < 1e3 for v in losses), "FSDP losses finite")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", choices=["eager", "lazy"], default="eager")
    ap.add_argument("--out", default=None, help="folder for losses-<tag>.json (rank 0)")
    ap.add_argument("--tag", default="run")
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # SUITE_RANKS_PER_HOST=P: ranks r and r' are on the same simulated host when r // P == r' // P,
    # through NCCL_HOSTID, which oxccl and NCCL both honour (cross-host transports on one machine).
    per_host = int(os.environ.get("SUITE_RANKS_PER_HOST", "0"))
    if per_host > 0:
        os.environ["NCCL_HOSTID"] = f"torch-suite-host-{rank // per_host}"
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(dev)
    if a.init == "eager":
        dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=300))
    else:
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=300))
    s = Suite(rank, world, dev)
    losses = {"ddp": [], "fsdp": []}
    for name in ("all_reduce", "all_gather", "reduce_scatter", "broadcast_reduce", "large_mixed", "all_to_all", "gather_scatter",
                 "point_to_point", "barriers_and_groups", "cuda_graph"):
        s.run(name, getattr(s, name))
    s.run("ddp", lambda: s.ddp(losses["ddp"]))
    s.run("fsdp", lambda: s.fsdp(losses["fsdp"]))
    torch.cuda.synchronize()
    total = torch.tensor([len(s.failures)], device=dev)
    dist.all_reduce(total)
    if rank == 0:
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, f"losses-{a.tag}.json"), "w") as f:
                json.dump(losses, f)
        print(f"suite [{a.tag}, {world} ranks, init {a.init}, "
              f"TORCH_NCCL_USE_COMM_NONBLOCKING={os.environ.get('TORCH_NCCL_USE_COMM_NONBLOCKING', '0')}"
              f"{f', {per_host} ranks per simulated host' if per_host > 0 else ''}]: "
              f"{'PASS' if total.item() == 0 else 'FAIL'} ({s.checks} checks on rank 0, {total.item()} failures on all ranks)",
              flush=True)
    dist.destroy_process_group()
    sys.exit(0 if total.item() == 0 else 1)


if __name__ == "__main__":
    main()

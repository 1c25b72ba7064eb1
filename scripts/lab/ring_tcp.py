#!/usr/bin/env python3
"""TCP alone in the ring of hosts' pattern, without GPUs or oxccl: one simulated host of
scripts/lab/netsim.sh (run one per namespace). Each call has PHASES phases; in each the host sends
BYTES to the next host, split over LANES connections, while it receives BYTES from the previous
one, and a phase ends when both are done (as a ring AllGather's phases do). Prints the median,
p90 and slowest call. With `netsim.sh tcpstats` around it, it tells whether TCP over the shaped
links retransmits by itself as lanes are added (fifty-fourth pass: on the build machine at
500 Mbit/s it hardly did).

  scripts/lab/netsim.sh up 4 500mbit
  for h in 0 1 2 3; do ip netns exec oxsim$h python3 scripts/lab/ring_tcp.py $h 4 LANES 1048576 3 60 18000 & done; wait
  scripts/lab/netsim.sh tcpstats 4; scripts/lab/netsim.sh down 4

Arguments: HOST HOSTS LANES BYTES PHASES CALLS PORT."""
import socket
import sys
import threading
import time

h, n, lanes, nbytes, phases, calls, port = map(int, sys.argv[1:8])
nxt = f"10.77.0.{(h + 1) % n + 1}"
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port))
srv.listen(64)
time.sleep(1.0)  # every host listening before anyone connects
outs = [socket.create_connection((nxt, port)) for _ in range(lanes)]
for s in outs:
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
ins = [srv.accept()[0] for _ in range(lanes)]
part = nbytes // lanes
out_buf = bytearray(part)
in_bufs = [bytearray(part) for _ in range(lanes)]


def recv(s, b):
    v, got = memoryview(b), 0
    while got < len(b):
        k = s.recv_into(v[got:])
        if k == 0:
            raise SystemExit("peer closed")
        got += k


times = []
for c in range(calls + 5):
    t = time.perf_counter()
    for _ in range(phases):
        th = [threading.Thread(target=recv, args=(s, in_bufs[i])) for i, s in enumerate(ins)]
        th += [threading.Thread(target=s.sendall, args=(out_buf,)) for s in outs]
        for x in th:
            x.start()
        for x in th:
            x.join()
    times.append((time.perf_counter() - t) * 1e3)
times = sorted(times[5:])  # the first five warm the connections up
print(f"host {h} lanes {lanes}: median {times[len(times) // 2]:.1f} ms, p90 {times[int(len(times) * 0.9)]:.1f}, slowest {times[-1]:.1f}")

// TCP loopback ping-pong (and, with a third argument 1, a simultaneous exchange): the latency floor
// of a small cross-host step on one machine. Build: gcc -O2 -o tcp_pingpong tcp_pingpong.c
// Run: ./tcp_pingpong [bytes] [spin 1/0] [exchange 0/1]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static void rd(int fd, char* b, int n, int spin) { int got = 0; while (got < n) { int r = recv(fd, b + got, n - got, spin ? MSG_DONTWAIT : 0); if (r > 0) got += r; } }
int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 56, spin = argc > 2 ? atoi(argv[2]) : 1, iters = 20000, ex = argc > 3 ? atoi(argv[3]) : 0;
  int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in a = {0}; a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(ls, (struct sockaddr*)&a, sizeof a); listen(ls, 1); socklen_t l = sizeof a; getsockname(ls, (struct sockaddr*)&a, &l);
  char buf[65536]; memset(buf, 1, sizeof buf);
  if (fork() == 0) {
    int c = socket(AF_INET, SOCK_STREAM, 0); connect(c, (struct sockaddr*)&a, sizeof a); setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, 4);
    for (int i = 0; i < iters; ++i) { if (ex) { send(c, buf, n, MSG_NOSIGNAL); rd(c, buf, n, spin); } else { rd(c, buf, n, spin); send(c, buf, n, MSG_NOSIGNAL); } }
    _exit(0);
  }
  int s = accept(ls, 0, 0); setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, 4);
  double t0 = 0;
  for (int i = 0; i < iters; ++i) { if (i == 1000) t0 = now(); send(s, buf, n, MSG_NOSIGNAL); rd(s, buf, n, spin); }
  double t = now() - t0; double sd0 = now(); for (int i = 0; i < 1000; ++i) send(s, buf, 0, MSG_NOSIGNAL); double sd = (now() - sd0) / 1000;
  if (ex) { printf("bytes %d exchange (both send, then receive): %.2f us a round\n", n, t / (iters - 1000)); return 0; }
  printf("bytes %d spin %d: round trip %.2f us, one way %.2f us (empty send() %.2f us)\n", n, spin, t / (iters - 1000), t / (iters - 1000) / 2, sd);
  return 0;
}

#!/usr/bin/env python3
"""Router overhead, side by side: `vllm-launch router` vs sglang-router and vllm-router (when
installed), all with `--policy round_robin` over the same two upstreams.

    python3 bench/router/router_bench.py [--upstream fake] [--rounds 3] [--requests 1000]
        [--conns 1,16,64] [--seconds 3] [--peer-venv /tmp/rvenv]

`--upstream fake` (default): two constant-time OpenAI-like upstreams and the load generator are
one small C program embedded below (`RB_C`, compiled with `cc -O2` into a temp directory on
first use): an epoll HTTP/1.1 keep-alive server answering GET /health, /v1/models (any other GET:
`{}`) and POST /v1/completions, /v1/chat/completions with a fixed small JSON body (a fixed
3-event SSE stream, chunked as real servers send it, when the body has `"stream": true`; JSON
bodies with Content-Length); and a client that
sends precomputed request bytes on raw keep-alive sockets and times each request from send to
the last byte (CLOCK_MONOTONIC). The routers are pinned with `taskset` to `--router-cpu` (1),
the upstreams and the client to `--aux-cpu` (0): "one router core".
  (a) sequential latency: one connection, `--warmup` then `--requests` requests, for direct
      (upstream 1) and every router, in `--rounds` rounds whose order alternates (forward,
      reversed, ...) so drift hits all alike; per-round p50/p99 and the median over rounds,
      added = router - direct of the same round.
  (b) throughput: for each N in `--conns`, N keep-alive connections from one epoll client
      sending back to back for `--seconds` (after `--load-warmup` s): requests/s, p50, p99.
      "direct" is the client + upstream ceiling on the aux core.

`--upstream model`: the earlier setup (two `vllm-launch` servers on the bundled model, 50 warm-up
then `--requests` sequential `/v1/completions` with `max_tokens` 1 over http.client, no pinning).

Router flags: ours `vllm-launch router --policy round_robin` (health checks every 5 s, timeout
5 s, 3 failures eject, `--max-retries 2`: its defaults); the peers get `--policy round_robin
--health-check-interval-secs 5 --health-check-timeout-secs 5 --health-failure-threshold 3
--retry-max-retries 3` (their count includes the first try) and a free `--prometheus-port`.
Peers are found as `<peer-venv>/bin/python -m sglang_router.launch_router` and
`<peer-venv>/bin/vllm-router`, installed with pip into a venv (never by CI):
    python3 -m venv /tmp/rvenv && /tmp/rvenv/bin/pip install sglang-router==0.3.2 \\
        vllm-router==0.1.17
"""
import argparse
import hashlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "release", "bin", "vllm-launch")
BODY = json.dumps({"model": "kjv-llama-tiny", "prompt": "In the beginning", "max_tokens": 1,
                   "temperature": 0})

RB_C = r"""
/* router_bench helper: a constant-time fake OpenAI upstream and a keep-alive load generator. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}
static void die(const char *m) { perror(m); exit(1); }

typedef struct { char *p; size_t len, cap; } buf_t;
static void buf_reserve(buf_t *b, size_t extra) {
  if (b->len + extra <= b->cap) return;
  size_t c = b->cap ? b->cap : 4096;
  while (c < b->len + extra) c *= 2;
  b->p = realloc(b->p, c);
  if (!b->p) die("realloc");
  b->cap = c;
}
static void buf_consume(buf_t *b, size_t n) {
  memmove(b->p, b->p + n, b->len - n);
  b->len -= n;
}
/* Reads what is there; returns 0 on EOF/error, 1 otherwise. */
static int buf_read(int fd, buf_t *b) {
  for (;;) {
    buf_reserve(b, 65536);
    ssize_t r = recv(fd, b->p + b->len, b->cap - b->len, 0);
    if (r > 0) { b->len += r; if ((size_t)r < b->cap - b->len + r) return 1; continue; }
    if (r == 0) return 0;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
    if (errno == EINTR) continue;
    return 0;
  }
}
static int send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) { p += w; n -= w; continue; }
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue; /* small replies: rare */
    return 0;
  }
  return 1;
}
static const char *find_hdr(const char *h, size_t hl, const char *name) {
  size_t nl = strlen(name);
  for (size_t i = 0; i + nl < hl; i++)
    if ((i == 0 || h[i - 1] == '\n') && strncasecmp(h + i, name, nl) == 0) return h + i + nl;
  return NULL;
}
/* One HTTP message (request or response) complete in b? Sets *total, *body_off. */
static int msg_complete(const char *p, size_t len, size_t *total, size_t *body_off) {
  const char *e = memmem(p, len, "\r\n\r\n", 4);
  if (!e) return 0;
  size_t hl = e - p + 4;
  *body_off = hl;
  const char *te = find_hdr(p, hl, "transfer-encoding:");
  if (te) {
    while (*te == ' ') te++;
    if (strncasecmp(te, "chunked", 7) == 0) {
      size_t off = hl;
      for (;;) {
        const char *le = memmem(p + off, len - off, "\r\n", 2);
        if (!le) return 0;
        size_t sz = strtoul(p + off, NULL, 16);
        off = le - p + 2;
        if (sz == 0) {
          /* no trailers expected */
          if (len - off < 2) return 0;
          *total = off + 2;
          return 1;
        }
        if (len - off < sz + 2) return 0;
        off += sz + 2;
      }
    }
  }
  const char *cl = find_hdr(p, hl, "content-length:");
  size_t n = cl ? strtoul(cl, NULL, 10) : 0;
  if (len < hl + n) return 0;
  *total = hl + n;
  return 1;
}

/* ---------------- fake upstream ---------------- */
static char *mkresp(const char *ctype, const char *body) {
  char *r;
  if (asprintf(&r, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n%s", ctype,
               strlen(body), body) < 0) die("asprintf");
  return r;
}
/* An SSE stream as real servers send it: chunked, one chunk per event (all in one write). */
static char *mksse(const char *events) {
  size_t cap = strlen(events) * 2 + 256, n = 0;
  char *r = malloc(cap);
  n += sprintf(r, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n");
  for (const char *e = events; *e;) {
    const char *end = strstr(e, "\n\n") + 2;
    n += sprintf(r + n, "%zx\r\n%.*s\r\n", (size_t)(end - e), (int)(end - e), e);
    e = end;
  }
  sprintf(r + n, "0\r\n\r\n");
  return r;
}
static int run_server(int port) {
  const char *cmpl =
      "{\"id\":\"cmpl-fake\",\"object\":\"text_completion\",\"created\":0,\"model\":\"fake\","
      "\"choices\":[{\"index\":0,\"text\":\" the\",\"logprobs\":null,\"finish_reason\":\"length\"}],"
      "\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1,\"total_tokens\":5}}";
  const char *chat =
      "{\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion\",\"created\":0,\"model\":\"fake\","
      "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\" the\"},"
      "\"finish_reason\":\"length\"}],"
      "\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1,\"total_tokens\":5}}";
  const char *sse_c =
      "data: {\"id\":\"cmpl-fake\",\"object\":\"text_completion\",\"created\":0,\"model\":\"fake\","
      "\"choices\":[{\"index\":0,\"text\":\" the\",\"logprobs\":null,\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"cmpl-fake\",\"object\":\"text_completion\",\"created\":0,\"model\":\"fake\","
      "\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n"
      "data: [DONE]\n\n";
  const char *sse_chat =
      "data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"created\":0,"
      "\"model\":\"fake\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
      "\"content\":\" the\"},\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"created\":0,"
      "\"model\":\"fake\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
      "data: [DONE]\n\n";
  const char *models =
      "{\"object\":\"list\",\"data\":[{\"id\":\"fake\",\"object\":\"model\",\"created\":0,"
      "\"owned_by\":\"router_bench\",\"max_model_len\":2048}]}";
  char *r_cmpl = mkresp("application/json", cmpl), *r_chat = mkresp("application/json", chat);
  char *r_sse_c = mksse(sse_c), *r_sse_chat = mksse(sse_chat);
  char *r_models = mkresp("application/json", models), *r_empty = mkresp("application/json", "{}");
  const char *r_404 = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";

  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(lfd, (void *)&a, sizeof a) < 0) die("bind");
  if (listen(lfd, 4096) < 0) die("listen");
  socklen_t al = sizeof a;
  getsockname(lfd, (void *)&a, &al);
  printf("port %d\n", ntohs(a.sin_port));
  fflush(stdout);
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  struct epoll_event evs[256];
  typedef struct { int fd; buf_t b; } conn_t;
  for (;;) {
    int n = epoll_wait(ep, evs, 256, -1);
    for (int i = 0; i < n; i++) {
      conn_t *c = evs[i].data.ptr;
      if (!c) {
        int fd;
        while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          conn_t *nc = calloc(1, sizeof *nc);
          nc->fd = fd;
          struct epoll_event e2 = {.events = EPOLLIN, .data.ptr = nc};
          epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e2);
        }
        continue;
      }
      int alive = buf_read(c->fd, &c->b);
      size_t total, bo;
      while (alive && msg_complete(c->b.p, c->b.len, &total, &bo)) {
        const char *p = c->b.p;
        const char *r;
        const char *sp = memchr(p, ' ', total);
        const char *path = sp ? sp + 1 : p;
        int is_post = strncmp(p, "POST ", 5) == 0;
        if (is_post && (strncmp(path, "/v1/completions", 15) == 0 ||
                        strncmp(path, "/v1/chat/completions", 20) == 0)) {
          int is_chat = path[4] == 'c' && path[5] == 'h';
          int stream = 0;
          const char *s = memmem(p + bo, total - bo, "\"stream\"", 8);
          if (s) {
            s += 8;
            while (s < p + total && (*s == ' ' || *s == ':')) s++;
            stream = (p + total - s >= 4 && strncmp(s, "true", 4) == 0);
          }
          r = stream ? (is_chat ? r_sse_chat : r_sse_c) : (is_chat ? r_chat : r_cmpl);
        } else if (!is_post && strncmp(path, "/v1/models", 10) == 0) {
          r = r_models;
        } else if (!is_post) {
          r = r_empty; /* /health, /get_server_info, ... */
        } else {
          r = r_404;
        }
        if (!send_all(c->fd, r, strlen(r))) { alive = 0; break; }
        buf_consume(&c->b, total);
      }
      if (!alive) {
        close(c->fd);
        free(c->b.p);
        free(c);
      }
    }
  }
  return 0;
}

/* ---------------- client ---------------- */
static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}
static int dial(int port, int nonblock) {
  int fd = socket(AF_INET, SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0), 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (void *)&a, sizeof a) < 0 && errno != EINPROGRESS) die("connect");
  return fd;
}
static char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) die(path);
  fseek(f, 0, SEEK_END);
  *n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc(*n);
  if (fread(p, 1, *n, f) != *n) die("fread");
  fclose(f);
  return p;
}
static void report(int64_t *lat, size_t n, double elapsed_s, long errors, long conns) {
  qsort(lat, n, sizeof *lat, cmp64);
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += lat[i];
  size_t i99 = (size_t)(n * 0.99);
  if (i99 >= n) i99 = n - 1;
  size_t i999 = (size_t)(n * 0.999);
  if (i999 >= n) i999 = n - 1;
  printf("{\"n\": %zu, \"conns\": %ld, \"errors\": %ld, \"elapsed_s\": %.4f, \"rps\": %.1f, "
         "\"min_us\": %.2f, \"p50_us\": %.2f, \"p99_us\": %.2f, \"p999_us\": %.2f, "
         "\"mean_us\": %.2f}\n",
         n, conns, errors, elapsed_s, n ? n / elapsed_s : 0.0, n ? lat[0] / 1e3 : 0,
         n ? lat[n / 2] / 1e3 : 0, n ? lat[i99] / 1e3 : 0, n ? lat[i999] / 1e3 : 0,
         n ? sum / n / 1e3 : 0);
}
static int status_of(const char *p) { return atoi(p + 9); }

/* seq PORT N WARM REQFILE: one blocking keep-alive connection, N sequential requests. */
static int run_seq(int port, long n, long warm, const char *reqfile) {
  size_t rl;
  char *req = read_file(reqfile, &rl);
  int fd = dial(port, 0);
  buf_t b = {0};
  int64_t *lat = malloc(sizeof(int64_t) * (n > 0 ? n : 1));
  long errors = 0;
  int64_t start = 0;
  for (long i = 0; i < warm + n; i++) {
    if (i == warm) start = now_ns();
    int64_t t0 = now_ns();
    if (!send_all(fd, req, rl)) die("send");
    size_t total, bo;
    while (!msg_complete(b.p, b.len, &total, &bo)) {
      buf_reserve(&b, 65536);
      ssize_t r = recv(fd, b.p + b.len, b.cap - b.len, 0);
      if (r <= 0) die("recv");
      b.len += r;
    }
    int64_t t1 = now_ns();
    if (status_of(b.p) != 200) errors++;
    buf_consume(&b, total);
    if (i >= warm) lat[i - warm] = t1 - t0;
  }
  report(lat, n, (now_ns() - start) / 1e9, errors, 1);
  return 0;
}

/* load PORT CONNS SECONDS WARM_SECONDS REQFILE: CONNS keep-alive connections, back to back. */
static int run_load(int port, int conns, double secs, double warm_s, const char *reqfile) {
  size_t rl;
  char *req = read_file(reqfile, &rl);
  typedef struct { int fd; buf_t b; int64_t t0; int busy; } cl_t;
  cl_t *cs = calloc(conns, sizeof *cs);
  int ep = epoll_create1(0);
  for (int i = 0; i < conns; i++) {
    cs[i].fd = dial(port, 0); /* blocking socket: reads use MSG_DONTWAIT, small sends finish */
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &cs[i]};
    epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &e);
  }
  size_t cap = 1 << 20, n = 0;
  int64_t *lat = malloc(cap * sizeof *lat);
  long errors = 0;
  int64_t t_start = now_ns();
  int64_t t_meas = t_start + (int64_t)(warm_s * 1e9), t_end = t_meas + (int64_t)(secs * 1e9);
  for (int i = 0; i < conns; i++) {
    cs[i].t0 = now_ns();
    cs[i].busy = 1;
    if (!send_all(cs[i].fd, req, rl)) die("send");
  }
  int busy = conns;
  struct epoll_event evs[256];
  while (busy > 0) {
    int k = epoll_wait(ep, evs, 256, 1000);
    if (k == 0 && now_ns() > t_end + 5000000000LL) break;
    for (int i = 0; i < k; i++) {
      cl_t *c = evs[i].data.ptr;
      buf_reserve(&c->b, 65536);
      ssize_t r = recv(c->fd, c->b.p + c->b.len, c->b.cap - c->b.len, MSG_DONTWAIT);
      if (r == 0) die("closed by server");
      if (r < 0) { if (errno == EAGAIN || errno == EINTR) continue; die("recv"); }
      c->b.len += r;
      size_t total, bo;
      if (!msg_complete(c->b.p, c->b.len, &total, &bo)) continue;
      int64_t t1 = now_ns();
      if (status_of(c->b.p) != 200) errors++;
      buf_consume(&c->b, total);
      if (c->t0 >= t_meas && t1 <= t_end) {
        if (n == cap) { cap *= 2; lat = realloc(lat, cap * sizeof *lat); }
        lat[n++] = t1 - c->t0;
      }
      if (t1 < t_end) {
        c->t0 = now_ns();
        if (!send_all(c->fd, req, rl)) die("send");
      } else {
        c->busy = 0;
        busy--;
      }
    }
  }
  report(lat, n, secs, errors, conns);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "server") == 0) return run_server(atoi(argv[2]));
  if (argc >= 6 && strcmp(argv[1], "seq") == 0)
    return run_seq(atoi(argv[2]), atol(argv[3]), atol(argv[4]), argv[5]);
  if (argc >= 7 && strcmp(argv[1], "load") == 0)
    return run_load(atoi(argv[2]), atoi(argv[3]), atof(argv[4]), atof(argv[5]), argv[6]);
  fprintf(stderr, "usage: rb server PORT | seq PORT N WARM REQFILE | "
                  "load PORT CONNS SECONDS WARM_SECONDS REQFILE\n");
  return 2;
}
"""


def build_rb():
    digest = hashlib.sha1(RB_C.encode()).hexdigest()[:12]
    d = os.path.join(tempfile.gettempdir(), f"router_bench_{digest}")
    exe = os.path.join(d, "rb")
    if not os.path.exists(exe):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "rb.c"), "w") as f:
            f.write(RB_C)
        subprocess.run(["cc", "-O2", "-o", exe + ".tmp", os.path.join(d, "rb.c")], check=True)
        os.replace(exe + ".tmp", exe)
    return exe


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port, path, deadline_s=60.0):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.1)  # polling a condition with a deadline
    return False


def start_server():
    p = subprocess.Popen([BIN, "--port", "0", "--kv-cache-memory", "64MiB"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()  # "vllm-launch: ready at http://127.0.0.1:PORT/v1"
    port = int(line.rsplit(":", 1)[1].split("/")[0])
    return p, port


def measure(port, n):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"}
    times = []
    for i in range(50 + n):
        t0 = time.perf_counter()
        c.request("POST", "/v1/completions", BODY, headers)
        r = c.getresponse()
        r.read()
        t1 = time.perf_counter()
        if r.status != 200:
            raise RuntimeError(f"status {r.status}")
        if i >= 50:
            times.append((t1 - t0) * 1e3)
    c.close()
    times.sort()
    return {
        "p50": times[len(times) // 2],
        "p99": times[min(len(times) - 1, int(len(times) * 0.99))],
        "mean": statistics.fmean(times),
        "rps": 1e3 / statistics.fmean(times),
    }



def pin(cpu):
    return ["taskset", "-c", str(cpu)] if cpu is not None and cpu >= 0 else []


def start_fake_upstream(rb, cpu):
    p = subprocess.Popen(pin(cpu) + [rb, "server", "0"], stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline().split()[1])  # "port N"
    return p, port


def router_cmds(peer_venv):
    """[(name, argv prefix, extra flags taking a free prometheus port or None)]"""
    out = [("vllm-launch router", [BIN, "router"], lambda prom: [])]
    common = ["--health-check-interval-secs", "5", "--health-check-timeout-secs", "5",
              "--health-failure-threshold", "3", "--retry-max-retries", "3"]
    py = os.path.join(peer_venv, "bin", "python")
    if os.path.exists(py):
        out.append(("sglang-router 0.3.2", [py, "-m", "sglang_router.launch_router"],
                    lambda prom: common + ["--prometheus-port", str(prom)]))
    vr = os.path.join(peer_venv, "bin", "vllm-router")
    if os.path.exists(vr):
        out.append(("vllm-router 0.1.17", [vr],
                    lambda prom: common + ["--prometheus-port", str(prom)]))
    return out


def start_router(argv, extra, urls, cpu):
    port = free_port()
    p = subprocess.Popen(pin(cpu) + argv + ["--worker-urls", *urls, "--host", "127.0.0.1",
                                            "--port", str(port), "--policy", "round_robin"]
                         + extra(free_port()),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p, port


def request_bytes(path, stream, prompt_bytes):
    prompt = "In the beginning"
    if prompt_bytes > len(prompt):
        prompt = (prompt + " God created the heaven and the earth." * (prompt_bytes // 38 + 1))
        prompt = prompt[:prompt_bytes]
    if path == "/v1/chat/completions":
        body = {"model": "fake", "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 1, "temperature": 0}
    else:
        body = {"model": "fake", "prompt": prompt, "max_tokens": 1, "temperature": 0}
    if stream:
        body["stream"] = True
    b = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(b)}\r\n\r\n").encode() + b


def rb_run(rb, cpu, args):
    out = subprocess.run(pin(cpu) + [rb, *map(str, args)], check=True, capture_output=True,
                         text=True, timeout=600).stdout
    r = json.loads(out)
    if r["errors"]:
        raise RuntimeError(f"{r['errors']} non-200 responses: {args}")
    return r


def run_fake(args):
    rb = build_rb()
    reqfile = os.path.join(os.path.dirname(rb), f"req_{os.getpid()}.bin")
    with open(reqfile, "wb") as f:
        f.write(request_bytes(args.path, args.stream, args.prompt_bytes))
    ups = [start_fake_upstream(rb, args.aux_cpu) for _ in range(2)]
    urls = [f"http://127.0.0.1:{port}" for _, port in ups]
    routers = []
    try:
        systems = [("direct (upstream 1)", ups[0][1])]
        for name, argv, extra in router_cmds(args.peer_venv):
            if args.only and not any(s in name for s in args.only.split(",")):
                continue
            p, port = start_router(argv, extra, urls, args.router_cpu)
            routers.append(p)
            if not wait_http(port, "/health"):
                print(f"{name}: not ready", file=sys.stderr)
                continue
            systems.append((name, port))
        seq = {name: [] for name, _ in systems}
        if args.rounds > 0:
            for r in range(args.rounds):
                order = systems if r % 2 == 0 else systems[::-1]
                for name, port in order:
                    seq[name].append(rb_run(rb, args.aux_cpu, ["seq", port, args.requests,
                                                               args.warmup, reqfile]))
        load = {}
        for i, conns in enumerate(args.conns):
            order = systems if i % 2 == 0 else systems[::-1]
            for name, port in order:
                load[(name, conns)] = rb_run(rb, args.aux_cpu, ["load", port, conns, args.seconds,
                                                                args.load_warmup, reqfile])
    finally:
        for p in routers + [p for p, _ in ups]:
            p.terminate()
        for p in routers + [p for p, _ in ups]:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        os.unlink(reqfile)
    names = [n for n, _ in systems]
    what = (f"`{args.path}`{' stream' if args.stream else ''}, request "
            f"{len(request_bytes(args.path, args.stream, args.prompt_bytes))} bytes; routers on "
            f"cpu {args.router_cpu}, upstreams + client on cpu {args.aux_cpu}")
    if args.rounds > 0:
        d = seq[names[0]]
        print(f"Sequential: {args.rounds} rounds x {args.requests} requests (+{args.warmup} "
              f"warm-up) on one keep-alive connection, {what}. µs.")
        print("| path | p50 per round | p99 per round | p50 | p99 | mean | added p50 | "
              "added p99 |")
        print("|---|---|---|---:|---:|---:|---:|---:|")
        for n in names:
            rs = seq[n]
            med = lambda k: statistics.median(x[k] for x in rs)
            add = lambda k: statistics.median(x[k] - y[k] for x, y in zip(rs, d))
            p50s = " / ".join(f"{x['p50_us']:.1f}" for x in rs)
            p99s = " / ".join(f"{x['p99_us']:.1f}" for x in rs)
            row = (f"| {n} | {p50s} | {p99s} | {med('p50_us'):.1f} | "
                   f"{med('p99_us'):.1f} | {med('mean_us'):.1f} | ")
            row += ("— | — |" if n == names[0] else
                    f"{add('p50_us'):+.1f} | {add('p99_us'):+.1f} |")
            print(row)
        print()
    if args.conns:
        print(f"Throughput: N keep-alive connections back to back for {args.seconds} s "
              f"(after {args.load_warmup} s), one epoll client; {what}.")
        print("| path | " + " | ".join(f"N={c} req/s | N={c} p50 µs | N={c} p99 µs"
                                        for c in args.conns) + " |")
        print("|---|" + "---:|" * (3 * len(args.conns)))
        for n in names:
            print(f"| {n} | " + " | ".join(
                f"{load[(n, c)]['rps']:.0f} | {load[(n, c)]['p50_us']:.0f} | "
                f"{load[(n, c)]['p99_us']:.0f}" for c in args.conns) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seq": seq, "load": {f"{n}|{c}": v for (n, c), v in load.items()},
                       "args": vars(args)}, f, indent=1)


def run_model(args):
    servers = [start_server() for _ in range(2)]
    urls = [f"http://127.0.0.1:{port}" for _, port in servers]
    routers = [("vllm-launch router", [BIN, "router"])]
    py = os.path.join(args.peer_venv, "bin", "python")
    if os.path.exists(py):
        routers.append(("sglang-router 0.3.2", [py, "-m", "sglang_router.launch_router"]))
    vr = os.path.join(args.peer_venv, "bin", "vllm-router")
    if os.path.exists(vr):
        routers.append(("vllm-router 0.1.17", [vr]))
    rows = []
    try:
        rows.append(("direct (worker 1)", measure(servers[0][1], args.requests)))
        for name, cmd in routers:
            port = free_port()
            p = subprocess.Popen(cmd + ["--worker-urls", *urls, "--host", "127.0.0.1", "--port",
                                        str(port), "--policy", "round_robin"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                if not wait_http(port, "/health"):
                    print(f"{name}: not ready", file=sys.stderr)
                    continue
                rows.append((name, measure(port, args.requests)))
            finally:
                p.terminate()
                p.wait(timeout=10)
        again = measure(servers[0][1], args.requests)
        rows.append(("direct again", again))
    finally:
        for p, _ in servers:
            p.terminate()
            p.wait(timeout=10)
    direct = rows[0][1]
    print(f"{args.requests} sequential keep-alive /v1/completions (max_tokens 1), 2 workers, "
          "round_robin")
    print("| path | p50 ms | p99 ms | mean ms | added p50 ms | added p99 ms | requests/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, m in rows:
        print(f"| {name} | {m['p50']:.3f} | {m['p99']:.3f} | {m['mean']:.3f} | "
              f"{m['p50'] - direct['p50']:+.3f} | {m['p99'] - direct['p99']:+.3f} | "
              f"{m['rps']:.0f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", choices=["fake", "model"], default="fake")
    ap.add_argument("--requests", type=int, default=None,
                    help="sequential requests per system and round (fake: 1000, model: 300)")
    ap.add_argument("--rounds", type=int, default=3, help="fake: sequential rounds (0: none)")
    ap.add_argument("--warmup", type=int, default=200, help="fake: warm-up requests per run")
    ap.add_argument("--conns", default="1,16,64",
                    help="fake: connection counts for the throughput runs ('' for none)")
    ap.add_argument("--seconds", type=float, default=3.0, help="fake: seconds per load run")
    ap.add_argument("--load-warmup", type=float, default=0.5)
    ap.add_argument("--router-cpu", type=int, default=1, help="-1: no pinning")
    ap.add_argument("--aux-cpu", type=int, default=0,
                    help="cpu of the upstreams and the client (-1: no pinning)")
    ap.add_argument("--path", default="/v1/completions",
                    choices=["/v1/completions", "/v1/chat/completions"])
    ap.add_argument("--stream", action="store_true", help='"stream": true in the body')
    ap.add_argument("--prompt-bytes", type=int, default=0, help="pad the prompt to this size")
    ap.add_argument("--only", default="", help="comma list: run only routers whose name has one")
    ap.add_argument("--json", default="", help="fake: write the raw figures here")
    ap.add_argument("--peer-venv", default="/tmp/rvenv")
    args = ap.parse_args()
    args.conns = [int(c) for c in args.conns.split(",") if c]
    if args.requests is None:
        args.requests = 1000 if args.upstream == "fake" else 300
    if args.upstream == "fake":
        run_fake(args)
    else:
        run_model(args)


if __name__ == "__main__":
    main()

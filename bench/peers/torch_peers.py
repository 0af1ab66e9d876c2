#!/usr/bin/env python3
"""Time PyTorch's usual ways of sampling a token from LLM logits, as peers for gumbel.

Each peer is one sampling step on a [batch, vocab] logits matrix at temperature 0.8:

  torch.argmax                 greedy, the floor any sampler is measured against
  torch.multinomial            softmax(x / T) then torch.multinomial(p, 1)
  torch.exponential-race       argmax(softmax(x / T) / Exp(1)), what vLLM does
  torch.gumbel-eager           argmax(x / T - log(-log(U))), eager PyTorch
  torch.gumbel-compile         the same expression through torch.compile
  torch.sort-topk50-topp0.9    sort descending, top-k 50, cumulative softmax top-p 0.9,
                               multinomial: the common filtered-sampling implementation
  torch.bitmask-exponential-race
                               structured output: unpack each row's int32 token bitmask
                               (ceil(V/32) words, bit j%32 of word j/32 allows token j;
                               random bits, about half the tokens allowed, fixed seed) to a
                               bool [batch, vocab] tensor, masked_fill(-inf) the banned
                               logits, then the exponential race; gumbel's counterpart is
                               its gumbel+bitmask route (the mask inside the sampling pass)

The output JSON has gumbel's bench schema (bench.Measurement):
  device_us        median over groups of (CUDA events around back-to-back replays of a
                   CUDA graph holding STEPS_PER_GRAPH steps) / steps. When a peer cannot
                   be captured ("graph": false) it is the same figure for eager calls.
  graph_us         the CUDA-graph figure again (0 when the peer could not be captured),
                   to set against gumbel's own graph-replay time (bench.Measurement.GraphUs).
  host_us          median wall time of one eager call followed by
                   torch.cuda.synchronize() (no .item(): the token stays on the device).
  allocs_per_call  always 0: Go heap allocations have no PyTorch counterpart; not measured.
  token            the first row's token of the last step.
Extra fields, ignored by gumbel's loader: graph, eager_device_us, error.

Run on a CUDA host:  python3 bench/peers/torch_peers.py --out peers.json
(--peers torch.exponential-race,torch.bitmask-exponential-race times those two alone).
Only torch and the standard library are used.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

TEMPERATURE = 0.8
TOP_K = 50
TOP_P = 0.9
# Seeds the token bitmasks of torch.bitmask-exponential-race.
MASK_SEED = 0x6D61736B
# Steps captured in one CUDA graph, so that a replay's launch cost on the host does not
# hide the device time of small steps (gumbel's bench also times back-to-back launches).
STEPS_PER_GRAPH = 10

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def llm_logits(rows, vocab, seed, dtype):
    """LLM-shaped logits like bench.LLMLogits: normal body (sd 2.5) plus 8 strong tokens
    of 12..18 per row, never zeros (an exact zero would flatter no one, but stay faithful)."""
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    x = torch.randn(rows, vocab, generator=g, device="cuda") * 2.5
    idx = torch.randint(0, vocab, (rows, 8), generator=g, device="cuda")
    strong = 12.0 + 6.0 * torch.rand(rows, 8, generator=g, device="cuda")
    x.scatter_(1, idx, strong)
    x = torch.where(x == 0, torch.full_like(x, 1e-3), x)
    return x.to(dtype).contiguous()


def peer_argmax(x):
    return torch.argmax(x, -1)


def peer_multinomial(x):
    return torch.multinomial(torch.softmax(x / TEMPERATURE, -1), 1)


def peer_exponential_race(x):
    p = torch.softmax(x / TEMPERATURE, -1)
    return (p / torch.empty_like(p).exponential_()).argmax(-1)


def peer_gumbel(x):
    return (x / TEMPERATURE - torch.log(-torch.log(torch.rand_like(x)))).argmax(-1)


def make_sort_topk_topp(batch, vocab):
    """The usual sort-based filter. Probabilities and their cumulative sum are computed
    in float32 (as vLLM and HF do after upcasting): a bfloat16 cumsum over 150k tokens
    would be meaningless."""
    # The rank mask is made once per shape: a serving engine would keep it too.
    beyond_k = (torch.arange(vocab, device="cuda") >= TOP_K).expand(batch, vocab)

    def step(x):
        sl, si = torch.sort(x / TEMPERATURE, dim=-1, descending=True)
        sl = sl.masked_fill(beyond_k, -math.inf)
        probs = torch.softmax(sl, -1, dtype=torch.float32)
        cum = probs.cumsum(-1)
        # Keep the smallest prefix whose mass reaches TOP_P; the first token always stays.
        sl = sl.masked_fill((cum - probs) > TOP_P, -math.inf)
        probs = torch.softmax(sl, -1, dtype=torch.float32)
        choice = torch.multinomial(probs, 1)
        return si.gather(-1, choice)

    return step


def grammar_mask(rows, vocab, seed):
    """Token bitmasks like bench.GrammarMask (not the same bits): rows of ceil(vocab/32)
    int32 words of random bits, about half the tokens allowed, the bits beyond the
    vocabulary clear, on the device."""
    words = (vocab + 31) // 32
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    m = torch.randint(0, 1 << 32, (rows, words), generator=g, device="cuda", dtype=torch.int64)
    if vocab % 32:
        m[:, -1] &= (1 << (vocab % 32)) - 1
    # A row with no allowed token would leave nothing to sample; allow token 0 there.
    m[:, 0] |= (m.sum(-1) == 0).to(torch.int64)
    # The words' bits as int32, two's complement, as grammar libraries hand them over.
    return torch.where(m >= 1 << 31, m - (1 << 32), m).to(torch.int32).contiguous()


def make_bitmask_exponential_race(batch, vocab):
    """Structured output as engines do it around PyTorch: the step unpacks the row's
    int32 bitmask to a bool [batch, vocab] mask, writes -inf into the banned logits
    (out of place: the logits are the same input every step), then runs the exponential
    race. The packed masks live on the device, made once per shape, as a grammar
    matcher's output would be; unpacking is part of every step."""
    mask = grammar_mask(batch, vocab, MASK_SEED + vocab)
    words = mask.shape[1]
    shifts = torch.arange(32, device="cuda", dtype=torch.int32)

    def step(x):
        bits = (mask.unsqueeze(-1) >> shifts) & 1  # [batch, words, 32], bit k of word w is token 32w + k
        allowed = bits.view(batch, words * 32)[:, :vocab].bool()
        return peer_exponential_race(x.masked_fill(~allowed, -math.inf))

    def allows(token):
        """Whether row 0's mask allows token, to check the step's output."""
        return bool((int(mask[0, token // 32].item()) >> (token % 32)) & 1)

    step.allows = allows
    return step


def set_dynamo_limits():
    """One compiled function sees every shape; raise Dynamo's recompile limit so that it
    does not silently fall back to eager after 8 shapes."""
    try:
        import torch._dynamo  # noqa: F401  (part of torch)

        cfg = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(cfg, name):
                setattr(cfg, name, 256)
        for name in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(cfg, name):
                setattr(cfg, name, 1024)
    except Exception as e:  # a missing knob must not stop the other peers
        print(f"warning: could not raise dynamo limits: {e}", file=sys.stderr)


def events_time_us(run, repeats, groups, steps_per_run):
    """Median over groups of CUDA-event time around `repeats` calls of run, per step."""
    times = []
    for _ in range(groups):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / (repeats * steps_per_run))
    return statistics.median(times)


def host_time_us(fn, x, calls):
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(x)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def measure(fn, x, cfg):
    """Times one peer on one logits matrix; returns a dict of the measurement fields."""
    res = {"graph": False, "graph_us": 0.0, "error": None}
    # Eager first: it also compiles a torch.compile peer, and warms the allocator.
    out = None
    for _ in range(cfg.warmup):
        out = fn(x)
    torch.cuda.synchronize()
    res["eager_device_us"] = events_time_us(lambda: fn(x), cfg.eager_repeats, cfg.groups, 1)
    res["host_us"] = host_time_us(fn, x, cfg.host_calls)

    graph = None
    try:
        # PyTorch requires warm-up on a side stream before capture.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                out = fn(x)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(STEPS_PER_GRAPH):
                out = fn(x)
        graph.replay()
        torch.cuda.synchronize()
        res["device_us"] = events_time_us(graph.replay, cfg.replays, cfg.groups, STEPS_PER_GRAPH)
        res["graph_us"] = res["device_us"]
        res["graph"] = True
    except Exception as e:
        res["error"] = f"graph capture failed, eager timing used: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        res["device_us"] = res["eager_device_us"]
        torch.cuda.synchronize()
        out = fn(x)
        torch.cuda.synchronize()
    res["token"] = int(out.reshape(-1)[0].item())
    del graph
    return res


def parse_list(s, conv):
    return [conv(f.strip()) for f in s.split(",") if f.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="", help="write the measurements as JSON to this file")
    ap.add_argument("--vocab", default="32768,65536,151936", help="vocabulary sizes, comma-separated")
    ap.add_argument("--batch", default="1,4,8,64", help="batch sizes, comma-separated")
    ap.add_argument("--dtype", default="float32,bfloat16", help="logits types: float32, bfloat16, float16")
    ap.add_argument("--quick", action="store_true", help="few repeats: a smoke run, not a measurement")
    ap.add_argument("--peers", default="all",
                    help="peers to time ('all', or comma-separated names such as "
                         "torch.exponential-race,torch.bitmask-exponential-race)")
    ap.add_argument("--compile-vocab", default="all",
                    help="vocabulary sizes to run torch.compile at ('all', or comma-separated)")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode, e.g. default or max-autotune-no-cudagraphs")
    ap.add_argument("--compile-budget", type=float, default=100.0,
                    help="seconds of total compile time; later shapes skip torch.compile")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        print("error: CUDA is not available to torch", file=sys.stderr)
        return 2
    try:
        vocabs = parse_list(args.vocab, int)
        batches = parse_list(args.batch, int)
        dtypes = parse_list(args.dtype, str)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not vocabs or not batches or not dtypes or min(vocabs + batches) < 1:
        print(f"error: bad --vocab/--batch/--dtype (unknown dtypes: {bad})", file=sys.stderr)
        return 2
    compile_vocabs = None if args.compile_vocab == "all" else set(parse_list(args.compile_vocab, int))
    all_peers = ["torch.argmax", "torch.multinomial", "torch.exponential-race", "torch.gumbel-eager",
                 "torch.gumbel-compile", "torch.sort-topk50-topp0.9", "torch.bitmask-exponential-race"]
    wanted = set(all_peers) if args.peers == "all" else set(parse_list(args.peers, str))
    if not wanted or wanted - set(all_peers):
        print(f"error: --peers: unknown {sorted(wanted - set(all_peers))}; the peers are {','.join(all_peers)}",
              file=sys.stderr)
        return 2

    cfg = argparse.Namespace(groups=15, replays=10, eager_repeats=50, host_calls=100, warmup=5)
    if args.quick:
        cfg = argparse.Namespace(groups=3, replays=2, eager_repeats=5, host_calls=10, warmup=2)

    set_dynamo_limits()
    gumbel_compiled = torch.compile(peer_gumbel, mode=args.compile_mode, dynamic=False)
    compile_spent = 0.0
    notes = []
    ms = []
    t_start = time.perf_counter()
    # Largest vocabulary first (for every dtype), so that a spent compile budget costs
    # the small shapes.
    for vocab in sorted(vocabs, reverse=True):
        for dname in dtypes:
            for batch in batches:
                x = llm_logits(batch, vocab, vocab * 1000 + batch, DTYPES[dname])
                peers = [
                    ("torch.argmax", lambda: peer_argmax),
                    ("torch.multinomial", lambda: peer_multinomial),
                    ("torch.exponential-race", lambda: peer_exponential_race),
                    ("torch.gumbel-eager", lambda: peer_gumbel),
                    ("torch.gumbel-compile", lambda: gumbel_compiled),
                    ("torch.sort-topk50-topp0.9", lambda: make_sort_topk_topp(batch, vocab)),
                    ("torch.bitmask-exponential-race", lambda: make_bitmask_exponential_race(batch, vocab)),
                ]
                for route, make in peers:
                    if route not in wanted:
                        continue
                    fn = make()
                    m = {"route": route, "dtype": dname, "vocab": vocab, "batch": batch,
                         "device_us": 0.0, "host_us": 0.0, "allocs_per_call": 0, "token": -1}
                    if route == "torch.gumbel-compile":
                        if compile_vocabs is not None and vocab not in compile_vocabs:
                            continue
                        if compile_spent > args.compile_budget:
                            note = f"{route} {dname} V={vocab} B={batch}: skipped, compile budget spent"
                            notes.append(note)
                            print("note: " + note, file=sys.stderr)
                            continue
                        t0 = time.perf_counter()
                        try:
                            gumbel_compiled(x)
                            torch.cuda.synchronize()
                        except Exception as e:
                            compile_spent += time.perf_counter() - t0
                            note = f"{route} {dname} V={vocab} B={batch}: compile failed: {type(e).__name__}: {e}"
                            notes.append(note.splitlines()[0])
                            print("note: " + notes[-1], file=sys.stderr)
                            continue
                        compile_spent += time.perf_counter() - t0
                    try:
                        m.update(measure(fn, x, cfg))
                    except Exception as e:
                        note = f"{route} {dname} V={vocab} B={batch}: failed: {type(e).__name__}: {e}"
                        notes.append(note.splitlines()[0])
                        print("note: " + notes[-1], file=sys.stderr)
                        torch.cuda.synchronize()
                        continue
                    if m.get("error"):
                        notes.append(f"{route} {dname} V={vocab} B={batch}: {m['error']}")
                    if hasattr(fn, "allows") and not fn.allows(m["token"]):
                        notes.append(f"{route} {dname} V={vocab} B={batch}: token {m['token']} is banned by its mask")
                        print("note: " + notes[-1], file=sys.stderr)
                    ms.append(m)
                    print(f"{route:28s} {dname:9s} V={vocab:6d} B={batch:3d}  device {m['device_us']:9.2f} us"
                          f"{'' if m['graph'] else ' (eager)'}  host {m['host_us']:9.1f} us", file=sys.stderr)
                del x
                torch.cuda.empty_cache()
    elapsed = time.perf_counter() - t_start

    # The table: device µs per peer, rows dtype x vocab x batch.
    routes = []
    for m in ms:
        if m["route"] not in routes:
            routes.append(m["route"])
    cells = {}
    for m in ms:
        cells.setdefault((m["dtype"], m["vocab"], m["batch"]), {})[m["route"]] = m
    print("Device time per step (us, median; * = eager, graph capture failed)")
    print("| dtype | vocab | batch | " + " | ".join(routes) + " |")
    print("|---|---:|---:|" + "---:|" * len(routes))
    for k in sorted(cells, key=lambda k: (dtypes.index(k[0]), k[1], k[2])):
        row = []
        for r in routes:
            m = cells[k].get(r)
            row.append("–" if m is None else f"{m['device_us']:.2f}{'' if m['graph'] else '*'}")
        print(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(row) + " |")
    print(f"\n{len(ms)} measurements in {elapsed:.0f} s ({compile_spent:.0f} s compiling)")
    for n in notes:
        print("note: " + n)

    report = {
        "backend": "torch",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "config": {"groups": cfg.groups, "graph_replays": cfg.replays, "steps_per_graph": STEPS_PER_GRAPH,
                   "eager_repeats": cfg.eager_repeats, "host_calls": cfg.host_calls, "warmup": cfg.warmup,
                   "temperature": TEMPERATURE, "compile_mode": args.compile_mode},
        "notes": notes,
        "measurements": ms,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {os.path.abspath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

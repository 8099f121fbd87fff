"""qvg's cache inside a causal DiT with Wan2.1's shapes, against Self-Forcing's BF16 cache.

The model (random bf16 weights, fixed seed), --shapes:
  wan1.3b  Wan2.1-T2V-1.3B (Self-Forcing): 30 blocks of width 1536, 12 heads x 128, FFN 8960;
  wan14b   Wan2.1-14B / Wan2.2-A14B (LingBot-World's base): 40 blocks of width 5120, 40 heads x 128,
           FFN 13824 (docs/INTEGRATIONS.md, "Shapes used by the benchmarks");
RMS-normed Q/K, 3-D RoPE (float32 tables, interleaved pairs), cross-attention to 512 text tokens,
adaLN modulation; 1,560 tokens per latent frame (30 x 52; --grid), chunks of 3 latent frames (4,680 tokens),
4 denoising passes per chunk and a clean pass that writes the cache. Attention: PyTorch's
scaled_dot_product_attention. --blocks N runs the first N blocks only (where the whole model does not
fit or takes too long): every figure is then for N blocks, not the model. Caches, fed the same noise:
  bf16     Self-Forcing's per-block dicts (a preallocated BF16 buffer, the chunk written at its
           position, rolled left past the sink when full, attention over the buffer's last
           --max-attention-size rows);
  SPEC     qvg.torch.SelfForcingKVCache with that codec for K and V (e.g. qvg, qvg-pro), or with
           --cache lingbot qvg.lingbot.LingBotWorldKVCache (the same dict semantics; LingBot-World's
           blocks: --keep-recent, --max-attention-size);
  SPEC+overlap  the same with overlap_encode=True (spans encoded on the cache's own stream).
  SPEC+batch    the same with batch_encodes=True (every block's span encoded in one batch).
  SPEC+zc       the same with zero_copy_reads=True (the history's BF16 chunks read in place); suffixes
                combine, e.g. SPEC+batch+zc.
Each chunk is timed by the wall clock from an idle device to an idle device (torch.cuda.synchronize
at both ends: the cache's own stream included; the model stream's CUDA-event time is in the JSON as
mem.stream_ms); runs of the
modes alternate, --repeats times, and the median run of each mode is reported (of an even count,
the faster of the middle two): ms per chunk, the
whole run, the steady state (chunks after the first span was encoded), the overhead against BF16
of both, peak memory, KV bytes, and the latent frames of history a 16 GB KV budget holds.

    PYTHONPATH=build-gpu/python python3 python/bench/bench_wan.py [--frames 21] [--quant-factor 2]
        [--local-attn-size -1] [--sink-size 0] [--modes bf16 qvg qvg-pro] [--repeats 3] [--json F]
        [--profile [--profile-chunk -1]] [--longcat-blocks 4] [--shapes wan1.3b|wan14b] [--cache selfforcing|lingbot]
        [--blocks N] [--grid H W] [--keep-recent 0] [--max-attention-size TOKENS]

LingBot-World (issue 40 item 6): Wan-14B-shaped blocks, LingBot-World v2's cache policy (sink of 6
frames, each finished chunk a span, the newest kept in BF16, a buffer of 68 frames). The whole model,
40 blocks, 21 frames (weights 23.9 GB; estimated at about 2 minutes on an H100). Its BF16 buffer is
the 21 frames generated (26.8 GB): LingBot-World's own preallocated 68-frame buffer would be 86.9 GB
at 40 blocks (it runs 8 GPUs, 5 heads each), and 21 frames never reach the window, so the rows
attended are the same:

    PYTHONPATH=build-gpu/python python3 python/bench/bench_wan.py --shapes wan14b --cache lingbot \
        --frames 21 --local-attn-size -1 --sink-size 6 --quant-factor 1 --keep-recent 1 \
        --modes bf16 qvg --repeats 3 --json lingbot14b.json

and the rolling window past 68 frames (90 frames; 4 of the 40 blocks, so figures are for 4 blocks;
estimated at about 1.5 minutes):

    PYTHONPATH=build-gpu/python python3 python/bench/bench_wan.py --shapes wan14b --cache lingbot \
        --blocks 4 --frames 90 --local-attn-size 68 --sink-size 6 --quant-factor 1 --keep-recent 1 \
        --modes bf16 qvg --repeats 3 --json lingbot14b_window.json

and at LingBot-World v2's 720 x 1280 (3,600 tokens a frame; 2 blocks, 78 frames: the window fills at
frame 68; estimated at 2-3 minutes):

    PYTHONPATH=build-gpu/python python3 python/bench/bench_wan.py --shapes wan14b --cache lingbot \
        --grid 45 80 --blocks 2 --frames 78 --local-attn-size 68 --sink-size 6 --quant-factor 1 \
        --keep-recent 1 --modes bf16 qvg --repeats 3 --json lingbot14b_720p.json

Chunks are 3 latent frames (the LingBot-World pipeline's default; QVG's v2 launcher passes its CLI's
default of 4, with which a sink of 6 frames is not whole chunks, as qvg's cache requires).
"""
import argparse
import gc
import json
import statistics
import time

import torch
import torch.nn.functional as F

import qvg
import qvg.lingbot
import qvg.torch

# Public configs (docs/INTEGRATIONS.md, "Shapes used by the benchmarks"); grid: latent 480 x 832 / (8 x 2)
SHAPES = {
    "wan1.3b": dict(width=1536, heads=12, dim=128, ffn=8960, blocks=30, text=512, grid=(30, 52), frames_per_chunk=3,
                    steps=4),
    "wan14b": dict(width=5120, heads=40, dim=128, ffn=13824, blocks=40, text=512, grid=(30, 52), frames_per_chunk=3,
                   steps=4),
}
CACHES = {"selfforcing": qvg.torch.SelfForcingKVCache, "lingbot": qvg.lingbot.LingBotWorldKVCache}
GB = 1e9


class Rope3D:
    """Wan's 3-D RoPE (time / height / width parts of d - 4 (d // 6), 2 (d // 6), 2 (d // 6)
    channels, interleaved pairs, theta 10000) with float32 tables. parts / theta: another split and
    base (HunyuanVideo 1.5: (16, 56, 56), 256). x: [B, T, H, D], T whole frames of the grid."""

    def __init__(self, dim, max_frames, grid, device, parts=None, theta=10000.0):
        parts = parts or [dim - 4 * (dim // 6), 2 * (dim // 6), 2 * (dim // 6)]
        assert sum(parts) == dim and all(n % 2 == 0 for n in parts), parts
        h, w = grid
        ranges = [torch.arange(max_frames), torch.arange(h), torch.arange(w)]
        self.tables = []
        for n, r in zip(parts, ranges):
            freq = 1.0 / (theta ** (torch.arange(0, n, 2, dtype=torch.float64) / n))
            ang = r[:, None].double() * freq[None]
            self.tables.append((ang.cos().float().to(device), ang.sin().float().to(device)))
        self.grid = grid

    def __call__(self, x, start_frame):
        t = x.shape[1]
        h, w = self.grid
        f = t // (h * w)
        (ct, st), (ch, sh), (cw, sw) = self.tables
        fr = slice(start_frame, start_frame + f)

        def expand(c, shape_idx):
            if shape_idx == 0:
                return c[fr][:, None, None].expand(f, h, w, -1)
            if shape_idx == 1:
                return c[:h][None, :, None].expand(f, h, w, -1)
            return c[:w][None, None, :].expand(f, h, w, -1)

        cos = torch.cat([expand(ct, 0), expand(ch, 1), expand(cw, 2)], -1).reshape(t, 1, -1)
        sin = torch.cat([expand(st, 0), expand(sh, 1), expand(sw, 2)], -1).reshape(t, 1, -1)
        xf = x.float().unflatten(-1, (-1, 2))
        a, b = xf[..., 0], xf[..., 1]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2).to(x.dtype)


class Model:
    def __init__(self, s, device, seed=0, blocks=None):
        g = torch.Generator(device=device).manual_seed(seed)
        W, F_ = s["width"], s["ffn"]

        def p(*shape, scale=None):
            t = torch.randn(*shape, device=device, generator=g, dtype=torch.float32)
            return (t * (scale if scale is not None else shape[0] ** -0.5)).to(torch.bfloat16)

        self.s = s
        self.blocks = []
        for _ in range(blocks or s["blocks"]):
            self.blocks.append(dict(qkv=p(W, 3 * W), o=p(W, W), qn=torch.ones(W, device=device, dtype=torch.bfloat16),
                                    kn=torch.ones(W, device=device, dtype=torch.bfloat16), cq=p(W, W), co=p(W, W),
                                    text_k=p(1, s["text"], s["heads"], s["dim"], scale=1.0),
                                    text_v=p(1, s["text"], s["heads"], s["dim"], scale=1.0),
                                    f1=p(W, F_), f2=p(F_, W), mod=p(6, W, scale=0.02)))

    def block(self, i, x, rope, start_frame, update):
        b, s = self.blocks[i], self.s
        T, W, H, D = x.shape[1], s["width"], s["heads"], s["dim"]
        m = b["mod"]
        h = F.layer_norm(x, (W,)) * (1 + m[1]) + m[0]
        q, k, v = (h @ b["qkv"]).view(1, T, 3, W).unbind(2)
        q = F.rms_norm(q, (W,), b["qn"]).view(1, T, H, D)
        k = F.rms_norm(k, (W,), b["kn"]).view(1, T, H, D)
        v = v.reshape(1, T, H, D)
        q, k = rope(q, start_frame), rope(k, start_frame)
        ka, va = update(k, v)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), ka.transpose(1, 2), va.transpose(1, 2))
        x = x + m[2] * (o.transpose(1, 2).reshape(1, T, W) @ b["o"])
        cq = (F.layer_norm(x, (W,)) @ b["cq"]).view(1, T, H, D)
        o = F.scaled_dot_product_attention(cq.transpose(1, 2), b["text_k"].transpose(1, 2),
                                           b["text_v"].transpose(1, 2))
        x = x + o.transpose(1, 2).reshape(1, T, W) @ b["co"]
        h = F.layer_norm(x, (W,)) * (1 + m[4]) + m[3]
        return x + m[5] * (F.gelu(h @ b["f1"], approximate="tanh") @ b["f2"])


class DictCache:
    """Self-Forcing's BF16 cache: per block a buffer of `size` tokens, end indices, a sink."""

    def __init__(self, s, blocks, size, sink_tokens, device, max_attention_size=None):
        self.size, self.sink, self.max_attention_size = size, sink_tokens, max_attention_size
        self.d = [dict(k=torch.zeros(1, size, s["heads"], s["dim"], device=device, dtype=torch.bfloat16),
                       v=torch.zeros(1, size, s["heads"], s["dim"], device=device, dtype=torch.bfloat16),
                       g=0, l=0) for _ in range(blocks)]

    def update(self, i, k, v, start):
        c, t = self.d[i], k.shape[1]
        end = start + t
        if end > c["g"] and t + c["l"] > self.size:
            ev = t + c["l"] - self.size
            keep = c["l"] - ev - self.sink
            for n in ("k", "v"):
                c[n][:, self.sink:self.sink + keep] = c[n][:, self.sink + ev:self.sink + ev + keep].clone()
            le = c["l"] + end - c["g"] - ev
        else:
            le = c["l"] + end - c["g"]
        c["k"][:, le - t:le] = k
        c["v"][:, le - t:le] = v
        c["g"], c["l"] = end, le
        first = 0 if self.max_attention_size is None else max(0, le - self.max_attention_size)
        return c["k"][:, first:le], c["v"][:, first:le]

    def kv_bytes(self):
        return sum(c[n].numel() * 2 for c in self.d for n in ("k", "v"))


def generate(model, mode, args, rope, noise, profile=None):
    """One generation; returns per-chunk ms, the final latents, memory figures, the cache."""
    s, dev = model.s, noise[0].device
    fs = s["grid"][0] * s["grid"][1]
    T = fs * s["frames_per_chunk"]
    chunks = len(noise)
    nb = len(model.blocks)
    total_frames = chunks * s["frames_per_chunk"]
    size = (args.local_attn_size if args.local_attn_size != -1 else total_frames) * fs
    # Free device memory before the cache exists: BF16's buffer is allocated whole at its making.
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    if mode == "bf16":
        cache = DictCache(s, nb, size, args.sink_size * fs, dev, args.max_attention_size)
        upd = cache.update
    else:
        # Suffixes, in any order: "+overlap" overlap_encode=True (spans encoded on the cache's own stream),
        # "+batch" batch_encodes=True, "+zc" zero_copy_reads=True.
        spec, flags = mode, set()
        while any(spec.endswith(f) for f in ("+overlap", "+batch", "+zc")):
            spec, _, flag = spec.rpartition("+")
            flags.add(flag)
        extra = {"zero_copy_reads": True} if "zc" in flags else {}
        cache = CACHES[args.cache](nb, s["heads"], s["dim"], frame_seqlen=fs, frames_per_chunk=s["frames_per_chunk"],
                                   local_attn_size=args.local_attn_size, sink_size=args.sink_size, key=spec,
                                   value=spec, quant_factor=args.quant_factor, overlap_encode="overlap" in flags,
                                   batch_encodes="batch" in flags, keep_recent=args.keep_recent,
                                   max_attention_size=args.max_attention_size, **extra)
        upd = lambda i, k, v, st: cache[i].update(k, v, st)  # noqa: E731
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    low = torch.cuda.mem_get_info()[0]
    times, stream_ms, outs = [], [], []
    profiled = args.profile_chunk if args.profile_chunk >= 0 else chunks + args.profile_chunk
    for c in range(chunks):
        start, frame = c * T, c * s["frames_per_chunk"]
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        prof = profile if (profile is not None and c == profiled) else None
        if prof:
            prof.__enter__()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        a.record()
        x = noise[c]
        for step in range(s["steps"] + 1):  # denoising passes, then the clean pass that writes the cache
            h = x
            for i in range(nb):
                h = model.block(i, h, rope, frame, lambda k, v, i=i: upd(i, k, v, start))
            x = 0.5 * x + 0.5 * h if step < s["steps"] else x
        b.record()
        b.synchronize()
        if prof:
            prof.__exit__(None, None, None)
        # A chunk's time: wall clock to the device's idle (work on the cache's own stream included).
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t0))
        stream_ms.append(a.elapsed_time(b))  # the model's stream only
        low = min(low, torch.cuda.mem_get_info()[0])
        outs.append(x.float())
    mem = dict(torch_peak=torch.cuda.max_memory_allocated(), device_used_delta=free0 - low, stream_ms=stream_ms)
    if mode == "bf16":
        mem["kv_bytes"] = cache.kv_bytes()
    else:
        m = cache.memory()
        mem.update(kv_bytes=m["kv_bytes"] + m["pending"], spans_bytes=m["kv_bytes"] - m["k_tail"] - m["v_tail"],
                   tail_bytes=m["k_tail"] + m["v_tail"] + m["pending"], tokens_encoded=m["tokens_encoded"],
                   buffers=m["buffers"], scratch=m["scratch"], bits_per_value=m["bits_per_value"])
        if "views" in m:  # +zc: the pages behind the views stand where kv()'s buffers (in torch_peak) stood:
            # the shared (decoded history) pages and the own pages beyond the BF16 chunks (the slots)
            mem["views_bytes"] = m["views"]["shared"] + m["views"]["own"] - m["k_tail"] - m["v_tail"]
    return times, torch.stack(outs), mem, cache


def summarize(runs, steady_from):
    """The median run (by total) of a mode's repeats; of an even count, the faster of the middle two
    (a run, not an average, so that its per-chunk times and memory belong together)."""
    runs = sorted(runs, key=lambda r: sum(r["ms"]))
    r = runs[(len(runs) - 1) // 2]
    return dict(ms=r["ms"], total_ms=sum(r["ms"]), steady_ms=sum(r["ms"][steady_from:]), mem=r["mem"],
                all_totals=[sum(x["ms"]) for x in runs])


def check_profile(prof):
    """Host<->device copies, synchronizations and cudaMalloc calls in a profiled chunk (CUDA runtime
    API calls and copy activities; the harness's own cudaEventSynchronize at the chunk's end is not
    counted)."""
    names = {}
    for e in prof.events():
        n = e.name
        if any(w in n for w in ("Memcpy HtoD", "Memcpy DtoH", "cudaStreamSynchronize", "cudaDeviceSynchronize",
                                "cudaMemcpy ")) or n in ("cudaMemcpy", "cudaMalloc"):
            names[n] = names.get(n, 0) + 1
    return names


def longcat(args, dev):
    """Per-block cost at LongCat-Video's shapes: width 4096, 32 heads x 128, FFN 16384 (4 x width),
    a context of 29,640 tokens (19 latent frames of 30 x 52) held by the cache, and a chunk of 4,680
    new tokens attending to it. Times `--longcat-passes` passes over the blocks, per mode."""
    s = dict(width=4096, heads=32, dim=128, ffn=16384, blocks=args.longcat_blocks, text=512, grid=(30, 52),
             frames_per_chunk=3, steps=4)
    fs, ctx_frames, T = 1560, 19, 4680
    model = Model(s, dev, blocks=args.longcat_blocks, seed=3)
    rope = Rope3D(s["dim"], ctx_frames + 3, s["grid"], dev)
    g = torch.Generator(device=dev).manual_seed(4)
    ctx = [(torch.randn(1, ctx_frames * fs, s["heads"], s["dim"], device=dev, generator=g).to(torch.bfloat16),
            torch.randn(1, ctx_frames * fs, s["heads"], s["dim"], device=dev, generator=g).to(torch.bfloat16))
           for _ in range(2)]  # two blocks' worth, shared round-robin (the figures are per block)
    x = torch.randn(1, T, s["width"], device=dev, generator=g).to(torch.bfloat16)
    out = {}
    for mode in args.modes:
        if mode == "bf16":
            bufs = []
            for i in range(args.longcat_blocks):
                k, v = ctx[i % 2]
                kb = torch.empty(1, ctx_frames * fs + T, s["heads"], s["dim"], device=dev, dtype=torch.bfloat16)
                vb = torch.empty_like(kb)
                kb[:, :ctx_frames * fs] = k
                vb[:, :ctx_frames * fs] = v
                bufs.append((kb, vb))

            def upd(i, k, v, bufs=bufs):
                kb, vb = bufs[i]
                kb[:, -T:] = k
                vb[:, -T:] = v
                return kb, vb
        else:
            cache = qvg.torch.KVCache(args.longcat_blocks, s["heads"], s["dim"], key=mode, value=mode,
                                      quant_factor=1)
            for i in range(args.longcat_blocks):
                cache.append(i, *ctx[i % 2])  # one span of 29,640 tokens
            upd = lambda i, k, v, cache=cache: cache.kv(i, extra=(k, v))  # noqa: E731
        times = []
        for rep in range(args.longcat_passes + 1):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            h = x
            for i in range(args.longcat_blocks):
                h = model.block(i, h, rope, ctx_frames, lambda k, v, i=i: upd(i, k, v))
            b.record()
            b.synchronize()
            if rep:
                times.append(a.elapsed_time(b) / args.longcat_blocks)
        out[mode] = statistics.median(times)
        if mode != "bf16":
            out[mode + "_kv_bytes_per_block"] = cache.memory()["kv_bytes"] / args.longcat_blocks
            del cache
    base = out.get("bf16")
    print(f"\nLongCat-shaped blocks ({args.longcat_blocks}, context 29,640 tokens, chunk 4,680): ms per block-pass")
    for mode in args.modes:
        ov = f" ({100 * (out[mode] / base - 1):+.2f} %)" if base and mode != "bf16" else ""
        print(f"  {mode:10s} {out[mode]:8.3f}{ov}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=21, help="latent frames generated (a multiple of 3)")
    ap.add_argument("--quant-factor", type=int, default=8, help="chunks per compressed span")
    ap.add_argument("--local-attn-size", type=int, default=-1, help="frames attended (Self-Forcing's; -1 = all)")
    ap.add_argument("--sink-size", type=int, default=0, help="sink frames (a multiple of 3)")
    ap.add_argument("--modes", nargs="+", default=["bf16", "qvg", "qvg-pro"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shapes", choices=sorted(SHAPES), default="wan1.3b", help="the DiT's shapes")
    ap.add_argument("--cache", choices=sorted(CACHES), default="selfforcing",
                    help="the qvg cache class (lingbot: qvg.lingbot.LingBotWorldKVCache)")
    ap.add_argument("--blocks", type=int, default=None, help="blocks run (default: all of --shapes')")
    ap.add_argument("--grid", type=int, nargs=2, default=None, metavar=("H", "W"),
                    help="latent tokens per frame, height x width (default 30 52: 480 x 832; 45 80: 720 x 1280)")
    ap.add_argument("--keep-recent", type=int, default=0, help="newest finished chunks kept in BF16 (qvg modes)")
    ap.add_argument("--max-attention-size", type=int, default=None,
                    help="rows of the buffer the attention reads, the last ones (LingBot-World's; default: all)")
    ap.add_argument("--profile", action="store_true",
                    help="profile a chunk (--profile-chunk) of a run of the first mode other than bf16")
    ap.add_argument("--profile-chunk", type=int, default=-1,
                    help="the chunk --profile profiles, from 0 (negative: from the end; default -1, the last)")
    ap.add_argument("--longcat-blocks", type=int, default=0, help="blocks of the LongCat-shaped run (0: skip it)")
    ap.add_argument("--longcat-passes", type=int, default=5, help="timed passes of the LongCat-shaped run")
    ap.add_argument("--skip-wan", action="store_true", help="only the LongCat-shaped run")
    ap.add_argument("--profile-rows", type=int, default=18, help="rows of the profiler's table per mode")
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = torch.device("cuda")
    result = {}
    if args.longcat_blocks:
        result["longcat"] = longcat(args, dev)
        torch.cuda.empty_cache()
    if args.skip_wan:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        return
    s = dict(SHAPES[args.shapes])
    if args.blocks is None:
        args.blocks = s["blocks"]
    if args.grid is not None:
        s["grid"] = tuple(args.grid)
    fs = s["grid"][0] * s["grid"][1]
    chunks = args.frames // s["frames_per_chunk"]
    model = Model(s, dev, blocks=args.blocks)
    rope = Rope3D(s["dim"], args.frames + 3, s["grid"], dev)
    g = torch.Generator(device=dev).manual_seed(1)
    noise = [torch.randn(1, fs * s["frames_per_chunk"], s["width"], device=dev, generator=g).to(torch.bfloat16)
             for _ in range(chunks)]
    part = "" if args.blocks == s["blocks"] else f" (figures for these {args.blocks} of {s['blocks']} blocks)"
    print(f"{args.shapes}-shaped causal DiT, {args.cache} cache: {args.blocks} blocks{part}, {chunks} chunks of "
          f"{fs * 3} tokens, span {args.quant_factor} chunks, keep_recent {args.keep_recent}, local_attn_size "
          f"{args.local_attn_size}, sink {args.sink_size}, max_attention_size {args.max_attention_size}", flush=True)
    generate(model, "bf16", args, rope, noise[:2])  # warm-up (cuBLAS, SDPA kernels)
    runs, ref = {m: [] for m in args.modes}, None
    for rep in range(args.repeats):
        for mode in args.modes:
            ms, out, mem, cache = generate(model, mode, args, rope, noise)
            # The mode's cache dropped and its memory handed back to the driver from both pools, so that
            # neither its bytes nor a pool's reserve count in the next mode's peaks (qvg's pool keeps freed
            # memory, as PyTorch's does; a cache can sit in reference cycles, hence the collector).
            del cache
            gc.collect()
            torch.cuda.synchronize()
            qvg.empty_cache()
            torch.cuda.empty_cache()
            runs[mode].append(dict(ms=ms, mem=mem))
            if mode == "bf16" and ref is None:
                ref = out
            err = ((out - ref).norm() / ref.norm()).item() if ref is not None else float("nan")
            runs[mode][-1]["rel_err_vs_bf16"] = err
            print(f"  run {rep + 1} {mode:8s} {sum(ms):9.1f} ms  (rel. L2 of latents vs bf16 {err:.3g})", flush=True)
    # Steady state: chunks after the first span was encoded (its encode happens at the start of
    # chunk quant_factor + sink chunks).
    steady_from = min(chunks - 1, args.quant_factor + args.keep_recent + args.sink_size // 3 + 1)
    result.update(config=dict(vars(args), chunks=chunks, chunk_tokens=fs * 3, steady_from_chunk=steady_from,
                              device=torch.cuda.get_device_name(), torch=torch.__version__, qvg=qvg.__version__),
                  modes={m: summarize(r, steady_from) for m, r in runs.items()})
    base = result["modes"].get("bf16")
    bf16_frame = 2 * args.blocks * fs * s["heads"] * s["dim"] * 2  # K and V of one latent frame, all blocks
    print(f"\n{'mode':10s} {'total ms':>10s} {'overhead':>9s} {'steady ms':>10s} {'overhead':>9s} "
          f"{'KV GB':>7s} {'peak GB':>8s} {'frames in 16 GB':>16s} {'device GB':>10s} {'frames/16GB dev':>16s}")
    for m, r in result["modes"].items():
        ov = 100 * (r["total_ms"] / base["total_ms"] - 1) if base else float("nan")
        sov = 100 * (r["steady_ms"] / base["steady_ms"] - 1) if base else float("nan")
        r["overhead_pct"], r["steady_overhead_pct"] = ov, sov
        mem = r["mem"]
        if m == "bf16":
            frames16 = int(16 * GB // bf16_frame)
        elif mem.get("tokens_encoded"):
            per_frame = mem["spans_bytes"] / (mem["tokens_encoded"] / fs / args.blocks)  # counts sum over blocks
            # BF16 at most: the chunks before a span and the sink (+overlap: also the last span's copies)
            tail_frames = ((2 if "+overlap" in m else 1) * args.quant_factor + args.keep_recent) * 3 \
                + args.sink_size
            frames16 = int((16 * GB - tail_frames * bf16_frame) // per_frame) + tail_frames
        else:
            frames16 = 0
        r["frames_in_16GB"] = frames16
        peak = (mem["torch_peak"] + mem.get("spans_bytes", 0) + mem.get("scratch", 0) + mem.get("views_bytes", 0)) / GB
        # Device level: the lowest free memory (cudaMemGetInfo after every chunk; PyTorch's caching
        # allocator and qvg's stream-ordered pool keep what they reserved, so it is the run's peak)
        # below the free memory before it: model activations, PyTorch's pool and qvg's together.
        # Frames in 16 GB from it, as if all of it grew with the frames (a lower bound).
        dev = mem["device_used_delta"]
        frames16_dev = int(args.frames * 16 * GB // dev) if dev > 0 else 0
        r["device_peak_GB"], r["frames_in_16GB_device"] = dev / GB, frames16_dev
        print(f"{m:10s} {r['total_ms']:10.1f} {ov:8.2f}% {r['steady_ms']:10.1f} {sov:8.2f}% "
              f"{mem['kv_bytes'] / GB:7.3f} {peak:8.2f} {frames16:16d} {dev / GB:10.2f} {frames16_dev:16d}")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        result["profile_chunk"], result["profile_last_chunk"] = args.profile_chunk, {}
        for mode in [m for m in args.modes if m != "bf16"][:1]:  # the first qvg mode
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            generate(model, mode, args, rope, noise, profile=prof)
            found = check_profile(prof)
            result["profile_last_chunk"][mode] = found
            print(f"\nprofiled chunk {args.profile_chunk} ({mode}): host<->device copies / synchronizations: "
                  f"{found or 'none'}")
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=args.profile_rows,
                                            max_name_column_width=60))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

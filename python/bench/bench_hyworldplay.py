"""qvg.hyworldplay.FrameKVCache inside an HY-WorldPlay-8B-shaped autoregressive DiT, against BF16 caches
(issue 40 item 6).

The model (random bf16 weights, fixed seed): the vision stream of HunyuanVideo-1.5's double-stream blocks
as HY-WorldPlay's autoregressive pipeline runs them (shapes: docs/INTEGRATIONS.md, "Shapes used by the
benchmarks"): 54 blocks of width 2048, 16 heads x 128, MLP 8192 (GELU tanh), QKV with bias, per-head
RMS-normed Q and K, adaLN modulation (fixed), 3-D RoPE (16 / 56 / 56 channels, theta 256, interleaved
pairs, float32 tables) on the RoPE branch and, on the ProPE branch, a per-frame 4 x 4 transform of every
4 channels (HY-WorldPlay's camera PRoPE: queries by P^T, keys and values by P^-1, outputs by P; random
near-identity P stand for the camera poses). The two branches attend as a batch of 2 (HY-WorldPlay's
layout) and their outputs go through two projections. Text: --text-tokens K/V per block and CFG branch
(the text stream's, computed once per video by HY-WorldPlay; random here, BF16 in every mode, appended
after the video rows: no mask, so the order of the keys does not change the attention). 1,560 tokens a
latent frame (480 x 832 / 16), chunks of 4 latent frames (6,240 tokens), --chunks chunks (8: 32 latent
frames, HY-WorldPlay's 125-frame run), --steps denoising passes per chunk, classifier-free guidance with
two caches (conditional and unconditional: they differ by the text K/V), the frames a chunk attends to
chosen as select_aligned_memory_frames(memory_frames=20, temporal_context_size=12, pred_latent_size=4)
chooses them, with a fixed stand-in for its camera-overlap ranking (memory_selection below).

--context, what the cache holds:
  keep     every past frame's K/V, appended by a clean pass after the chunk's last step (its clean latents,
           attending as the steps do); every pass of a later chunk reads the selected frames out of it
           (RoPE at absolute frame positions). This is FrameKVCache's selection read (one ranged decode
           per run of selected frames in one span). BF16: per block a list of frames, read by torch.cat.
  rebuild  HY-WorldPlay-8B's pipeline as published: at each chunk after the first a context pass over the
           selected frames' clean latents (RoPE positions 0 .. n-1) writes every block's K/V of those
           frames (the previous chunk's cache is dropped first; the pipeline still holds it while it
           builds the new one); the chunk's passes read all of it (positions from n). BF16: per block
           the pipeline's dict entry [2, heads, n x 1,560, 128].
Modes, fed the same inputs:
  bf16         the BF16 cache above;
  SPEC         qvg.hyworldplay.FrameKVCache(batch=2, key=SPEC, value=SPEC, frames_per_span=--frames-per-span),
               one per CFG branch (e.g. qvg, qvg-pro, rtn). A read passes the pass's own K/V and the text
               as extra rows (one copy of them more than bf16's single torch.cat);
  frames-bf16  FrameKVCache with the bf16 codec: the adapter alone (outputs equal bf16's up to SDPA
               choosing another kernel for the read buffer's strides).

Each chunk is timed by the wall clock from an idle device to an idle device (torch.cuda.synchronize at
both ends; rebuild: the context pass and the chunk's passes apart); runs of the modes alternate,
--repeats times, with every pool's unused memory returned between runs (torch.cuda.synchronize();
qvg.empty_cache(); torch.cuda.empty_cache()), and the median run of each mode (by its total) is reported:
ms per chunk, the whole run and its overhead against bf16, the KV bytes held (the most at any chunk's end,
both caches; text not included), PyTorch's peak allocated memory (qvg's own pool not included), the
device-level peak (the lowest free memory, torch.cuda.mem_get_info after every phase, below the free
memory before the run: model activations, PyTorch's pool and qvg's together), the share of the KV bytes
saved that the device-level peak saves (the issue's target: >= 80 %), and the rel. L2 of each chunk's
final latents against bf16's. Figures are for --blocks blocks (default 16 of the 54: the whole model's
caches are larger than an H100's memory in keep mode, and its run takes minutes).

Default run (keep, 16 blocks, 8 chunks, CFG, 4 steps; estimated at 1.5 minutes on an H100):

    PYTHONPATH=build-gpu/python python3 python/bench/bench_hyworldplay.py --json hy_keep.json

HY-WorldPlay's own cache (rebuild; estimated at 2 minutes):

    PYTHONPATH=build-gpu/python python3 python/bench/bench_hyworldplay.py --context rebuild --json hy_rebuild.json

The whole model in rebuild mode (54 blocks, 6 chunks: the 6th attends to 20 memory frames; BF16 KV
55.2 GB + weights 5.9 GB + text K/V 3.5 GB; estimated at 4 minutes):

    PYTHONPATH=build-gpu/python python3 python/bench/bench_hyworldplay.py --context rebuild --blocks 54 \\
        --chunks 6 --json hy_rebuild_54.json

The adapter alone (add frames-bf16) or another codec (qvg-pro): --modes bf16 frames-bf16 qvg qvg-pro.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

import qvg
import qvg.hyworldplay
from bench_wan import Rope3D

# HY-WorldPlay-8B = HunyuanVideo-1.5 (8.3B) with ProPE projections (docs/INTEGRATIONS.md)
HY = dict(width=2048, heads=16, dim=128, mlp=8192, blocks=54, rope_parts=(16, 56, 56), rope_theta=256.0,
          grid=(30, 52), chunk_frames=4, memory_frames=20, temporal_context=12)
GB = 1e9


def memory_selection(current, memory_frames=20, temporal_context=12, clip=4):
    """The past latent frames a chunk starting at frame `current` attends to, picked as HY-WorldPlay's
    select_aligned_memory_frames picks them: every past frame while current <= memory_frames; else the
    last temporal_context frames, the first clip (frames 0 .. clip - 1) and older clips of `clip` frames
    until memory_frames - temporal_context memory frames are held. Its ranking of the older clips by
    camera overlap is replaced by a fixed one (nearest the middle of the older history first), so the
    selection has two or three runs of frames and moves as the video grows. Sorted frame indices."""
    if current <= memory_frames:
        return list(range(current))
    recent = range(max(0, current - temporal_context), current)
    memory = list(range(clip))
    older = range(clip, current - temporal_context, clip)
    middle = (current - temporal_context) // 2
    for start in sorted(older, key=lambda s: (abs(s - middle), s)):
        if len(memory) >= memory_frames - temporal_context:
            break
        if start not in memory:
            memory.extend(range(start, start + clip))
    return sorted(set(recent) | set(memory))


def prope(x, m):
    """x: [B, T, H, D], T whole frames (frame-major); m: [frames, 4, 4], one per frame. Every 4 channels of a
    frame's tokens multiplied by its matrix (HY-WorldPlay's tiled projective transform)."""
    b, t, h, d = x.shape
    f = m.shape[0]
    xs = x.reshape(b, f, t // f, h, d // 4, 4)
    return torch.einsum("fij,bfthgj->bfthgi", m, xs).reshape(b, t, h, d)


def cameras(frames, device, seed=5):
    """Per latent frame the ProPE matrices (stand-ins for the camera's): "q" P^T, "kv" P^-1, "o" P, each
    [frames, 4, 4] bf16; P = identity + 0.05 N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    p = torch.eye(4) + 0.05 * torch.randn(frames, 4, 4, generator=g)
    return dict(q=p.transpose(1, 2).to(device, torch.bfloat16), kv=torch.linalg.inv(p).to(device, torch.bfloat16),
                o=p.to(device, torch.bfloat16))


def frames_of(cams, frames):
    idx = torch.tensor(list(frames), device=cams["q"].device)
    return {k: v[idx] for k, v in cams.items()}


class Blocks:
    """The vision stream of HunyuanVideo-1.5's double-stream blocks in HY-WorldPlay's autoregressive pass."""

    def __init__(self, s, blocks, device, seed=0):
        g = torch.Generator(device=device).manual_seed(seed)
        W, M, D = s["width"], s["mlp"], s["dim"]

        def p(*shape, scale=None):
            t = torch.randn(*shape, device=device, generator=g, dtype=torch.float32)
            return (t * (scale if scale is not None else shape[0] ** -0.5)).to(torch.bfloat16)

        ones = torch.ones(D, device=device, dtype=torch.bfloat16)
        self.w = [dict(qkv=p(W, 3 * W), qkv_b=p(3 * W, scale=0.02), o=p(W, W), po=p(W, W), qn=ones, kn=ones,
                       f1=p(W, M), f1_b=p(M, scale=0.02), f2=p(M, W), f2_b=p(W, scale=0.02), mod=p(6, W, scale=0.02))
                  for _ in range(blocks)]
        self.s = s

    def __len__(self):
        return len(self.w)

    def __call__(self, i, x, rope, start, cams, read):
        """x: [1, T, W], T whole frames at RoPE frame positions start ..; cams: those frames' ProPE matrices;
        read(K, V): the K and V to attend to, [2, H, n, D], given the pass's own K and V [2, H, T, D]
        (batch: the RoPE branch, the ProPE branch)."""
        w, s = self.w[i], self.s
        T, W, H, D = x.shape[1], s["width"], s["heads"], s["dim"]
        m = w["mod"]
        h = F.layer_norm(x, (W,)) * (1 + m[1]) + m[0]
        q, k, v = (h @ w["qkv"] + w["qkv_b"]).view(1, T, 3, H, D).unbind(2)
        q, k = F.rms_norm(q, (D,), w["qn"]), F.rms_norm(k, (D,), w["kn"])
        qp, kp, vp = prope(q, cams["q"]), prope(k, cams["kv"]), prope(v, cams["kv"])
        q, k = rope(q, start), rope(k, start)
        Q = torch.cat([q, qp]).transpose(1, 2)  # [2, H, T, D]
        K = torch.cat([k, kp]).transpose(1, 2)
        V = torch.cat([v, vp]).transpose(1, 2)
        ka, va = read(K, V)
        o = F.scaled_dot_product_attention(Q, ka, va).transpose(1, 2)  # [2, T, H, D]
        a = o[:1].reshape(1, T, W) @ w["o"] + prope(o[1:], cams["o"]).reshape(1, T, W) @ w["po"]
        x = x + m[2] * a
        h = F.layer_norm(x, (W,)) * (1 + m[4]) + m[3]
        return x + m[5] * (F.gelu(h @ w["f1"] + w["f1_b"], approximate="tanh") @ w["f2"] + w["f2_b"])


class Bf16Frames:
    """The BF16 cache: per block the K/V tensors [2, H, t, D] as written (keep: a chunk's; rebuild: the dict
    entry of the selected frames) and their frames as views. A read concatenates the selected frames (or
    everything held), the pass's own rows and the text in one torch.cat."""

    def __init__(self, blocks, frame_tokens):
        self.blocks, self.ft = blocks, frame_tokens
        self.reset()

    def reset(self):
        self.pieces = [[] for _ in range(self.blocks)]
        self.frames = [[] for _ in range(self.blocks)]

    def held(self, i):
        return len(self.frames[i])

    def add(self, i, K, V):
        self.pieces[i].append((K, V))
        ft = self.ft
        self.frames[i] += [(K[:, :, j * ft:(j + 1) * ft], V[:, :, j * ft:(j + 1) * ft]) for j in range(K.shape[2] // ft)]

    def attend(self, i, sel, K, V, txt):
        src = self.pieces[i] if sel is None else [self.frames[i][f] for f in sel]
        return (torch.cat([p[0] for p in src] + [K, txt[0]], 2), torch.cat([p[1] for p in src] + [V, txt[1]], 2))

    def memory(self):
        n = sum(2 * p[0].numel() * p[0].element_size() for b in self.pieces for p in b)
        return dict(kv=n, bf16=n, buffers=0)


class QvgFrames:
    """qvg.hyworldplay.FrameKVCache of one spec (batch 2: the RoPE and ProPE branches)."""

    def __init__(self, spec, a, s, blocks, frame_tokens):
        self.c = qvg.hyworldplay.FrameKVCache(blocks, s["heads"], s["dim"], frame_tokens=frame_tokens, batch=2,
                                              key=spec, value=spec, frames_per_span=a.frames_per_span)

    def reset(self):
        self.c.reset()

    def held(self, i):
        return self.c.frames(i)

    def add(self, i, K, V):
        self.c.append(i, K, V)

    def attend(self, i, sel, K, V, txt):
        if self.c.frames(i) == 0 or sel == []:  # nothing held to read: the rows as bf16 joins them
            return torch.cat([K, txt[0]], 2), torch.cat([V, txt[1]], 2)
        return self.c.kv(i, frames=sel, extra=(torch.cat([K, txt[0]], 2), torch.cat([V, txt[1]], 2)))

    def memory(self):
        m = self.c.memory()
        return dict(kv=m["k_spans"] + m["v_spans"] + m["pending"], bf16=m["bf16"], buffers=m["buffers"])


def make_cache(mode, a, s, blocks, frame_tokens):
    if mode == "bf16":
        return Bf16Frames(blocks, frame_tokens)
    return QvgFrames("bf16" if mode == "frames-bf16" else mode, a, s, blocks, frame_tokens)


def cleanup():
    """Every pool's unused memory back to the driver, so that one mode's reserve does not crowd the next."""
    torch.cuda.synchronize()
    qvg.empty_cache()
    torch.cuda.empty_cache()


def generate(blocks, mode, a, rope, cams, inputs, txt):
    """One video: per chunk (ms of the context pass, ms of the chunk's passes), each chunk's final latents,
    memory figures."""
    s = blocks.s
    ft = s["grid"][0] * s["grid"][1]
    cf, nb = s["chunk_frames"], len(blocks)
    branches = len(txt)
    caches = [make_cache(mode, a, s, nb, ft) for _ in range(branches)]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    free0 = torch.cuda.mem_get_info()[0]
    low, kv_peak, bf16_peak, buffers = free0, 0, 0, 0
    clean, ctx_ms, pass_ms, outs = [], [], [], []
    for c, x in enumerate(inputs):
        cur = c * cf
        sel = memory_selection(cur, a.memory_frames, a.temporal_context, cf)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if a.context == "rebuild" and sel:  # the context pass writes the selected frames' K/V
            xc = torch.cat([clean[f] for f in sel], 1)
            sel_cams = frames_of(cams, sel)
            for b, cache in enumerate(caches):
                cache.reset()
                h = xc
                for i in range(nb):
                    def write(K, V, i=i, b=b, cache=cache):
                        kv = cache.attend(i, [], K, V, txt[b][i])
                        cache.add(i, K, V)
                        return kv
                    h = blocks(i, h, rope, 0, sel_cams, write)
            torch.cuda.synchronize()
            low = min(low, torch.cuda.mem_get_info()[0])
        t1 = time.perf_counter()
        read_sel, start = (None, len(sel)) if a.context == "rebuild" else (sel, cur)
        chunk_cams = frames_of(cams, range(cur, cur + cf))
        for _ in range(a.steps):
            hs = []
            for b, cache in enumerate(caches):
                h = x
                for i in range(nb):
                    h = blocks(i, h, rope, start, chunk_cams,
                               lambda K, V, i=i, b=b, cache=cache: cache.attend(i, read_sel, K, V, txt[b][i]))
                hs.append(h)
            h = hs[0] if branches == 1 else hs[1] + a.guidance * (hs[0] - hs[1])  # [cond, uncond]
            x = 0.5 * x + 0.5 * h
        if a.context == "keep":  # the clean pass appends the chunk's K/V
            for b, cache in enumerate(caches):
                h = x
                for i in range(nb):
                    def read_add(K, V, i=i, b=b, cache=cache):
                        kv = cache.attend(i, sel, K, V, txt[b][i])
                        cache.add(i, K, V)
                        return kv
                    h = blocks(i, h, rope, cur, chunk_cams, read_add)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        ctx_ms.append(1e3 * (t1 - t0))
        pass_ms.append(1e3 * (t2 - t1))
        low = min(low, torch.cuda.mem_get_info()[0])
        ms = [cache.memory() for cache in caches]
        kv_peak = max(kv_peak, sum(m["kv"] for m in ms))
        bf16_peak = max(bf16_peak, sum(m["bf16"] for m in ms))
        buffers = max(buffers, sum(m["buffers"] for m in ms))
        clean += [x[:, f * ft:(f + 1) * ft] for f in range(cf)]
        outs.append(x.float())
    mem = dict(torch_peak=torch.cuda.max_memory_allocated(), device_peak=free0 - low, kv_bytes=kv_peak,
               kv_bf16_bytes=bf16_peak, read_buffers=buffers)
    del caches
    return ctx_ms, pass_ms, torch.stack(outs), mem


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--context", choices=["keep", "rebuild"], default="keep")
    ap.add_argument("--blocks", type=int, default=16, help="blocks run (HY-WorldPlay-8B: 54)")
    ap.add_argument("--chunks", type=int, default=8, help="chunks of 4 latent frames (8: a 125-frame video)")
    ap.add_argument("--steps", type=int, default=4, help="denoising passes per chunk")
    ap.add_argument("--no-cfg", dest="cfg", action="store_false", help="one branch, one cache (no guidance)")
    ap.add_argument("--guidance", type=float, default=6.0, help="guidance scale (HY-WorldPlay's 480p config)")
    ap.add_argument("--memory-frames", type=int, default=HY["memory_frames"])
    ap.add_argument("--temporal-context", type=int, default=HY["temporal_context"])
    ap.add_argument("--text-tokens", type=int, default=1985,
                    help="text-stream tokens (at most 1,000 LLM + 256 byT5 + 729 SigLIP)")
    ap.add_argument("--frames-per-span", type=int, default=4, help="FrameKVCache's frames_per_span")
    ap.add_argument("--modes", nargs="+", default=["bf16", "qvg"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    s = dict(HY)
    dev = torch.device("cuda")
    ft = s["grid"][0] * s["grid"][1]
    cf = s["chunk_frames"]
    frames = a.chunks * cf
    blocks = Blocks(s, a.blocks, dev)
    rope = Rope3D(s["dim"], frames + cf, s["grid"], dev, parts=list(s["rope_parts"]), theta=s["rope_theta"])
    cams = cameras(frames, dev)
    g = torch.Generator(device=dev).manual_seed(1)
    inputs = [torch.randn(1, cf * ft, s["width"], device=dev, generator=g).to(torch.bfloat16) for _ in range(a.chunks)]
    branches = 2 if a.cfg else 1
    txt = [[tuple(torch.randn(1, s["heads"], a.text_tokens, s["dim"], device=dev, generator=g).to(torch.bfloat16)
                  .expand(2, -1, -1, -1).contiguous() for _ in range(2)) for _ in range(a.blocks)]
           for _ in range(branches)]
    sels = [memory_selection(c * cf, a.memory_frames, a.temporal_context, cf) for c in range(a.chunks)]
    part = "" if a.blocks == s["blocks"] else f" (figures for these {a.blocks} of {s['blocks']} blocks)"
    print(f"HY-WorldPlay-8B-shaped DiT, {a.context} cache: {a.blocks} blocks{part}, {a.chunks} chunks of {cf * ft} "
          f"tokens, {a.steps} steps, {'CFG: 2 caches' if a.cfg else 'no CFG'}, text {a.text_tokens} tokens, frames "
          f"per span {a.frames_per_span}; frames read per chunk {[len(x) for x in sels]}, last chunk's {sels[-1]}; "
          f"{torch.cuda.get_device_name()}", flush=True)
    for mode in a.modes:  # warm-up (cuBLAS, SDPA kernels, the pools), 2 chunks
        generate(blocks, mode, a, rope, cams, inputs[:2], txt)
        cleanup()
    runs, ref = {m: [] for m in a.modes}, None
    for rep in range(a.repeats):
        for mode in a.modes:
            ctx, passes, out, mem = generate(blocks, mode, a, rope, cams, inputs, txt)
            cleanup()
            if mode == "bf16" and ref is None:
                ref = out
            err = [((o - r).norm() / r.norm()).item() for o, r in zip(out, ref)] if ref is not None else []
            runs[mode].append(dict(ctx_ms=ctx, pass_ms=passes, ms=[x + y for x, y in zip(ctx, passes)], mem=mem,
                                   rel_err_vs_bf16=err))
            print(f"  run {rep + 1} {mode:12s} {sum(ctx) + sum(passes):9.1f} ms  (rel. L2 of the last chunk's latents "
                  f"vs bf16 {err[-1] if err else float('nan'):.3g})", flush=True)
    result = dict(config=dict(vars(a), shapes=s, frame_tokens=ft, selections=sels, device=torch.cuda.get_device_name(),
                              torch=torch.__version__, qvg=qvg.__version__), modes={})
    for mode, rs in runs.items():
        rs = sorted(rs, key=lambda r: sum(r["ms"]))
        r = dict(rs[len(rs) // 2])
        r.update(total_ms=sum(r["ms"]), ctx_total_ms=sum(r["ctx_ms"]), all_totals=[sum(x["ms"]) for x in rs])
        result["modes"][mode] = r
    base = result["modes"].get("bf16")
    print(f"\n{'mode':12s} {'total ms':>10s} {'overhead':>9s} {'ctx ms':>9s} {'KV GB':>7s} {'BF16 eq.':>9s} "
          f"{'torch peak':>11s} {'device peak':>12s} {'saved/KV saved':>15s} {'max rel. L2':>12s}")
    for mode, r in result["modes"].items():
        m = r["mem"]
        ov = 100 * (r["total_ms"] / base["total_ms"] - 1) if base else float("nan")
        share = float("nan")
        if base and mode != "bf16" and base["mem"]["kv_bytes"] > m["kv_bytes"]:
            share = 100 * (base["mem"]["device_peak"] - m["device_peak"]) / (base["mem"]["kv_bytes"] - m["kv_bytes"])
        r["overhead_pct"], r["device_saved_pct_of_kv_saved"] = ov, share
        r["max_rel_err_vs_bf16"] = max(r["rel_err_vs_bf16"]) if r["rel_err_vs_bf16"] else None
        print(f"{mode:12s} {r['total_ms']:10.1f} {ov:8.2f}% {r['ctx_total_ms']:9.1f} {m['kv_bytes'] / GB:7.3f} "
              f"{m['kv_bf16_bytes'] / GB:9.3f} {m['torch_peak'] / GB:11.2f} {m['device_peak'] / GB:12.2f} "
              f"{share:14.1f}% {r['max_rel_err_vs_bf16'] or 0.0:12.3g}")
        print(f"{'':12s} ms per chunk: {' '.join(f'{x:.0f}' for x in r['ms'])}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

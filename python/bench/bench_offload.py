"""Time per denoising step of a LongCat-Video-shaped DiT whose blocks read the condition K/V held in one of
these ways (issue 40 item 4, compressed offload):

  bf16           LongCat's kv_cache_dict on the GPU: each block reads torch.cat([cache.repeat(B), chunk]);
  bf16-offload   the dict in pinned host memory, each block's K/V copied to the GPU when the block runs, on
                 the compute stream (LongCat's offload_kv_cache=True, which copies with .to(device) from
                 pageable memory; pinned here, so a little faster than LongCat's);
  bf16-prefetch  the same bytes through qvg's staging buffers (qvg._offload): the next block's copy on a
                 side stream while the current block runs;
  SPEC-offload   qvg.longcat.LongCatKVCache(key=SPEC, value=SPEC, offload=True), e.g. qvg-offload;
  SPEC           the same cache on the GPU, e.g. qvg.

The model: --blocks blocks of width heads x dim (LongCat-13B: 48 blocks, 32 heads x 128, FFN 4 x width),
QK RMS norm, LongCat's 3-D RoPE on the [condition; chunk] keys at every read, cross-attention to 512 text
tokens, adaLN modulation; random bf16 weights, --distinct-weights sets used round-robin (a block's time
does not depend on which weights it reads); the condition K/V random and distinct per block. A chunk of
--chunk-tokens latents of batch --batch (2: classifier-free guidance's halves) attends to
--cond-tokens condition tokens of batch 1 (one cache shared by the halves). A step is one pass over
every block, timed by the wall clock from an idle device to an idle device (side streams included);
the median of --steps steps after one warm-up step. Per mode: ms per step, bytes copied host -> device
per step, KV bytes held on the GPU and in pinned host memory, the staging buffers, PyTorch's peak
allocated memory in the steps (qvg's own pool not included), the device-level peak (the lowest free
memory, torch.cuda.mem_get_info after every step, below the free memory before the cache was built: the
KV on the GPU, staging, activations, PyTorch's pool and qvg's together; every pool's unused memory is
returned between modes), and whether the step's output equals the resident mode's bit for bit (bf16 for
the BF16 modes, SPEC for SPEC-offload).

LongCat-Video-13B for issue 40 item 6 (BF16 vs qvg: overhead, KV bytes, device-level peak) is this
script's bf16 and qvg modes; the whole model (48 blocks: BF16 KV 23.3 GB; estimated at 1-2 minutes on an
H100, most of it building the offloaded modes' pinned copies):

    PYTHONPATH=build-gpu/python python3 python/bench/bench_offload.py --modes bf16 qvg bf16-offload qvg-offload \
        --json longcat48.json

    PYTHONPATH=build-gpu/python python3 python/bench/bench_offload.py [--blocks 48] [--cond-tokens 29640]
        [--chunk-tokens 4680] [--batch 2] [--steps 5] [--modes bf16 bf16-offload bf16-prefetch qvg-offload qvg]
        [--json F]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import qvg
import qvg.longcat
from qvg import _offload

GB, MB = 1e9, 1e6


class Rope:
    """LongCat's 3-D RoPE: head_dim split into time D - 4 (D // 6), height and width 2 (D // 6) each;
    per part angles p * 10000^(-2j/n) in float32, repeated for the two channels of an interleaved pair;
    x cos + rotate_half(x) sin in float32. Tables for positions 0 .. frames x h x w - 1, frame-major."""

    def __init__(self, frames, grid, dim, device):
        h, w = grid
        parts = [dim - 4 * (dim // 6), 2 * (dim // 6), 2 * (dim // 6)]
        freqs = []
        for n_pos, n in zip((frames, h, w), parts):
            f = 1.0 / (10000 ** (torch.arange(0, n, 2)[: n // 2].float() / n))
            freqs.append(torch.repeat_interleave(torch.arange(n_pos, dtype=torch.float32)[:, None] * f[None], 2, 1))
        grid = (frames, h, w)
        ang = torch.cat([freqs[0][:, None, None].expand(*grid, -1), freqs[1][None, :, None].expand(*grid, -1),
                         freqs[2][None, None, :].expand(*grid, -1)], -1).reshape(frames * h * w, dim)
        self.cos, self.sin = ang.cos().to(device), ang.sin().to(device)

    def __call__(self, x, first):
        """x: [B, H, N, D] at positions first .. first + N - 1."""
        cos, sin = self.cos[first:first + x.shape[2]], self.sin[first:first + x.shape[2]]
        xf = x.float()
        pairs = xf.unflatten(-1, (-1, 2))
        half = torch.stack((-pairs[..., 1], pairs[..., 0]), -1).flatten(-2)
        return (xf * cos + half * sin).to(x.dtype)


class Blocks:
    """LongCat-shaped single-stream blocks; block i uses weight set i % distinct."""

    def __init__(self, a, device):
        W, H, D = a.heads * a.dim, a.heads, a.dim
        g = torch.Generator(device=device).manual_seed(0)

        def p(*shape, scale=None):
            t = torch.randn(*shape, device=device, generator=g)
            return (t * (scale if scale is not None else shape[0] ** -0.5)).to(torch.bfloat16)

        ones = torch.ones(D, device=device, dtype=torch.bfloat16)
        self.w = [dict(qkv=p(W, 3 * W), o=p(W, W), qn=ones, kn=ones, cq=p(W, W), co=p(W, W),
                       text_k=p(1, H, a.text, D, scale=1.0), text_v=p(1, H, a.text, D, scale=1.0),
                       f1=p(W, 4 * W), f2=p(4 * W, W), mod=p(6, W, scale=0.02)) for _ in range(a.distinct_weights)]
        self.H, self.D = H, D

    def __call__(self, i, x, read, rope, nc):
        """x: [B, T, W]; read(i, k, v) gives the keys (before RoPE) and values the chunk attends to,
        [B, H, Nc + T, D], from the chunk's own k, v [B, H, T, D]."""
        w, (B, T, W), H, D = self.w[i % len(self.w)], x.shape, self.H, self.D
        m = w["mod"]
        h = F.layer_norm(x, (W,)) * (1 + m[1]) + m[0]
        q, k, v = (h @ w["qkv"]).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = F.rms_norm(q, (D,), w["qn"]), F.rms_norm(k, (D,), w["kn"])
        k_full, v_full = read(i, k, v)
        o = F.scaled_dot_product_attention(rope(q, nc), rope(k_full, 0), v_full)
        x = x + m[2] * (o.transpose(1, 2).reshape(B, T, W) @ w["o"])
        cq = (F.layer_norm(x, (W,)) @ w["cq"]).view(B, T, H, D).transpose(1, 2)
        o = F.scaled_dot_product_attention(cq, w["text_k"].expand(B, -1, -1, -1), w["text_v"].expand(B, -1, -1, -1))
        x = x + o.transpose(1, 2).reshape(B, T, W) @ w["co"]
        h = F.layer_norm(x, (W,)) * (1 + m[4]) + m[3]
        return x + m[5] * (F.gelu(h @ w["f1"], approximate="tanh") @ w["f2"])


def condition(i, a, device):
    """Block i's condition K and V, [1, H, Nc, D] bf16 (the same for every mode)."""
    g = torch.Generator(device=device).manual_seed(1000 + i)
    return tuple(torch.randn(1, a.heads, a.cond_tokens, a.dim, device=device, generator=g).to(torch.bfloat16)
                 for _ in range(2))


def concat(kc, vc, k, v):
    """LongCat's forward_with_kv_cache: the cache repeated to the batch, then the chunk's rows."""
    b = k.shape[0]
    return torch.cat([kc.repeat(b, 1, 1, 1), k], 2), torch.cat([vc.repeat(b, 1, 1, 1), v], 2)


class Bf16:
    """The BF16 dict on the GPU."""

    def __init__(self, a, device):
        self.d = {i: condition(i, a, device) for i in range(a.blocks)}

    def read(self, i, k, v):
        return concat(*self.d[i], k, v)

    h2d = 0

    def memory(self):
        return dict(gpu=sum(2 * t.numel() for kv in self.d.values() for t in kv), pinned=0, staging=0)


class Bf16Offload:
    """The BF16 dict in pinned host memory, copied per block on the compute stream."""

    def __init__(self, a, device):
        self.device, self.h2d = device, 0
        self.d = {i: tuple(torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t)
                           for t in condition(i, a, device)) for i in range(a.blocks)}

    def read(self, i, k, v):
        kc, vc = (t.to(self.device, non_blocking=True) for t in self.d[i])
        self.h2d += 2 * (kc.numel() + vc.numel())
        return concat(kc, vc, k, v)

    def memory(self):  # the bytes asked for (PyTorch pins each tensor's size rounded up to a power of two)
        return dict(gpu=0, pinned=sum(2 * t.numel() for kv in self.d.values() for t in kv), staging=0)


class Bf16Prefetch:
    """The BF16 dict's bytes in a qvg._offload.HostStore, read through a Staging (next block prefetched)."""

    def __init__(self, a, device):
        self.shape = (1, a.heads, a.cond_tokens, a.dim)
        self.store, self.staging = _offload.HostStore(), _offload.Staging(device)
        for i in range(a.blocks):
            self.store.put(i, [t.reshape(-1).view(torch.uint8) for t in condition(i, a, device)])

    def read(self, i, k, v):
        with self.staging.staged(self.store, i) as (kb, vb):
            return concat(kb.view(torch.bfloat16).view(self.shape), vb.view(torch.bfloat16).view(self.shape), k, v)

    @property
    def h2d(self):
        return self.staging.copied

    def memory(self):
        return dict(gpu=0, pinned=self.store.pinned, staging=self.staging.nbytes)


class Qvg:
    """qvg.longcat.LongCatKVCache of one spec, on the GPU or offloaded."""

    def __init__(self, a, device, spec, offload):
        self.cache = qvg.longcat.LongCatKVCache(a.blocks, a.heads, a.dim, key=spec, value=spec, offload=offload)
        self.cache.load({i: condition(i, a, device) for i in range(a.blocks)})

    def read(self, i, k, v):
        return self.cache.get(i).kv(extra=(k, v))

    @property
    def h2d(self):
        return self.cache.h2d_bytes

    def memory(self):
        m = self.cache.memory()
        return dict(gpu=m["on_gpu"], pinned=m["host_pinned"], staging=m["staging"], bits=8 * (m["k"] + m["v"])
                    / (m["bf16"] / 2))


def make(mode, a, device):
    if mode == "bf16":
        return Bf16(a, device)
    if mode == "bf16-offload":
        return Bf16Offload(a, device)
    if mode == "bf16-prefetch":
        return Bf16Prefetch(a, device)
    if mode.endswith("-offload"):
        return Qvg(a, device, mode[:-len("-offload")], True)
    return Qvg(a, device, mode, False)


def resident(mode):
    """The mode whose output this one must equal bit for bit."""
    if mode.startswith("bf16"):
        return "bf16"
    return mode[:-len("-offload")] if mode.endswith("-offload") else mode


def step(a, blocks, read, rope, x):
    """One denoising step: every block once over the chunk x."""
    h = x
    for i in range(a.blocks):
        h = blocks(i, h, read, rope, a.cond_tokens)
    return h


def run(mode, a, blocks, rope, x, device):
    """Builds the mode's cache, times its steps; returns (figures, the output of a step)."""
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]  # before the cache: the device-level peak is below this
    t0 = time.perf_counter()
    holder = make(mode, a, device)
    torch.cuda.synchronize()
    setup_s = time.perf_counter() - t0
    qvg.empty_cache()  # what building the cache freed (qvg's encode scratch, the BF16 condition K/V)
    torch.cuda.empty_cache()
    out = step(a, blocks, holder.read, rope, x).float()  # warm-up
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    low = torch.cuda.mem_get_info()[0]
    h2d0, times = holder.h2d, []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(a, blocks, holder.read, rope, x)
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t0))
        low = min(low, torch.cuda.mem_get_info()[0])
    # device_peak: the lowest free memory in the steps below the free memory before the cache was built
    # (the cache on the GPU, the staging buffers, the activations: PyTorch's pool and qvg's together)
    r = dict(ms=statistics.median(times), all_ms=times, h2d_per_step=(holder.h2d - h2d0) / a.steps,
             torch_peak=torch.cuda.max_memory_allocated(), device_peak=free0 - low, setup_s=setup_s,
             **holder.memory())
    del holder
    torch.cuda.synchronize()
    qvg.empty_cache()  # qvg's pool keeps freed memory, as PyTorch's does
    torch.cuda.empty_cache()
    if hasattr(torch._C, "_host_emptyCache"):
        torch._C._host_emptyCache()  # the pinned blocks PyTorch cached for the next mode
    return r, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=48)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--grid", type=int, nargs=2, default=(30, 52), help="latent height and width (tokens per frame)")
    ap.add_argument("--cond-tokens", type=int, default=29640, help="condition tokens (a multiple of h x w)")
    ap.add_argument("--chunk-tokens", type=int, default=4680, help="the chunk's tokens (a multiple of h x w)")
    ap.add_argument("--batch", type=int, default=2, help="query batch (2: CFG); the cache has batch 1")
    ap.add_argument("--text", type=int, default=512)
    ap.add_argument("--distinct-weights", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--modes", nargs="+", default=["bf16", "bf16-offload", "bf16-prefetch", "qvg-offload", "qvg"])
    ap.add_argument("--json")
    a = ap.parse_args()
    frame = a.grid[0] * a.grid[1]
    if a.cond_tokens % frame or a.chunk_tokens % frame:
        ap.error(f"--cond-tokens and --chunk-tokens must be multiples of h x w = {frame}")
    device = torch.device("cuda")
    blocks = Blocks(a, device)
    rope = Rope((a.cond_tokens + a.chunk_tokens) // frame, a.grid, a.dim, device)
    g = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(a.batch, a.chunk_tokens, a.heads * a.dim, device=device, generator=g).to(torch.bfloat16)
    print(f"LongCat-shaped DiT: {a.blocks} blocks, {a.heads} heads x {a.dim}, condition {a.cond_tokens} tokens "
          f"(batch 1), chunk {a.chunk_tokens} tokens x batch {a.batch}; {torch.cuda.get_device_name()}", flush=True)
    res, outs = {}, {}
    for mode in a.modes:
        res[mode], outs[mode] = run(mode, a, blocks, rope, x, device)
        print(f"  {mode:14s} {res[mode]['ms']:9.1f} ms/step  (setup {res[mode]['setup_s']:.1f} s)", flush=True)
    base = res.get("bf16")
    print(f"\n{'mode':14s} {'ms/step':>9s} {'vs bf16':>8s} {'H2D MB/step':>12s} {'KV GPU GB':>10s} "
          f"{'pinned GB':>10s} {'staging MB':>11s} {'torch peak GB':>14s} {'device peak GB':>15s}  output")
    for mode, r in res.items():
        ref = resident(mode)
        if ref == mode or ref not in outs:
            same = "" if "bf16" not in outs or mode == "bf16" else \
                f"rel. L2 vs bf16 {((outs[mode] - outs['bf16']).norm() / outs['bf16'].norm()).item():.3g}"
        else:
            r["same_as_" + ref] = bool(torch.equal(outs[mode], outs[ref]))
            same = ("the same bytes as " if r["same_as_" + ref] else "DIFFERS from ") + ref
        r["vs_bf16_pct"] = 100 * (r["ms"] / base["ms"] - 1) if base else None
        vs = f"{r['vs_bf16_pct']:+7.1f}%" if base else f"{'':8s}"
        print(f"{mode:14s} {r['ms']:9.1f} {vs} {r['h2d_per_step'] / MB:12.1f} {r['gpu'] / GB:10.2f} "
              f"{r['pinned'] / GB:10.2f} {r['staging'] / MB:11.1f} {r['torch_peak'] / GB:14.2f} "
              f"{r['device_peak'] / GB:15.2f}  {same}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(config=dict(vars(a), device=torch.cuda.get_device_name(), torch=torch.__version__,
                                       qvg=qvg.__version__), modes=res), f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""K/V statistics of the trained reference model on real held-out frames.

For each chosen held-out window (15 real frames = 5 chunks), the frames are encoded
chunk by chunk at t = 0 exactly as the sampler fills its KV cache; per layer and head
we collect pre-RoPE keys, post-RoPE keys and values: one span of N = 3,840 tokens x 128.

Reports (OUT/kv_stats.json, OUT/kv_absmax.png, OUT/kv_kmeans.png):
- per-channel absmax profile (max |x| over all tokens of all windows), and the ratio of
  the largest to the median channel absmax (how outlier-heavy the channels are);
- k-means clustering of the tokens of one span: relative MSE ||X - C[pi]||^2 / ||X||^2
  for C = 1 .. 256 centroids (k-means++ start, 25 Lloyd iterations, seeded);
- symmetric absmax round-to-nearest (block B = 64 along D, fp32 scales) at INT2 and
  INT4: relative MSE of plain RTN against RTN of the residual after k-means with
  C = 256 (one QVG stage, without FP8 scale rounding), and their ratio.
With --dump FILE, also writes one span (first window, --dump-layer) of pre-RoPE keys and
values in fp16 for the quantizer benchmarks.

Usage: python3 train/kv_stats.py --model models/qvg_ref_video_dit.safetensors --out DIR
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data as qdata  # noqa: E402
import st_io  # noqa: E402
from model import append_cache, patchify  # noqa: E402
from sample import load_model  # noqa: E402

CS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
KINDS = ["k_pre", "k", "v"]
LABEL = {"k_pre": "keys, pre-RoPE", "k": "keys, post-RoPE", "v": "values"}


@torch.no_grad()
def collect(model, frames):
    """frames [B, 15, 64, 64, 3] in [-1,1] -> {kind: [layers, B, N, H, D]}."""
    cfg = model.cfg
    cache, recs = [], {k: [] for k in KINDS}
    for f0 in range(0, frames.shape[1], cfg.chunk_frames):
        tok = patchify(frames[:, f0:f0 + cfg.chunk_frames], cfg)
        _, kv, rec = model.forward_chunk(tok, 0.0, f0, cache, record=True)
        cache = append_cache(cache, kv)
        for k in KINDS:
            recs[k].append(torch.stack([r[k] for r in rec]))
    return {k: torch.cat(v, dim=2).float() for k, v in recs.items()}


def kmeans(x, C, iters, gen):
    """x [N, D] -> (centroids [C, D], assignment [N]); k-means++ start, Lloyd iterations."""
    N = x.shape[0]
    x2 = (x * x).sum(1)
    idx = [int(torch.randint(N, (1,), generator=gen))]
    d = ((x - x[idx[0]]) ** 2).sum(1)
    for _ in range(1, C):
        p = d.clamp_min(0).double().cpu()
        i = int(torch.multinomial(p / p.sum(), 1, generator=gen)) if p.sum() > 0 else \
            int(torch.randint(N, (1,), generator=gen))
        idx.append(i)
        d = torch.minimum(d, ((x - x[i]) ** 2).sum(1))
    c = x[idx].clone()
    for _ in range(iters):
        dist = x2[:, None] - 2 * x @ c.T + (c * c).sum(1)[None]
        a = dist.argmin(1)
        s = torch.zeros_like(c).index_add_(0, a, x)
        cnt = torch.bincount(a, minlength=C).to(x.dtype)
        nz = cnt > 0
        c[nz] = s[nz] / cnt[nz, None]
    dist = x2[:, None] - 2 * x @ c.T + (c * c).sum(1)[None]
    return c, dist.argmin(1)


def rtn(x, bits, block=64):
    """Symmetric absmax round-to-nearest per block of `block` values along the last dim."""
    qmax = 2 ** (bits - 1) - 1
    xb = x.reshape(*x.shape[:-1], -1, block)
    scale = xb.abs().amax(-1, keepdim=True) / qmax
    q = torch.where(scale > 0, torch.round(xb / scale.clamp_min(1e-30)).clamp(-qmax, qmax), 0 * xb)
    return (q * scale).reshape(x.shape)


def rel(err, x):
    return float((err ** 2).sum() / (x ** 2).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--frames", default=".cache/qvg_frames")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--windows", default="first", choices=["first", "all"],
                    help="first held-out window of each clip, or all held-out windows")
    ap.add_argument("--iters", type=int, default=25)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dump", default=None)
    ap.add_argument("--dump-layer", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    else:
        torch.set_num_threads(os.cpu_count())
    model, meta = load_model(args.model, device)
    cfg = model.cfg
    held = qdata.heldout_windows(qdata.load_clips(args.frames))
    if args.windows == "first":
        seen, pick = set(), []
        for i, (n, _, _) in enumerate(held):
            if n not in seen:
                seen.add(n)
                pick.append(i)
    else:
        pick = list(range(len(held)))
    frames = qdata.to_model(torch.stack([torch.from_numpy(held[i][2]) for i in pick]).float())
    rec = collect(model, frames.to(device))        # kind -> [L, B, N, H, D]
    L, B, N, H, D = rec["v"].shape
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    stats = {"windows": [f"{held[i][0]}@{held[i][1]}" for i in pick], "span_tokens": N,
             "layers": L, "heads": H, "head_dim": D, "C": CS, "kinds": {}}
    for kind in KINDS:
        x = rec[kind]
        absmax = x.abs().amax(dim=(1, 2))                   # [L, H, D]
        rms = x.pow(2).mean(dim=(1, 2)).sqrt()               # [L, H, D]
        km = torch.zeros(L, H, B, len(CS))
        rtn2 = torch.zeros(L, H, B, 2)
        rtn4 = torch.zeros(L, H, B, 2)
        for li in range(L):
            for h in range(H):
                for b in range(B):
                    xs = x[li, b, :, h]                      # [N, D] one span
                    for ci, C in enumerate(CS):
                        c, a = kmeans(xs, C, args.iters, gen)
                        km[li, h, b, ci] = rel(xs - c[a], xs)
                    r = xs - c[a]                            # residual after C = 256
                    rtn2[li, h, b] = torch.tensor([rel(xs - rtn(xs, 2), xs), rel(r - rtn(r, 2), xs)])
                    rtn4[li, h, b] = torch.tensor([rel(xs - rtn(xs, 4), xs), rel(r - rtn(r, 4), xs)])
        s = {
            "absmax": absmax.cpu().tolist(),
            "channel_rms": rms.cpu().tolist(),
            "absmax_max_over_median": (absmax.amax(-1) / absmax.median(-1).values).cpu().tolist(),
            "kmeans_rel_mse": km.mean(2).cpu().tolist(),              # [L, H, len(CS)]
            "kmeans_rel_mse_mean": km.mean(dim=(0, 1, 2)).tolist(),   # [len(CS)]
            "rtn_int2_rel_mse": rtn2[..., 0].mean().item(),
            "qvg1_int2_rel_mse": rtn2[..., 1].mean().item(),
            "rtn_int4_rel_mse": rtn4[..., 0].mean().item(),
            "qvg1_int4_rel_mse": rtn4[..., 1].mean().item(),
        }
        s["int2_mse_ratio_rtn_over_qvg1"] = s["rtn_int2_rel_mse"] / s["qvg1_int2_rel_mse"]
        s["int4_mse_ratio_rtn_over_qvg1"] = s["rtn_int4_rel_mse"] / s["qvg1_int4_rel_mse"]
        stats["kinds"][kind] = s
        print(f"{kind}: absmax max/median per layer,head "
              f"{np.round(np.array(s['absmax_max_over_median']), 2).tolist()}; "
              f"k-means rel MSE C={CS}: {np.round(s['kmeans_rel_mse_mean'], 4).tolist()}; "
              f"INT2 RTN {s['rtn_int2_rel_mse']:.4f} vs QVG-1 {s['qvg1_int2_rel_mse']:.4f} "
              f"({s['int2_mse_ratio_rtn_over_qvg1']:.2f}x); INT4 ratio "
              f"{s['int4_mse_ratio_rtn_over_qvg1']:.2f}x", flush=True)
    stats["seconds"] = time.time() - t0
    with open(os.path.join(args.out, "kv_stats.json"), "w") as f:
        json.dump(stats, f)
    plot(stats, args.out)
    if args.dump:
        li = min(args.dump_layer, L - 1)
        st_io.save({"k_pre": rec["k_pre"][li, 0].half().cpu().contiguous(),
                    "v": rec["v"][li, 0].half().cpu().contiguous()}, args.dump,
                   {"window": stats["windows"][0], "layer": str(li), "layout": "[N, H, D]",
                    "config": meta["config"]})
    print(f"kv_stats done in {stats['seconds']:.0f}s")


def plot(stats, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    L = stats["layers"]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    for ax, kind in zip(axes, KINDS):
        a = np.array(stats["kinds"][kind]["absmax"])          # [L, H, D]
        for li in range(L):
            ax.plot(a[li].reshape(-1), lw=0.8, label=f"layer {li}")
        ax.axvline(a.shape[2] - 0.5, color="k", lw=0.5)
        ax.set_ylabel("absmax")
        ax.set_title(f"{LABEL[kind]}: per-channel absmax (head 0 | head 1)", fontsize=9)
    axes[-1].set_xlabel("channel (head * 128 + d)")
    axes[0].legend(fontsize=7, ncol=L)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "kv_absmax.png"), dpi=80)
    plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), sharey=True)
    for ax, kind in zip(axes, KINDS):
        km = np.array(stats["kinds"][kind]["kmeans_rel_mse"])  # [L, H, C]
        for li in range(L):
            ax.plot(stats["C"], km[li].mean(0), marker="o", ms=3, lw=1, label=f"layer {li}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("centroids C")
        ax.set_title(f"{LABEL[kind]} (N={stats['span_tokens']})", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("k-means rel. MSE ||X-C[pi]||^2/||X||^2")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "kv_kmeans.png"), dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    main()

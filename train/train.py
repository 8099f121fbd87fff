#!/usr/bin/env python3
"""Train the qvg reference video model (rectified flow, teacher forcing, block-causal).

One training sample is a window of 15 frames = 5 chunks of 3 frames. The packed
sequence holds the clean chunks 0..3 (t = 0) followed by the noisy chunks 0..4, each
with its own t ~ U(0, 1):

    [ C0 C1 C2 C3 | N0 N1 N2 N3 N4 ]      (each chunk 768 tokens -> 6,912 tokens)

Attention mask (chunk level): clean Ci sees clean Cj for j <= i; noisy Ni sees clean
Cj for j < i and itself. This is exactly what the sampler does with a KV cache of clean
chunks (model.forward_chunk), so training and inference see the same context. The loss
is the MSE between the predicted and true velocity (eps - x0) on the noisy chunks.

Usage (GPU):  python3 train/train.py --out OUTDIR [--steps N --batch B ...]
Tiny CPU debug: python3 train/train.py --out /tmp/t --device cpu --steps 3 --batch 1 \
                 --layers 1 --attn math
Writes OUTDIR/model.safetensors (EMA weights, bf16), OUTDIR/model_raw.safetensors,
OUTDIR/train_metrics.json (config, args, loss log, validation losses, timings) and
OUTDIR/checkpoint.pt (model, EMA, optimizer, both generators, logs). With --resume a
run continues from OUTDIR/checkpoint.pt (same --steps: the learning-rate schedule
spans them), so a training longer than one --time-limit runs as several calls.
"""
import argparse
import copy
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data as qdata  # noqa: E402
import st_io  # noqa: E402
from model import Config, VideoDiT, attention_math, patchify, rope_angles  # noqa: E402


def packed_layout(cfg, n):
    """Chunk list of the packed sequence: (kind, index) with kind 0 = clean, 1 = noisy."""
    return [(0, i) for i in range(n - 1)] + [(1, i) for i in range(n)]


def chunk_mask(layout):
    """bool [nc, nc]: allowed[q, k] for the chunk list."""
    nc = len(layout)
    m = torch.zeros(nc, nc, dtype=torch.bool)
    for a, (qk, qi) in enumerate(layout):
        for b, (kk, ki) in enumerate(layout):
            if qk == 0:
                m[a, b] = kk == 0 and ki <= qi
            else:
                m[a, b] = (kk == 0 and ki < qi) or (kk == 1 and ki == qi)
    return m


def make_attend(kind, cmask, Lc, device):
    """Returns (attend(q, k, v), name) implementing the packed block-causal mask."""
    nc = cmask.shape[0]
    L = nc * Lc
    chunk_of = (torch.arange(L, device=device) // Lc)
    cm = cmask.to(device)
    tok_mask = cm[chunk_of][:, chunk_of]  # [L, L]
    if kind == "math":
        return (lambda q, k, v: attention_math(q, k, v, tok_mask)), "math"
    if kind == "sdpa":
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=tok_mask)), "sdpa"
    if kind == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def mask_mod(b, h, q_idx, kv_idx):
            return cm[q_idx // Lc, kv_idx // Lc]

        bm = create_block_mask(mask_mod, B=None, H=None, Q_LEN=L, KV_LEN=L, device=device)
        fa = torch.compile(flex_attention, dynamic=False)
        return (lambda q, k, v: fa(q, k, v, block_mask=bm)), "flex"
    raise ValueError(kind)


def pick_attention(kind, cmask, Lc, device, heads, head_dim, log):
    if kind != "auto":
        return make_attend(kind, cmask, Lc, device)
    sdpa, _ = make_attend("sdpa", cmask, Lc, device)
    if device.type != "cuda":
        return make_attend("math", cmask, Lc, device)
    L = cmask.shape[0] * Lc
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(2, heads, L, head_dim, device=device, generator=g,
                           dtype=torch.bfloat16, requires_grad=True) for _ in range(3))

    def bench(fn):
        for _ in range(2):
            fn(q, k, v).float().square().mean().backward()
        torch.cuda.synchronize()
        t0 = time.time()
        for _ in range(5):
            fn(q, k, v).float().square().mean().backward()
        torch.cuda.synchronize()
        return (time.time() - t0) / 5

    try:
        flex, _ = make_attend("flex", cmask, Lc, device)
        err = (flex(q, k, v).float() - sdpa(q, k, v).float()).abs().max().item()
        tf, ts = bench(flex), bench(sdpa)
        log(f"attention check: flex vs sdpa max abs diff {err:.3e}; "
            f"fwd+bwd flex {tf*1e3:.2f} ms, sdpa {ts*1e3:.2f} ms")
        if err < 2e-2 and tf < ts:
            return flex, "flex"
    except Exception as e:  # noqa: BLE001 - fall back to the masked SDPA kernel
        log(f"flex attention unavailable: {type(e).__name__}: {e}")
    return sdpa, "sdpa"


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def make_batch(x0_frames, cfg, n, gen, device):
    """x0_frames [B, 15, 64, 64, 3] -> (packed input, t_chunks, target, n) with noise
    drawn from `gen`. Target = eps - x0 on the noisy chunks [B, n*Lc, 48]."""
    B = x0_frames.shape[0]
    Lc = cfg.tokens_per_chunk
    x0 = patchify(x0_frames, cfg)                               # [B, n*Lc, 48]
    t = torch.rand(B, n, device=device, generator=gen)
    eps = torch.randn(x0.shape, device=device, generator=gen)
    tt = t.repeat_interleave(Lc, dim=1)[..., None]
    xt = (1 - tt) * x0 + tt * eps
    inp = torch.cat([x0[:, :(n - 1) * Lc], xt], dim=1)
    t_chunks = torch.cat([torch.zeros(B, n - 1, device=device), t], dim=1)
    return inp, t_chunks, eps - x0


def loss_fn(model, inp, t_chunks, target, cos, sin, attend, n, Lc, amp):
    with torch.autocast(device_type=inp.device.type, dtype=torch.bfloat16, enabled=amp):
        pred = model.forward_train(inp, t_chunks, cos, sin, attend)
    pred = pred[:, (n - 1) * Lc:].float()
    return F.mse_loss(pred, target)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", default=".cache/qvg_frames")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--ema", type=float, default=0.999)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=Config.layers)
    ap.add_argument("--attn", default="auto", choices=["auto", "flex", "sdpa", "math"])
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--val-every", type=int, default=250)
    ap.add_argument("--val-reps", type=int, default=4)
    ap.add_argument("--time-limit", type=float, default=1e9,
                    help="stop early (and say so) after this many seconds of training")
    ap.add_argument("--resume", action="store_true",
                    help="continue from OUTDIR/checkpoint.pt where it exists")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()
    ckpt_path = os.path.join(args.out, "checkpoint.pt")
    resuming = args.resume and os.path.exists(ckpt_path)
    logf = open(os.path.join(args.out, "train_log.txt"), "a" if resuming else "w")

    def log(s):
        print(s, flush=True)
        logf.write(s + "\n")
        logf.flush()

    if args.device == "cpu":
        torch.set_num_threads(os.cpu_count())
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    device = torch.device(args.device)
    amp = device.type == "cuda"
    if amp:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    cfg = Config(layers=args.layers)
    n = qdata.WINDOW // cfg.chunk_frames
    Lc = cfg.tokens_per_chunk
    layout = packed_layout(cfg, n)
    cmask = chunk_mask(layout)
    cs = [rope_angles(cfg, i * cfg.chunk_frames, cfg.chunk_frames) for _, i in layout]
    cos = torch.cat([c for c, _ in cs]).to(device)
    sin = torch.cat([s for _, s in cs]).to(device)

    model = VideoDiT(cfg).to(device)
    nparams = sum(p.numel() for p in model.parameters())
    log(f"config {cfg.to_dict()}  params {nparams}  device {device}  "
        f"{torch.cuda.get_device_name() if amp else 'cpu'}  torch {torch.__version__}")
    log(f"args {vars(args)}")
    ema = copy.deepcopy(model).requires_grad_(False)
    decay = [p for nm, p in model.named_parameters() if p.ndim == 2]
    no_decay = [p for nm, p in model.named_parameters() if p.ndim != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.99), eps=1e-8)
    attend, attn_name = pick_attention(args.attn, cmask, Lc, device, cfg.heads, cfg.head_dim, log)
    log(f"attention kernel: {attn_name}; packed tokens {len(layout) * Lc}")

    clips = qdata.load_clips(args.frames)
    sampler = qdata.TrainSampler(clips, device, args.seed)
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)

    # Fixed validation batches (held-out windows and a fixed train batch), fixed noise.
    held = qdata.heldout_windows(clips)
    val_sets = {
        "heldout": torch.stack([torch.from_numpy(w) for _, _, w in held]).to(device),
        "train": qdata.TrainSampler(clips, device, 999).sample(16),
    }
    val_sets["heldout"] = qdata.to_model(val_sets["heldout"].float())

    @torch.no_grad()
    def validate(m):
        out = {}
        for name, frames in val_sets.items():
            vg = torch.Generator(device=device).manual_seed(4321)
            tot = 0.0
            for rep in range(args.val_reps):  # noise draws per window
                for a in range(0, frames.shape[0], 8):  # mini-batches of 8 windows
                    fr = frames[a:a + 8]
                    inp, tc, tgt = make_batch(fr, cfg, n, vg, device)
                    l = loss_fn(m, inp, tc, tgt, cos, sin, attend, n, Lc, amp).item()
                    tot += l * fr.shape[0] / frames.shape[0]
            out[name] = tot / args.val_reps
        return out

    losses, vals = [], []
    first_step, before_s = 0, 0.0  # steps and training seconds of earlier calls
    if resuming:
        ck = torch.load(ckpt_path, map_location="cpu", weights_only=False)  # generator states stay on the CPU
        if ck["steps"] != args.steps:
            raise SystemExit(f"--resume: the checkpoint was made with --steps {ck['steps']}, not {args.steps}")
        model.load_state_dict(ck["model"])
        ema.load_state_dict(ck["ema"])
        opt.load_state_dict(ck["opt"])
        sampler.gen.set_state(ck["sampler_gen"])
        gen.set_state(ck["gen"])
        losses, vals = ck["losses"], ck["vals"]
        first_step, before_s = ck["step"], ck["train_seconds"]
        log(f"resumed from {ckpt_path} at step {first_step} ({before_s:.0f} s of training before)")
    t_call = time.time()
    t_train = t_call - before_s
    stopped_early = False
    step = first_step
    for step in range(first_step, args.steps):
        if time.time() - t_call > args.time_limit:
            stopped_early = True
            log(f"time limit reached at step {step}")
            break
        for gparam in opt.param_groups:
            gparam["lr"] = lr_at(step, args)
        frames = sampler.sample(args.batch)
        inp, tc, tgt = make_batch(frames, cfg, n, gen, device)
        loss = loss_fn(model, inp, tc, tgt, cos, sin, attend, n, Lc, amp)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        d = min(args.ema, (1 + step) / (10 + step))
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.lerp_(pm, 1 - d)
        if (step + 1) % args.log_every == 0:
            el = time.time() - t_train
            losses.append({"step": step + 1, "loss": loss.item(), "grad_norm": gnorm.item(),
                           "lr": lr_at(step, args), "time_s": el})
            log(f"step {step+1:5d}  loss {loss.item():.4f}  gnorm {gnorm.item():.3f}  "
                f"lr {lr_at(step, args):.2e}  {el:.0f}s  {(step+1)/el:.2f} it/s")
        if (step + 1) % args.val_every == 0 or step + 1 == args.steps:
            v = {"step": step + 1, "ema": validate(ema), "raw": validate(model)}
            vals.append(v)
            log(f"val step {step+1}: ema {v['ema']}  raw {v['raw']}")
    steps_done = step + (0 if stopped_early else 1) if args.steps > first_step else first_step
    train_s = time.time() - t_train
    # A run stopped by the time limit is validated where it stopped, before the checkpoint is
    # written, so that a resumed run's log has that validation too.
    if stopped_early and (not vals or vals[-1]["step"] != steps_done):
        vals.append({"step": steps_done, "ema": validate(ema), "raw": validate(model)})
    torch.save({"steps": args.steps, "step": steps_done, "train_seconds": train_s, "model": model.state_dict(),
                "ema": ema.state_dict(), "opt": opt.state_dict(), "sampler_gen": sampler.gen.get_state(),
                "gen": gen.get_state(), "losses": losses, "vals": vals}, ckpt_path)

    meta = {"config": json.dumps(cfg.to_dict()), "format": "qvg-reference-video-dit-v1",
            "steps": str(steps_done), "seed": str(args.seed)}
    st_io.save({k: v.to(torch.bfloat16) for k, v in ema.state_dict().items()},
               os.path.join(args.out, "model.safetensors"), meta)
    st_io.save({k: v.to(torch.bfloat16) for k, v in model.state_dict().items()},
               os.path.join(args.out, "model_raw.safetensors"), meta)
    metrics = {"config": cfg.to_dict(), "args": vars(args), "params": nparams,
               "attention_kernel": attn_name, "steps_done": steps_done,
               "stopped_early": stopped_early, "train_seconds": train_s,
               "total_seconds": time.time() - t_start,
               "device": torch.cuda.get_device_name() if amp else "cpu",
               "torch": torch.__version__, "loss_log": losses, "val": vals}
    with open(os.path.join(args.out, "train_metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    if amp:
        metrics["max_gpu_memory_gb"] = torch.cuda.max_memory_allocated() / 1e9
        with open(os.path.join(args.out, "train_metrics.json"), "w") as f:
            json.dump(metrics, f, indent=1)
    log(f"done: {steps_done} steps in {train_s:.0f}s; final val {vals[-1] if vals else None}")


if __name__ == "__main__":
    main()

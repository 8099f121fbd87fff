#!/usr/bin/env python3
"""Figures for docs/figures from the outputs of train.py and sample.py.

  loss_curve.png       training loss (raw, and smoothed) and validation loss
                       (held-out windows / fixed train batch; EMA and raw weights)
  contact_sheet.png    per clip (first held-out window): real frames 4..15, the model's
                       continuation from the true context, and from another clip's context
  continuations.gif    real (top) vs generated (bottom), all 5 clips, 15 frames
  psnr_per_frame.png   PSNR of generated frame i against the real frame i, mean over windows

Usage: python3 train/figures.py --train DIR_WITH_train_metrics.json --eval EVAL_DIR --out DIR
"""
import argparse
import json
import os

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--eval", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    tm = json.load(open(os.path.join(args.train, "train_metrics.json")))
    steps = np.array([r["step"] for r in tm["loss_log"]])
    loss = np.array([r["loss"] for r in tm["loss_log"]])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, loss, lw=0.6, alpha=0.4, color="C0", label="train loss (batch)")
    if len(loss) >= 8:
        k = 8
        sm = np.convolve(loss, np.ones(k) / k, mode="valid")
        ax.plot(steps[k - 1:], sm, color="C0", label=f"train loss (mean of {k} logs)")
    vs = [v["step"] for v in tm["val"]]
    for key, c, ls in [("heldout", "C3", "-"), ("train", "C2", "-")]:
        ax.plot(vs, [v["ema"][key] for v in tm["val"]], ls, color=c, marker="o", ms=3,
                label=f"val {key} (EMA)")
        ax.plot(vs, [v["raw"][key] for v in tm["val"]], ":", color=c, marker=".", ms=3,
                label=f"val {key} (raw)")
    ax.set_xlabel("step")
    ax.set_ylabel("velocity MSE")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"qvg reference video DiT: {tm['steps_done']} steps, batch {tm['args']['batch']}, "
                 f"{tm['train_seconds']:.0f} s on {tm['device']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "loss_curve.png"), dpi=80)
    plt.close(fig)

    em = json.load(open(os.path.join(args.eval, "eval_metrics.json")))
    z = np.load(os.path.join(args.eval, "continuations.npz"))
    real, gt, go = z["real"], z["gen_true"], z["gen_other"]
    clips = list(z["clips"])
    other = z["other_index"]
    ctx = real.shape[1] - gt.shape[1]
    firsts = [clips.index(c) for c in dict.fromkeys(clips)]
    pad = 2
    rows = []
    for i in firsts:
        r = real[i, 3:]
        g = np.concatenate([real[i, 3:ctx], gt[i]])
        o = np.concatenate([real[other[i], 3:ctx], go[i]])
        for row in (r, g, o):
            rows.append(np.concatenate([np.pad(f, ((0, 0), (0, pad), (0, 0)), constant_values=255)
                                        for f in row], axis=1))
        rows.append(np.full((6, rows[-1].shape[1], 3), 255, np.uint8))
    sheet = np.concatenate(rows[:-1], axis=0)
    # 256-colour palette keeps the sheet well under 1 MB
    Image.fromarray(sheet).quantize(colors=256, method=Image.MEDIANCUT, dither=Image.NONE).save(
        os.path.join(args.out, "contact_sheet.png"), optimize=True)

    frames = []
    for t in range(real.shape[1]):
        top = np.concatenate([real[i, t] for i in firsts], axis=1)
        bot = np.concatenate([real[i, t] if t < ctx else gt[i, t - ctx] for i in firsts], axis=1)
        f = np.concatenate([top, np.full((2, top.shape[1], 3), 255, np.uint8), bot], axis=0)
        frames.append(Image.fromarray(f))
    frames[0].save(os.path.join(args.out, "continuations.gif"), save_all=True,
                   append_images=frames[1:], duration=200, loop=0, optimize=True)

    pf = em["per_frame_psnr_db"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = np.arange(1, len(pf["true_context"]) + 1)
    ax.plot(x, pf["true_context"], marker="o", label="model, true context")
    ax.plot(x, pf["other_context"], marker="s", label="model, other clip's context")
    ax.plot(x, pf["copy_last_frame"], "--", marker=".", label="copy last context frame")
    ax.set_xlabel("generated frame (after 6 context frames)")
    ax.set_ylabel("PSNR vs real frame (dB)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    m = em["mean_psnr_db"]
    ax.set_title(f"held-out windows (n={em['num_windows']}): true {m['true_context']:.2f} dB, "
                 f"other {m['other_context']:.2f} dB", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "psnr_per_frame.png"), dpi=80)
    plt.close(fig)
    for f in sorted(os.listdir(args.out)):
        print(f, os.path.getsize(os.path.join(args.out, f)))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Decode the real clips in data/clips/ into uint8 frame arrays for training.

Each clip (416x240 H.264, see data/clips/NOTICE.md and scripts/make_clips.sh) is
decoded with the system ffmpeg, center-cropped to 416x234 (16:9) and scaled with
the 'area' filter to 128x72 RGB. Training takes random 64x64 crops of these;
evaluation takes the center crop (rows 4..67, cols 32..95).

Output (default .cache/qvg_frames/, ignored by git):
  <clip>.npy      uint8 [num_frames, 72, 128, 3]
  manifest.json   frame counts, sha256 of each .npy and of each source .mp4,
                  ffmpeg version, and the train / held-out split (see data.py)

Usage: python3 train/prepare_data.py [--clips data/clips] [--out .cache/qvg_frames]
Needs: ffmpeg on PATH, numpy.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data as qdata  # noqa: E402

H, W = qdata.STORE_H, qdata.STORE_W


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def decode(path):
    vf = f"crop=416:234,scale={W}:{H}:flags=area"
    cmd = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-threads", "1",
           "-i", path, "-vf", vf, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"]
    raw = subprocess.run(cmd, check=True, stdout=subprocess.PIPE).stdout
    frames = np.frombuffer(raw, dtype=np.uint8)
    assert frames.size % (H * W * 3) == 0, path
    return frames.reshape(-1, H, W, 3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", default="data/clips")
    ap.add_argument("--out", default=".cache/qvg_frames")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    version = subprocess.run(["ffmpeg", "-version"], check=True, stdout=subprocess.PIPE,
                             text=True).stdout.splitlines()[0]
    manifest = {"ffmpeg": version, "store_hw": [H, W], "clips": {}}
    for name in qdata.ALL_CLIPS:
        src = os.path.join(args.clips, name + ".mp4")
        frames = decode(src)
        dst = os.path.join(args.out, name + ".npy")
        np.save(dst, frames)
        n = frames.shape[0]
        split = qdata.split_point(n)
        manifest["clips"][name] = {
            "frames": n, "train_frames": [0, split], "heldout_frames": [split, n],
            "heldout_windows": qdata.heldout_starts(n) if name in qdata.CLIPS else [],
            "npy_sha256": sha256_file(dst), "mp4_sha256": sha256_file(src)}
        windows = qdata.heldout_starts(n) if name in qdata.CLIPS else "none (train-only clip)"
        print(f"{name}: {n} frames, train [0,{split}), held-out [{split},{n}), windows at {windows}")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()

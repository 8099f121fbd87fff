"""Clips, the train / held-out split, and batch sampling for the reference model.

Frames are stored as uint8 [N, 72, 128, 3] per clip (prepare_data.py). Pixel values
map to model space as x = u8 / 127.5 - 1 (so [-1, 1]).

Split (per clip, N frames):  train = frames [0, S),  held-out = frames [S, N),
with S = floor(0.8 * N). Training windows lie entirely inside [0, S) (whatever the
temporal stride), so no held-out frame is ever seen in training. Held-out
evaluation windows are WINDOW = 15 consecutive frames (stride 1) starting at
S, S + 15, S + 30, ... while they fit, center-cropped to 64x64.
"""
import os

import numpy as np

CLIPS = ["cockatoo", "vtest", "box", "cup", "cityCC0"]  # trained on and evaluated (held-out windows)
TRAIN_ONLY_CLIPS = ["megamind"]   # training frames used; held-out frames kept out of training and evaluation
ALL_CLIPS = CLIPS + TRAIN_ONLY_CLIPS
STORE_H, STORE_W = 72, 128        # stored frame size (16:9)
FRAME = 64                        # model frame size (square)
WINDOW = 15                       # frames per training / evaluation window (5 chunks of 3)
TRAIN_FRACTION = 0.8
STRIDES = (1, 2)                  # temporal strides used for augmentation
CENTER_Y = (STORE_H - FRAME) // 2  # 4
CENTER_X = (STORE_W - FRAME) // 2  # 32


def split_point(n):
    return int(np.floor(TRAIN_FRACTION * n))


def heldout_starts(n):
    s = split_point(n)
    return [int(a) for a in range(s, n - WINDOW + 1, WINDOW)]


def load_clips(folder):
    """Returns {name: uint8 array [N, 72, 128, 3]} of every clip present (ALL_CLIPS;
    the evaluated CLIPS are required, a missing train-only clip is skipped)."""
    out = {}
    for name in ALL_CLIPS:
        path = os.path.join(folder, name + ".npy")
        if name in CLIPS or os.path.exists(path):
            out[name] = np.load(path)
    return out


def heldout_windows(clips):
    """List of (clip name, start frame, uint8 [WINDOW, 64, 64, 3]) center crops."""
    out = []
    for name in CLIPS:
        v = clips[name]
        for a in heldout_starts(v.shape[0]):
            w = v[a:a + WINDOW, CENTER_Y:CENTER_Y + FRAME, CENTER_X:CENTER_X + FRAME]
            out.append((name, a, np.ascontiguousarray(w)))
    return out


def to_model(u8):
    """uint8 [..., H, W, 3] -> float in [-1, 1] (same shape); torch or numpy."""
    return u8 / 127.5 - 1.0


class TrainSampler:
    """Draws random augmented training windows on a torch device.

    Augmentation: clip (of the evaluated and the train-only clips loaded) chosen
    with probability proportional to its number of training frames; temporal stride uniform in STRIDES; start uniform among the
    windows inside the training part; random 64x64 crop of the 72x128 frame;
    horizontal flip with probability 1/2. Uses its own torch.Generator (seeded).
    """

    def __init__(self, clips, device, seed):
        import torch
        self.torch = torch
        self.device = device
        self.names = [n for n in ALL_CLIPS if n in clips]
        self.videos = [torch.from_numpy(clips[n][:split_point(clips[n].shape[0])]).to(device)
                       for n in self.names]
        lengths = torch.tensor([v.shape[0] for v in self.videos], dtype=torch.float64)
        self.probs = lengths / lengths.sum()
        self.gen = torch.Generator(device="cpu")
        self.gen.manual_seed(seed)

    def sample(self, batch):
        """Returns float32 [batch, WINDOW, 64, 64, 3] in [-1, 1] on the device."""
        torch = self.torch
        g = self.gen
        clip_ids = torch.multinomial(self.probs, batch, replacement=True, generator=g)
        strides = torch.tensor(STRIDES)[torch.randint(len(STRIDES), (batch,), generator=g)]
        ys = torch.randint(STORE_H - FRAME + 1, (batch,), generator=g)
        xs = torch.randint(STORE_W - FRAME + 1, (batch,), generator=g)
        flips = torch.rand(batch, generator=g) < 0.5
        u = torch.rand(batch, generator=g, dtype=torch.float64)
        out = []
        for b in range(batch):
            v = self.videos[int(clip_ids[b])]
            s = int(strides[b])
            span = (WINDOW - 1) * s + 1
            start = int(u[b] * (v.shape[0] - span + 1))
            y, x = int(ys[b]), int(xs[b])
            w = v[start:start + span:s, y:y + FRAME, x:x + FRAME]
            if flips[b]:
                w = torch.flip(w, dims=[2])
            out.append(w)
        return to_model(torch.stack(out).float())

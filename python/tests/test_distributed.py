"""Tests of qvg.distributed: ring attention over compressed history shards, and head ranges.

Reference: softmax attention in float64 over every rank's spans decoded on one process (the same
deterministic encodes) plus the rank's extra rows. World size 2 runs two processes with the gloo
backend (on the CPU with the host codecs; on one GPU with the device codecs, the packed shards
staged through host memory as gloo needs); world size 1 runs without a process group. Skipped with
the reason where PyTorch (or, for the GPU cases, a CUDA device) is missing. Several GPUs with NCCL:
python/bench/bench_ring.py under torchrun (docs/BENCHMARKS.md says what ran).
"""
import os
import tempfile
import unittest

import numpy as np

import qvg

CUDA_OK, _ = qvg.cuda_available()
try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import qvg.distributed as qd
    TORCH, TORCH_WHY = True, ""
    TORCH_CUDA = CUDA_OK and torch.cuda.is_available()
except ImportError:
    TORCH, TORCH_WHY, TORCH_CUDA = False, "PyTorch is not installed", False

H, D, TQ, TEXTRA = 2, 64, 48, 32
SPEC = "qvg:centroids=16,iters=3"


def rank_spans(rank):
    """Rank r's spans: r + 1 spans of 96 (r + 1) tokens (shards of different sizes and counts)."""
    g = torch.Generator().manual_seed(1000 + rank)
    n = 96 * (rank + 1)
    return [(torch.randn(1, H, n, D, generator=g), torch.randn(1, H, n, D, generator=g)) for _ in range(rank + 1)]


def rank_query(rank):
    g = torch.Generator().manual_seed(2000 + rank)
    return (torch.randn(1, H, TQ, D, generator=g), torch.randn(1, H, TEXTRA, D, generator=g),
            torch.randn(1, H, TEXTRA, D, generator=g))


def shard_of(rank, device, spec):
    s = qd.HistoryShard(H, D, key=spec, value=spec, device=device)
    for k, v in rank_spans(rank):
        s.add(k.to(device), v.to(device))
    return s


def reference(rank, world, device, spec):
    """float64 attention of rank's queries over every rank's decoded spans and its extra rows."""
    q, ek, ev = rank_query(rank)
    if device != "cpu":  # the ring sees BF16 queries and extra rows
        q, ek, ev = (t.to(torch.bfloat16) for t in (q, ek, ev))
    ks, vs = [ek.double()], [ev.double()]
    for r in range(world):
        s = shard_of(r, device, spec)
        buf, meta = s._packed()
        for k, v in s._decoded(buf, meta, torch.float32):
            ks.append(k.double().cpu())
            vs.append(v.double().cpu())
    q, k, v = q.double(), torch.cat(ks, 2), torch.cat(vs, 2)  # decoded spans: BF16 values on the GPU
    return torch.softmax(q @ k.transpose(-1, -2) / np.sqrt(D), -1) @ v


def ring_output(rank, device, spec, group=None):
    q, ek, ev = rank_query(rank)
    dt = torch.bfloat16 if device != "cpu" else torch.float32
    shard = shard_of(rank, device, spec)
    shard.sync(group)
    out = qd.ring_attention(q.to(device, dt), shard, group=group, extra=(ek.to(device, dt), ev.to(device, dt)))
    return out.double().cpu()


def worker(rank, world, init_file, device, spec, result_dir):
    if device != "cpu":
        torch.cuda.set_device(0)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        out = ring_output(rank, device, spec)
        ref = reference(rank, world, device, spec)
        err = (torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)).item()
        shard = shard_of(rank, device, spec)
        with open(os.path.join(result_dir, f"rank{rank}"), "w") as fh:
            fh.write(f"{err} {shard.nbytes}\n")
    finally:
        dist.destroy_process_group()


# Under scripts/sanitize.sh (a sanitizer runtime preloaded) the spawned ranks run PyTorch's
# uninstrumented gloo threads, where TSan reports races inside libtorch_cpu
# (ProcessGroupGloo::AsyncWork::finishWorkGloo against pthread_cond_destroy): not qvg's code.
SANITIZED = any(rt in os.environ.get("LD_PRELOAD", "") for rt in ("libtsan", "libasan"))


@unittest.skipUnless(TORCH, TORCH_WHY)
@unittest.skipIf(SANITIZED, "a sanitizer runtime is preloaded: it reports races inside PyTorch's gloo threads")
class Ring(unittest.TestCase):
    def run_world(self, world, device, spec):
        """Spawns `world` gloo ranks; returns each rank's (relative error, shard bytes)."""
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(worker, args=(world, os.path.join(tmp, "init"), device, spec, tmp), nprocs=world, join=True)
            out = []
            for r in range(world):
                with open(os.path.join(tmp, f"rank{r}")) as fh:
                    err, nbytes = fh.read().split()
                out.append((float(err), int(nbytes)))
            return out

    def test_world_size_one_is_the_local_attention(self):
        # No process group: the shard's own spans and the extra rows, merged with the online softmax,
        # against float64 attention over their concatenation.
        for spec in (SPEC, "rtn", None):
            with self.subTest(spec=spec):
                out = ring_output(0, "cpu", spec)
                ref = reference(0, 1, "cpu", spec)
                err = (torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)).item()
                self.assertLess(err, 1e-5)  # float32 arithmetic against float64

    def test_gloo_world_size_two_on_the_cpu(self):
        # Each rank's queries attend both ranks' compressed spans, which travel packed: float32 host decode,
        # so the error is float32 rounding (<= 1e-5 relative), not the codec's.
        results = self.run_world(2, "cpu", SPEC)
        for rank, (err, _) in enumerate(results):
            self.assertLess(err, 1e-5, f"rank {rank}")
        # the packed shards are the compressed bytes: ~2-4 bits a value here (16 centroids on short spans)
        raw = [2 * H * D * 2 * sum(k.shape[2] for k, _ in rank_spans(r)) for r in range(2)]
        for (_, nbytes), bf16 in zip(results, raw):
            self.assertLess(nbytes, bf16 / 3)

    @unittest.skipUnless(TORCH and TORCH_CUDA, "no CUDA device (or PyTorch without CUDA)")
    def test_gloo_world_size_two_on_one_gpu(self):
        # The device path: spans encoded and packed on the GPU, unpacked and decoded there; gloo carries
        # the bytes through host memory. BF16 queries and K/V: relative error <= 1e-2 (the bound).
        for spec in (SPEC, None):
            with self.subTest(spec=spec):
                for rank, (err, _) in enumerate(self.run_world(2, "cuda", spec)):
                    self.assertLess(err, 1e-2, f"rank {rank}")

    def test_errors(self):
        shard = qd.HistoryShard(H, D, key=SPEC, value=SPEC, device="cpu")
        k, v = rank_spans(0)[0]
        with self.assertRaises(ValueError):
            shard.add(k[:, :1], v)  # heads
        shard.add(k, v)
        with self.assertRaises(RuntimeError):  # not synced since the last add
            qd.ring_attention(rank_query(0)[0], shard)
        shard.sync()
        with self.assertRaises(ValueError):
            qd.ring_attention(torch.randn(1, H, 4, D + 1), shard)


class HeadRange(unittest.TestCase):
    @unittest.skipUnless(TORCH, TORCH_WHY)
    def test_even_split(self):
        self.assertEqual([qd.head_range(12, r, 4) for r in range(4)], [(0, 3), (3, 3), (6, 3), (9, 3)])
        with self.assertRaises(ValueError):
            qd.head_range(12, 0, 5)
        with self.assertRaises(ValueError):
            qd.head_range(12, 4, 4)


if __name__ == "__main__":
    unittest.main()

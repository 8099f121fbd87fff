"""Tests of the pipeline adapters: qvg.longcat, qvg.hyworldplay, qvg.lingbot (docs/INTEGRATIONS.md).

Each pipeline's attention-with-cache logic is re-implemented here, small, from docs/INTEGRATIONS.md
(LongCat-Video: pre-RoPE condition K/V repeated to the batch, concatenated before the chunk's, its 3-D
RoPE over the whole grid; HY-WorldPlay: post-RoPE frames read by an arbitrary frame selection;
LingBot-World: Self-Forcing's rolling dict read through max_attention_size). With the adapters' "bf16"
codec the attention outputs must equal the reference's bit for bit; with qvg they must differ by no
more than the codec's error. The GPU tests skip where PyTorch or a CUDA device is missing; the index
arithmetic (qvg._plan) is tested everywhere.
"""
import unittest
from unittest import mock

import qvg
from qvg import _plan

from test_torch import TORCH_CUDA, TORCH_WHY, torch  # whether PyTorch and a CUDA device are usable, and why not

F = torch.nn.functional if torch is not None else None


class Plans(unittest.TestCase):
    """qvg._plan: which rows a read takes from where (no torch needed)."""

    def test_cache_batch_mode(self):
        self.assertEqual(_plan.cache_batch_mode(1, 2), "shared")  # LongCat CFG: one cache, two halves
        self.assertEqual(_plan.cache_batch_mode(1, 1), "shared")
        self.assertEqual(_plan.cache_batch_mode(3, 3), "per_sample")
        for bad in ((2, 3), (2, 1), (0, 1), (1, 0), (1.0, 2), (True, 2)):
            with self.assertRaises(ValueError):
                _plan.cache_batch_mode(*bad)
        with self.assertRaisesRegex(ValueError, "holds 2 samples and the query batch has 3"):
            _plan.cache_batch_mode(2, 3)

    def test_check_frames(self):
        self.assertEqual(_plan.check_frames([5, 0, 3], 6), [5, 0, 3])
        self.assertEqual(_plan.check_frames(range(3), 3), [0, 1, 2])
        self.assertEqual(_plan.check_frames([], 0), [])
        with self.assertRaisesRegex(ValueError, "frame 6 is not in the cache"):
            _plan.check_frames([0, 6], 6)
        with self.assertRaisesRegex(ValueError, "frame -1"):
            _plan.check_frames([-1], 6)
        with self.assertRaisesRegex(ValueError, "selected twice"):
            _plan.check_frames([1, 2, 1], 6)
        with self.assertRaisesRegex(ValueError, "must be ints"):
            _plan.check_frames([1.5], 6)
        with self.assertRaisesRegex(ValueError, "holds no frames"):
            _plan.check_frames([0], 0)

    def test_frame_runs_cover_the_selection_in_order(self):
        spans = [(0, 3), (3, 3), (6, 2)]  # frames 0-2, 3-5, 6-7
        runs = _plan.frame_runs([0, 1, 2, 3, 4, 7], spans)
        self.assertEqual(runs, [(0, 0, 3, 0), (1, 0, 2, 3), (2, 1, 1, 5)])
        runs = _plan.frame_runs([5, 4, 6, 7, 0], spans)  # out of order: no merge of 5 and 4
        self.assertEqual(runs, [(1, 2, 1, 0), (1, 1, 1, 1), (2, 0, 2, 2), (0, 0, 1, 4)])
        # property: expanding the runs gives back the selection, for every subset of 8 frames
        for mask in range(1 << 8):
            sel = [f for f in range(8) if mask >> f & 1]
            got = [None] * len(sel)
            for si, b, c, o in _plan.frame_runs(sel, spans):
                for j in range(c):
                    got[o + j] = spans[si][0] + b + j
            self.assertEqual(got, sel)
        with self.assertRaises(ValueError):
            _plan.frame_runs([8], spans)

    def test_attention_window(self):
        self.assertEqual(_plan.attention_window(100, None), (0, 100))
        self.assertEqual(_plan.attention_window(100, 30), (70, 100))
        self.assertEqual(_plan.attention_window(20, 30), (0, 20))
        for bad in (0, -1, 2.0, True):
            with self.assertRaises(ValueError):
                _plan.attention_window(10, bad)

    def test_check_chunk_tokens(self):
        self.assertEqual(_plan.check_chunk_tokens(45, 15), 3)
        for bad in (0, 44, -15):
            with self.assertRaisesRegex(ValueError, "whole number of frames"):
                _plan.check_chunk_tokens(bad, 15)


# ---- LongCat-Video --------------------------------------------------------------------------------

def longcat_rope(q, k, grid):
    """LongCat-Video's 3-D RoPE (docs/INTEGRATIONS.md): head_dim split into time D - 4(D//6), height and
    width 2(D//6) each; per part angles p * 10000^(-2j/n) in float32, each repeated for the two
    channels of an interleaved pair; x * cos + rotate_half(x) * sin in float32, cast back."""
    t, h, w = grid
    d = q.shape[-1]
    parts = [d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6)]
    axes = [torch.arange(n, dtype=torch.float32) for n in (t, h, w)]
    freqs = []
    for axis, n in zip(axes, parts):
        f = 1.0 / (10000 ** (torch.arange(0, n, 2)[: n // 2].float() / n))
        freqs.append(torch.repeat_interleave(axis[:, None] * f[None], 2, dim=1))
    ft = freqs[0][:, None, None].expand(t, h, w, -1)
    fh = freqs[1][None, :, None].expand(t, h, w, -1)
    fw = freqs[2][None, None, :].expand(t, h, w, -1)
    ang = torch.cat([ft, fh, fw], dim=-1).reshape(t * h * w, d).to(q.device)
    cos, sin = ang.cos()[None, None], ang.sin()[None, None]

    def rot(x):
        x = x.float()
        pairs = x.unflatten(-1, (-1, 2))
        half = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
        return x * cos + half * sin

    return rot(q).type_as(q), rot(k).type_as(k)


def longcat_reference(q, k, v, k_cache, v_cache, grid, cond_frames):
    """Attention.forward_with_kv_cache with a BF16 (k, v) entry, as docs/INTEGRATIONS.md states it."""
    b, _, n, _ = q.shape
    if k_cache.shape[0] == 1:
        k_cache, v_cache = k_cache.repeat(b, 1, 1, 1), v_cache.repeat(b, 1, 1, 1)
    k_full = torch.cat([k_cache, k], dim=2)
    v_full = torch.cat([v_cache, v], dim=2)
    q_pad = torch.cat([torch.zeros_like(k_cache), q], dim=2)
    q_pad, k_full = longcat_rope(q_pad, k_full, (grid[0] + cond_frames, grid[1], grid[2]))
    return F.scaled_dot_product_attention(q_pad[:, :, -n:], k_full, v_full)


def longcat_adapter(q, k, v, layer, grid, cond_frames):
    """The same attention with the lines docs/INTEGRATIONS.md changes: K/V from the qvg layer cache."""
    n = q.shape[2]
    k_full, v_full = layer.kv(extra=(k, v))
    q_pad = torch.cat([q.new_zeros(q.shape[0], q.shape[1], layer.tokens, q.shape[3]), q], dim=2)
    q_pad, k_full = longcat_rope(q_pad, k_full, (grid[0] + cond_frames, grid[1], grid[2]))
    # v_full is a view of the cache's buffer; contiguous, as LongCat's attention backends make it, so that
    # SDPA picks the reference's kernel
    return F.scaled_dot_product_attention(q_pad[:, :, -n:], k_full, v_full.contiguous())


def codec_round_trip(codec, x, role, warm_start=None):
    """x [B, H, n, D] (bf16, CUDA) through qvg.DeviceCodec `codec` as the adapters encode it (rows B * H),
    decoded back to bf16 [B, H, n, D]; and the encoded tensor (a later span's warm start)."""
    b, h, n, d = x.shape
    enc = codec.encode(x.reshape(b * h, n, d).contiguous(), role=role, warm_start=warm_start)
    out = torch.empty(b * h, n, d, dtype=torch.bfloat16, device=x.device)
    codec.decode(enc, out=out)
    return out.reshape(b, h, n, d), enc


@unittest.skipUnless(TORCH_CUDA, TORCH_WHY)
class LongCat(unittest.TestCase):
    BLOCKS, H, D = 2, 2, 64
    GRID, COND = (2, 3, 5), 3  # 2 noisy frames of 3 x 5 = 15 tokens (odd), 3 condition frames: 45 tokens

    def cond_dict(self, batch, seed):
        g = torch.Generator().manual_seed(seed)
        nc = self.COND * self.GRID[1] * self.GRID[2]
        return {i: (torch.randn(batch, self.H, nc, self.D, generator=g).to("cuda", torch.bfloat16),
                    torch.randn(batch, self.H, nc, self.D, generator=g).to("cuda", torch.bfloat16))
                for i in range(self.BLOCKS)}

    def run_steps(self, spec, cache_batch, query_batch, steps=3, seed=0, cache=None):
        import qvg.longcat
        cond = self.cond_dict(cache_batch, seed)
        cache = cache or qvg.longcat.LongCatKVCache(self.BLOCKS, self.H, self.D, key=spec, value=spec)
        kv_cache_dict = cache.load(cond)
        n = self.GRID[0] * self.GRID[1] * self.GRID[2]
        ref, ours = [], []
        g = torch.Generator().manual_seed(seed + 100)
        for _ in range(steps):
            for i in range(self.BLOCKS):
                q, k, v = (torch.randn(query_batch, self.H, n, self.D, generator=g).to("cuda", torch.bfloat16)
                           for _ in range(3))
                ref.append(longcat_reference(q, k, v, *cond[i], self.GRID, self.COND))
                ours.append(longcat_adapter(q, k, v, kv_cache_dict.get(i), self.GRID, self.COND))
        return ref, ours, cache

    def test_bf16_codec_gives_the_dict_caches_outputs(self):
        for cache_batch, query_batch in ((1, 1), (1, 2), (2, 2)):
            ref, ours, _ = self.run_steps("bf16", cache_batch, query_batch)
            for j, (a, b) in enumerate(zip(ref, ours)):
                self.assertTrue(torch.equal(a, b), f"cache batch {cache_batch}, query batch {query_batch}, read {j}")

    def test_qvg_error_is_that_of_the_codec(self):
        """The adapter's outputs are the reference's with the condition K/V through the codec (encoded and
        decoded by qvg.DeviceCodec alone): the drop-in adds no error of its own. (Against BF16 the error is
        the codec's on random K/V of 45 tokens, 0.6 rel. L2 on an H100: not a property of the adapter.)"""
        spec = "qvg:centroids=16"
        ref, ours, cache = self.run_steps(spec, 1, 2)
        codec = qvg.DeviceCodec(spec)
        cond = {i: tuple(codec_round_trip(codec, x, role)[0] for x, role in zip(kv, ("key", "value")))
                for i, kv in self.cond_dict(1, 0).items()}
        n = self.GRID[0] * self.GRID[1] * self.GRID[2]
        g = torch.Generator().manual_seed(100)
        j = 0
        for _ in range(3):
            for i in range(self.BLOCKS):
                q, k, v = (torch.randn(2, self.H, n, self.D, generator=g).to("cuda", torch.bfloat16) for _ in range(3))
                want = longcat_reference(q, k, v, *cond[i], self.GRID, self.COND)
                # the same decoded values; 1e-3 leaves room for SDPA picking another kernel for other strides
                diff = ((want.float() - ours[j].float()).norm() / want.float().norm()).item()
                self.assertLess(diff, 1e-3, f"read {j}")
                self.assertGreater(((ref[j].float() - ours[j].float()).norm()).item(), 0.0)  # it was compressed
                j += 1
        self.assertGreater(cache.memory()["ratio"], 2.0)

    def test_a_cfg_batch_reads_one_encoded_copy(self):
        import qvg.longcat
        shared = qvg.longcat.LongCatKVCache(self.BLOCKS, self.H, self.D, key="rtn", value="rtn")
        per = qvg.longcat.LongCatKVCache(self.BLOCKS, self.H, self.D, key="rtn", value="rtn")
        shared.load(self.cond_dict(1, 0))
        per.load(self.cond_dict(2, 0))
        ms, mp = shared.memory(), per.memory()
        self.assertEqual(2 * ms["k"], mp["k"])  # batch 1 held once, whatever the query batch
        self.assertEqual(2 * ms["v"], mp["v"])
        x = torch.randn(2, self.H, 7, self.D, device="cuda", dtype=torch.bfloat16)
        k, v = shared.get(0).kv(extra=(x, x))
        nc = shared.get(0).tokens
        self.assertTrue(torch.equal(k[0, :, :nc], k[1, :, :nc]) and torch.equal(v[0, :, :nc], v[1, :, :nc]))
        hk, hv = (t.clone() for t in shared.get(0).history())
        self.assertEqual(hk.shape, (1, self.H, nc, self.D))
        self.assertTrue(torch.equal(hk.expand(2, -1, -1, -1), k[:, :, :nc]))
        self.assertTrue(torch.equal(x, k[:, :, nc:]))

    def test_a_new_segment_after_reset(self):
        import qvg.longcat
        cache = qvg.longcat.LongCatKVCache(self.BLOCKS, self.H, self.D, key="bf16", value="bf16")
        self.run_steps("bf16", 1, 2, seed=0, cache=cache)
        cache.reset()
        self.assertEqual(len(cache), 0)
        self.assertIsNone(cache.get(0))
        ref, ours, _ = self.run_steps("bf16", 2, 2, seed=7, cache=cache)  # the next segment, another batch
        for a, b in zip(ref, ours):
            self.assertTrue(torch.equal(a, b))

    def test_bad_input(self):
        import qvg.longcat
        cache = qvg.longcat.LongCatKVCache(self.BLOCKS, self.H, self.D, key="bf16", value="bf16")
        k = torch.zeros(1, self.H, 10, self.D, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "heads=2"):
            cache.load({0: (k.transpose(1, 2), k.transpose(1, 2))})  # [B, N, H, D]: the wrong layout
        with self.assertRaisesRegex(ValueError, "one shape"):
            cache.load({0: (k, k[:, :, :9])})
        with self.assertRaisesRegex(ValueError, "block index"):
            cache.load({self.BLOCKS: (k, k)})
        with self.assertRaises(TypeError):
            cache.load([(k, k)])
        self.assertEqual(len(cache), 0)  # nothing loaded by a refused call
        cache.load({0: (k.repeat(2, 1, 1, 1), k.repeat(2, 1, 1, 1))})
        x = torch.zeros(3, self.H, 5, self.D, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "holds 2 samples and the query batch has 3"):
            cache.get(0).kv(extra=(x, x))
        with self.assertRaisesRegex(ValueError, "dtype"):
            cache.get(0).kv(dtype=torch.float16)
        with self.assertRaises(ValueError):
            qvg.longcat.LongCatKVCache(0, self.H, self.D)


@unittest.skipUnless(TORCH_CUDA, TORCH_WHY)
class LongCatOffload(unittest.TestCase):
    """LongCatKVCache(offload=True) against the GPU-resident cache of the same codec: the same bytes at every
    read, whatever the order of the reads (the staging buffers' prefetch guesses the next block)."""
    BLOCKS, H, D, NC = 4, 2, 64, 45  # 45 condition tokens (3 frames of 3 x 5)
    SPECS = ("qvg:centroids=16", "rtn")
    ORDERS = {"in order, three steps": list(range(4)) * 3, "out of order": [2, 0, 3, 3, 1, 0, 2, 1, 3],
              "backwards": [3, 2, 1, 0, 3]}

    def cond_dict(self, batch, seed, blocks=None, tokens=None):
        g = torch.Generator().manual_seed(seed)
        shape = (batch, self.H, tokens or self.NC, self.D)
        return {i: (torch.randn(shape, generator=g).to("cuda", torch.bfloat16),
                    torch.randn(shape, generator=g).to("cuda", torch.bfloat16))
                for i in (range(self.BLOCKS) if blocks is None else blocks)}

    def caches(self, spec, **kw):
        """(GPU-resident cache, offloaded cache) of one codec."""
        import qvg.longcat
        return tuple(qvg.longcat.LongCatKVCache(self.BLOCKS, self.H, self.D, key=spec, value=spec, offload=off, **kw)
                     for off in (False, True))

    def reads(self, cache, order, query_batch, history=False, seed=5):
        """kv(extra=...) of each block of `order` (then history() with history=True), copied out of the
        reused buffers; the extra K/V of the j-th read are the same for every cache."""
        g = torch.Generator().manual_seed(seed)
        out = []
        for i in order:
            x = torch.randn(2, query_batch, self.H, 7, self.D, generator=g).to("cuda", torch.bfloat16)
            out.append(tuple(t.clone() for t in cache.get(i).kv(extra=(x[0], x[1]))))
            if history:
                out.append(tuple(t.clone() for t in cache.get(i).history()))
        return out

    def assert_same_reads(self, a, b, what):
        self.assertEqual(len(a), len(b), what)
        for j, ((ka, va), (kb, vb)) in enumerate(zip(a, b)):
            self.assertTrue(torch.equal(ka, kb) and torch.equal(va, vb), f"{what}: read {j}")

    def entry_bytes(self, cache, block):
        """Bytes one read of `block` copies to the GPU: its packed K, padding to ALIGN, its packed V."""
        from qvg import _offload
        k, v = cache.get(block).nbytes
        return -(-k // _offload.ALIGN) * _offload.ALIGN + v

    def test_offloaded_reads_equal_the_resident_reads(self):
        for spec in self.SPECS:
            res, off = self.caches(spec)
            cond = self.cond_dict(1, 0)
            res.load(cond)
            off.load(cond)
            for name, order in self.ORDERS.items():
                for history in (False, True):
                    self.assert_same_reads(self.reads(res, order, 2, history), self.reads(off, order, 2, history),
                                           f"{spec}, {name}, history {history}")
            a = self.reads(off, [0, 1], 1)
            self.assertFalse(torch.equal(a[0][0], a[1][0]))  # each block reads its own bytes

    def test_a_cfg_batch_reads_one_offloaded_copy(self):
        res1, off1 = self.caches("rtn")
        res2, off2 = self.caches("rtn")
        for c in (res1, off1):
            c.load(self.cond_dict(1, 3))
        for c in (res2, off2):
            c.load(self.cond_dict(2, 3))
        m1, m2 = off1.memory(), off2.memory()
        self.assertEqual(2 * m1["k"], m2["k"])  # batch 1 held once, whatever the query batch
        self.assertLess(m1["host_used"], m2["host_used"])
        order = self.ORDERS["out of order"]
        self.assert_same_reads(self.reads(res1, order, 2), self.reads(off1, order, 2), "cache batch 1, query batch 2")
        self.assert_same_reads(self.reads(res2, order, 2), self.reads(off2, order, 2), "cache batch 2, query batch 2")
        k, v = self.reads(off1, [1], 2)[0]
        self.assertTrue(torch.equal(k[0, :, :self.NC], k[1, :, :self.NC]) and torch.equal(v[0, :, :self.NC],
                                                                                        v[1, :, :self.NC]))

    def test_memory_report(self):
        from qvg import _offload
        res, off = self.caches("qvg:centroids=16")
        cond = self.cond_dict(1, 0)
        res.load(cond)
        off.load(cond)
        mr, mo = res.memory(), off.memory()
        for key in ("k", "v", "bf16", "ratio"):
            self.assertEqual(mr[key], mo[key], key)
        self.assertEqual(mr["on_gpu"], mr["k"] + mr["v"])
        self.assertEqual((mr["host_pinned"], mr["host_used"], mr["staging"]), (0, 0, 0))
        self.assertEqual(mo["on_gpu"], 0)
        entry = self.entry_bytes(off, 0)
        self.assertEqual(mo["host_used"], (self.BLOCKS - 1) * -(-entry // _offload.ALIGN) * _offload.ALIGN + entry)
        self.assertGreaterEqual(mo["host_pinned"], mo["host_used"])
        self.assertEqual(mo["staging"], 0)  # nothing read yet
        self.assertEqual(off.h2d_bytes, 0)
        self.reads(off, range(self.BLOCKS), 1)  # one denoising step: the blocks once, and block 0 prefetched
        self.assertEqual(off.memory()["staging"], 2 * entry)
        self.assertEqual(off.h2d_bytes, (self.BLOCKS + 1) * entry)
        self.reads(off, range(self.BLOCKS), 1)  # the next step: each block's bytes cross once
        self.assertEqual(off.h2d_bytes, (2 * self.BLOCKS + 1) * entry)
        self.assertLess(self.BLOCKS * entry, mo["bf16"])  # per step: fewer bytes than BF16 offload moves
        self.assertEqual(res.h2d_bytes, 0)

    def test_a_new_segment_after_reset(self):
        for warm_start in (True, False):
            res, off = self.caches("qvg:centroids=16", warm_start=warm_start)
            for c in (res, off):
                c.load(self.cond_dict(1, 0))
            self.reads(off, range(self.BLOCKS), 2)
            old_res, old_off = res.get(1), off.get(1)
            for c in (res, off):
                c.reset()
            self.assertEqual((len(off), off.memory()["k"]), (0, 0))
            self.assertIsNone(off.get(0))
            self.assertEqual(off.memory()["host_pinned"] > 0, warm_start)  # the warm start's bytes stay pinned
            # the next segment: blocks 1 and 3 only, warm-started (warm_start=True) from the packed bytes
            for c in (res, off):
                c.load(self.cond_dict(1, 9, blocks=(1, 3)))
            self.assertEqual(sorted(off.keys()), [1, 3])
            order = [1, 3, 3, 1, 1, 3]
            self.assert_same_reads(self.reads(res, order, 2), self.reads(off, order, 2), f"warm {warm_start}: seg 2")
            # a layer of the old segment still reads the old segment
            self.assert_same_reads(self.reads_of(old_res), self.reads_of(old_off), "old layer")
            # block 0 again (warm-started from the first segment's), then one block of another batch and
            # token count (no warm start: the shape differs)
            for blocks, batch, tokens in (((0, 3), 1, self.NC), ((2,), 2, 33)):
                for c in (res, off):
                    c.load(self.cond_dict(batch, 11, blocks=blocks, tokens=tokens))
                order = list(blocks) * 2
                self.assert_same_reads(self.reads(res, order, 2), self.reads(off, order, 2),
                                       f"warm {warm_start}: blocks {blocks}")

    @staticmethod
    def reads_of(layer):
        return [tuple(t.clone() for t in layer.kv())]

    def test_bad_input(self):
        import qvg.longcat
        from qvg import _offload
        for key, value in (("bf16", "qvg"), ("qvg", "bf16"), ("kivi", "kivi")):
            with self.assertRaisesRegex(ValueError, "no packed form"):
                qvg.longcat.LongCatKVCache(1, self.H, self.D, key=key, value=value, offload=True)
        with self.assertRaisesRegex(ValueError, "offload must be True or False"):
            qvg.longcat.LongCatKVCache(1, self.H, self.D, offload="yes")
        res, off = self.caches("rtn")
        cond = self.cond_dict(1, 0)
        failure = RuntimeError("CUDA error: out of memory")
        with mock.patch.object(_offload, "pinned_bytes", side_effect=failure):
            with self.assertRaisesRegex(MemoryError, "pinning .* bytes of host memory failed"):
                off.load(cond)
        self.assertEqual(len(off), 0)  # nothing loaded by the failed call
        res.load(cond)
        off.load(cond)  # pinning works again
        self.assert_same_reads(self.reads(res, [0, 2], 1), self.reads(off, [0, 2], 1), "after a failed load")
        x = torch.zeros(3, self.H, 5, self.D, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "holds 2 samples and the query batch has 3"):
            off.load(self.cond_dict(2, 0)).get(0).kv(extra=(x, x))


@unittest.skipUnless(torch is not None, "PyTorch is not installed")
class PinnedArenaLayout(unittest.TestCase):
    """qvg._offload.PinnedArena: byte ranges over power-of-two slabs (host tensors stand in for pinned
    ones, so no GPU is needed)."""

    def test_ranges_cover_distinct_bytes_over_slabs(self):
        from qvg import _offload
        with mock.patch.object(_offload, "pinned_bytes", lambda n: torch.zeros(n, dtype=torch.uint8)):
            for slab in (1 << 10, 1 << 12, 1 << 26):
                arena = _offload.PinnedArena(slab)
                g = torch.Generator().manual_seed(slab)
                ranges = []
                for _ in range(100):
                    n = int(torch.randint(1, 5000, (1,), generator=g))
                    start = arena.alloc(n)
                    self.assertEqual(start % _offload.ALIGN, 0)
                    self.assertGreaterEqual(start, ranges[-1][0] + ranges[-1][1] if ranges else 0)
                    ranges.append((start, n))
                sizes = [s.numel() for s in arena._slabs]
                self.assertTrue(all(z & (z - 1) == 0 and z <= slab for z in sizes), sizes)
                self.assertLess(arena.pinned - arena.size, max(sizes))  # at most one slab partly unused
                for j, (start, n) in enumerate(ranges):
                    pieces = arena.pieces(start, n)
                    self.assertEqual([off for off, _ in pieces],
                                     [sum(v.numel() for _, v in pieces[:i]) for i in range(len(pieces))])
                    self.assertEqual(sum(v.numel() for _, v in pieces), n)
                    for _, view in pieces:
                        view.fill_(j % 251)
                for j, (start, n) in enumerate(ranges):
                    for _, view in arena.pieces(start, n):
                        self.assertTrue(bool((view == j % 251).all()), f"range {j}")


# ---- HY-WorldPlay ---------------------------------------------------------------------------------

@unittest.skipUnless(TORCH_CUDA, TORCH_WHY)
class HYWorldPlay(unittest.TestCase):
    BLOCKS, H, D, FT, BATCH = 2, 2, 64, 15, 2  # 15 tokens a frame; batch 2 (RoPE and ProPE keys stacked)

    def run_chunks(self, spec, chunks=5, frames_per_chunk=2, frames_per_span=3, select=None, reference_frames=None):
        """Appends chunks of frames to a FrameKVCache and to a BF16 list of frames (the reference), and
        attends a new chunk to the frames `select(chunk index, frames held)` chooses, after each append.
        reference_frames(block, frames): called after each append with the block's reference frames (a
        list of (k, v) it may replace in place), e.g. codec_spans."""
        import qvg.hyworldplay
        cache = qvg.hyworldplay.FrameKVCache(self.BLOCKS, self.H, self.D, frame_tokens=self.FT, batch=self.BATCH,
                                             key=spec, value=spec, frames_per_span=frames_per_span)
        frames = [[] for _ in range(self.BLOCKS)]  # reference: per block, a list of (k, v) frames
        g = torch.Generator().manual_seed(1)
        t = frames_per_chunk * self.FT
        ref, ours = [], []
        for c in range(chunks):
            for blk in range(self.BLOCKS):
                q, k, v = (torch.randn(self.BATCH, self.H, t, self.D, generator=g).to("cuda", torch.bfloat16)
                           for _ in range(3))
                held = len(frames[blk])
                sel = select(c, held) if select else list(range(held))
                rk = torch.cat([frames[blk][f][0] for f in sel] + [k], dim=2)
                rv = torch.cat([frames[blk][f][1] for f in sel] + [v], dim=2)
                ref.append(F.scaled_dot_product_attention(q, rk, rv))
                ok, ov = cache.kv(blk, frames=sel, extra=(k, v))  # views of a buffer: contiguous, as the reference
                ours.append(F.scaled_dot_product_attention(q, ok.contiguous(), ov.contiguous()))
                cache.append(blk, k, v)  # the chunk's clean K/V join the history
                for f in range(frames_per_chunk):
                    frames[blk].append((k[:, :, f * self.FT:(f + 1) * self.FT], v[:, :, f * self.FT:(f + 1) * self.FT]))
                if reference_frames:
                    reference_frames(blk, frames[blk])
        return ref, ours, cache

    def codec_spans(self, spec, frames_per_span=3):
        """A reference_frames hook: each completed span of frames_per_span frames replaced by its round trip
        through qvg.DeviceCodec(spec), warm-started from the block's previous span (as the cache encodes)."""
        codec = qvg.DeviceCodec(spec)
        encoded = [0] * self.BLOCKS  # frames of each block already replaced by their decoded values
        warm = [(None, None)] * self.BLOCKS

        def hook(blk, frames):
            while len(frames) - encoded[blk] >= frames_per_span:
                span = range(encoded[blk], encoded[blk] + frames_per_span)
                rows = [torch.cat([frames[f][i] for f in span], dim=2) for i in (0, 1)]
                (dk, ek), (dv, ev) = (codec_round_trip(codec, x, role, w)
                                      for x, role, w in zip(rows, ("key", "value"), warm[blk]))
                warm[blk] = (ek, ev)
                for j, f in enumerate(span):
                    part = slice(j * self.FT, (j + 1) * self.FT)
                    frames[f] = (dk[:, :, part], dv[:, :, part])
                encoded[blk] += frames_per_span
        return hook

    @staticmethod
    def memory_selection(c, held):
        """Like select_aligned_memory_frames: the first 2 frames, an older clip, the recent frames."""
        if held <= 4:
            return list(range(held))
        return sorted(set([0, 1] + [held // 2] + list(range(held - 3, held))))

    def test_bf16_codec_gives_the_reference_outputs(self):
        for select in (None, self.memory_selection, lambda c, held: list(range(held))[::-1]):
            ref, ours, _ = self.run_chunks("bf16", select=select)
            for j, (a, b) in enumerate(zip(ref, ours)):
                self.assertTrue(torch.equal(a, b), f"read {j}")

    def test_qvg_error_is_that_of_the_codec(self):
        """The adapter's outputs are those of attention over frames whose completed spans went through the
        codec alone (qvg.DeviceCodec, each span warm-started from the block's previous one, as the cache
        does): the drop-in adds no error of its own."""
        spec = "qvg:centroids=16"
        ref, ours, cache = self.run_chunks(spec, select=self.memory_selection)
        want, _, _ = self.run_chunks(spec, select=self.memory_selection, reference_frames=self.codec_spans(spec))
        errs = [((a.float() - b.float()).norm() / a.float().norm()).item() for a, b in zip(ref, ours)]
        self.assertEqual(max(errs[:2 * self.BLOCKS]), 0.0)  # chunks 0 and 1 read no encoded span yet
        self.assertGreater(max(errs), 0.0)
        for j, (a, b) in enumerate(zip(want, ours)):
            # the same decoded values; 1e-3 leaves room for SDPA picking another kernel for other strides
            self.assertLess(((a.float() - b.float()).norm() / a.float().norm()).item(), 1e-3, f"read {j}")
        m = cache.memory()
        self.assertEqual(m["frames"], self.BLOCKS * 10)
        self.assertEqual(m["spans"], self.BLOCKS * 3)  # 10 frames: 3 spans of 3, 1 frame in BF16
        # Spans of 3 frames x 15 tokens with 16 centroids of 64 channels a head: the centroids cost about
        # what the codes do, so the ratio is well below the long-span figures (1.83 measured on an H100).
        self.assertGreater(m["ratio"], 1.5)

    def test_a_selection_reads_the_frames_of_a_full_read(self):
        ref, ours, cache = self.run_chunks("rtn", chunks=4)
        k_all, v_all = (t.clone() for t in cache.kv(0))
        sel = [6, 2, 3, 7, 0]
        k, v = cache.kv(0, frames=sel)
        want = torch.cat([k_all[:, :, f * self.FT:(f + 1) * self.FT] for f in sel], dim=2)
        self.assertTrue(torch.equal(k, want))

    def test_reset_starts_a_new_video(self):
        _, _, cache = self.run_chunks("bf16", chunks=2)
        cache.reset()
        self.assertEqual(cache.frames(0), 0)
        self.assertEqual(cache.memory()["frames"], 0)
        with self.assertRaisesRegex(ValueError, "nothing to read"):
            cache.kv(0)

    def test_bad_input(self):
        import qvg.hyworldplay
        cache = qvg.hyworldplay.FrameKVCache(1, self.H, self.D, frame_tokens=self.FT, batch=self.BATCH, key="bf16",
                                             value="bf16")
        x = torch.zeros(self.BATCH, self.H, 2 * self.FT, self.D, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "whole number of frames"):
            cache.append(0, x[:, :, :-1], x[:, :, :-1])
        with self.assertRaisesRegex(ValueError, "batch 1"):
            cache.append(0, x[:1], x[:1])
        with self.assertRaisesRegex(ValueError, r"heads=2"):
            cache.append(0, x.transpose(1, 2), x.transpose(1, 2))
        with self.assertRaisesRegex(ValueError, "block"):
            cache.append(1, x, x)
        with self.assertRaises(TypeError):
            cache.append(0, x.cpu().numpy(), x)
        self.assertEqual(cache.frames(0), 0)
        cache.append(0, x, x)
        with self.assertRaisesRegex(ValueError, "frame 2 is not in the cache"):
            cache.kv(0, frames=[0, 2])
        with self.assertRaisesRegex(ValueError, "twice"):
            cache.kv(0, frames=[1, 1])


# ---- LingBot-World --------------------------------------------------------------------------------

@unittest.skipUnless(TORCH_CUDA, TORCH_WHY)
class LingBotWorld(unittest.TestCase):
    BLOCKS, H, D, FS, FPC = 2, 2, 64, 15, 3  # frames of 15 tokens, chunks of 3 frames (LingBot-World's)

    def generate(self, spec, chunks, local_attn_size, sink_size, max_attention_size, keep_recent=0, steps=2,
                 zero_copy_reads=False):
        import qvg.lingbot
        from test_torch import TinyCausalStack, bf16_dicts, dict_update
        torch.manual_seed(0)
        stack = TinyCausalStack(self.BLOCKS, self.H, self.D)
        t = self.FS * self.FPC
        size = (local_attn_size if local_attn_size != -1 else chunks * self.FPC) * self.FS
        dicts = bf16_dicts(self.BLOCKS, size, self.H, self.D)

        def ref_update(d, k, v, st):  # CausalWanSelfAttention: write / roll, then read the last rows
            ka, va = dict_update(d, k, v, st, sink_size * self.FS, size)
            lo, hi = _plan.attention_window(ka.shape[1], max_attention_size)
            return ka[:, lo:hi], va[:, lo:hi]

        ours = qvg.lingbot.LingBotWorldKVCache(self.BLOCKS, self.H, self.D, frame_seqlen=self.FS,
                                               frames_per_chunk=self.FPC, local_attn_size=local_attn_size,
                                               sink_size=sink_size, max_attention_size=max_attention_size,
                                               key=spec, value=spec, quant_factor=1, keep_recent=keep_recent,
                                               zero_copy_reads=zero_copy_reads)
        ref_out, our_out = [], []
        for c in range(chunks):
            for _ in range(steps + 1):
                x = torch.randn(1, t, self.H * self.D, device="cuda", dtype=torch.bfloat16)
                ref_out.append(stack(x, dicts, c * t, ref_update))
                our_out.append(stack(x, ours, c * t, lambda b, k, v, st: b.update(k, v, st)))
        return ref_out, our_out, ours

    def test_bf16_codec_gives_the_dict_caches_outputs(self):
        # a sink of one chunk, a window of 4 chunks; max_attention_size below the buffer drops the sink
        for local_attn_size, sink_size, m in ((-1, 0, None), (12, 3, None), (12, 3, 8 * self.FS), (12, 3, 100)):
            ref, ours, _ = self.generate("bf16", 7, local_attn_size, sink_size, m)
            for i, (a, b) in enumerate(zip(ref, ours)):
                self.assertTrue(torch.equal(a, b), f"pass {i}, local_attn_size {local_attn_size}, sink {sink_size}, "
                                                   f"max_attention_size {m}")

    def test_qvg_error_is_that_of_the_codec(self):
        ref, ours, cache = self.generate("qvg:centroids=16", 6, 12, 3, None, keep_recent=1)
        err = max(((a.float() - b.float()).norm() / a.float().norm()).item() for a, b in zip(ref, ours))
        self.assertGreater(err, 0.0)
        self.assertLess(err, 0.2)
        self.assertGreater(cache.memory()["spans"], 0)

    def test_zero_copy_reads_give_the_same_outputs(self):
        # zero_copy_reads=True (the history's BF16 chunks read in place): the same outputs, bit for bit, with
        # keep_recent, a sink, a window and max_attention_size (the same seed, so the same inputs)
        for local_attn_size, sink_size, m, keep in ((-1, 0, None, 0), (12, 3, 8 * self.FS, 1)):
            _, plain, _ = self.generate("qvg:centroids=16", 6, local_attn_size, sink_size, m, keep_recent=keep)
            _, zc, cache = self.generate("qvg:centroids=16", 6, local_attn_size, sink_size, m, keep_recent=keep,
                                         zero_copy_reads=True)
            for i, (a, b) in enumerate(zip(plain, zc)):
                self.assertTrue(torch.equal(a, b), f"pass {i}, local_attn_size {local_attn_size}, keep_recent {keep}")
            self.assertIn("views", cache.memory())

    def test_bad_input(self):
        import qvg.lingbot
        for bad in (0, -5, 2.5):
            with self.assertRaisesRegex(ValueError, "max_attention_size"):
                qvg.lingbot.LingBotWorldKVCache(1, self.H, self.D, frame_seqlen=self.FS, max_attention_size=bad)
        with self.assertRaisesRegex(ValueError, "sink_size"):
            qvg.lingbot.LingBotWorldKVCache(1, self.H, self.D, frame_seqlen=self.FS, sink_size=4)


if __name__ == "__main__":
    unittest.main()

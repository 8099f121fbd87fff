"""Tests of qvg.DeviceKVCache and qvg.torch (the PyTorch cache and the Self-Forcing adapter).

References: qvg.StreamingKVCache (the C++ host cache: kv() must equal its read() bit for bit in
float32, and its BF16 rounding in bfloat16), a torch implementation of Wan's 3-D RoPE written from
its formula here, and a BF16 dict cache with Self-Forcing's write / roll / window semantics written
here. The GPU tests skip with the reason where PyTorch or a CUDA device is missing; the checks that
need neither run everywhere.
"""
import gc
import unittest

import numpy as np

import qvg

CUDA_OK, CUDA_WHY = qvg.cuda_available()
try:
    import torch
    import torch.nn.functional as F
    TORCH_CUDA = CUDA_OK and torch.cuda.is_available()
    TORCH_WHY = "" if TORCH_CUDA else (CUDA_WHY or "torch.cuda.is_available() is False")
except ImportError:
    torch, TORCH_CUDA, TORCH_WHY = None, False, "PyTorch is not installed"


def blobs(heads, tokens, dim, k, seed, dir_seed, levels=1):
    """Tokens near one of k directions per level (each level 6x smaller): k-means assignments
    without near-ties, so the GPU's fixed-iteration k-means gives the CPU reference's bytes."""
    dirs = np.random.default_rng(dir_seed).standard_normal((heads, levels, k, dim)).astype(np.float32)
    rng = np.random.default_rng(seed)
    x = 0.002 * rng.standard_normal((heads, tokens, dim)).astype(np.float32)
    for h in range(heads):
        scale = 8.0
        for lv in range(levels):
            x[h] += scale * dirs[h, lv, rng.integers(0, k, tokens)]
            scale /= 6.0
    return x.astype(np.float32)


def wan_positions(first_frame, frames, height, width):
    f, y, x = np.meshgrid(np.arange(first_frame, first_frame + frames), np.arange(height), np.arange(width),
                          indexing="ij")
    return np.stack([f, y, x], axis=-1).reshape(-1, 3).astype(np.int32)


class WithoutTheGpu(unittest.TestCase):
    def test_device_cache_refuses_without_a_device(self):
        if CUDA_OK:
            self.skipTest("a CUDA device is usable here")
        with self.assertRaises(ValueError) as cm:
            qvg.DeviceKVCache(1, 2, 64)
        self.assertTrue("CUDA" in str(cm.exception) or "device" in str(cm.exception), str(cm.exception))

    def test_empty_cache_without_a_device_releases_nothing(self):
        if CUDA_OK:
            self.skipTest("a CUDA device is usable here")
        self.assertEqual(qvg.empty_cache(), 0)

    def test_the_package_exports_the_extension(self):
        for name in ("Codec", "StreamingKVCache", "DeviceKVCache", "DeviceCodec", "presets", "Error", "empty_cache"):
            self.assertTrue(hasattr(qvg, name), name)
        self.assertTrue(qvg.__version__)


@unittest.skipUnless(TORCH_CUDA, TORCH_WHY)
class TorchCache(unittest.TestCase):
    H, D, GH, GW, FRAMES = 2, 64, 4, 8, 2  # chunks of 2 frames of a 4 x 8 grid: 64 tokens
    T = FRAMES * GH * GW

    def both(self, key, value, rope, chunks, layout="bhtd", **policy):
        """The same chunks into qvg.StreamingKVCache and qvg.torch.KVCache; yields after each append."""
        import qvg.torch
        kw = dict(key=key, value=value, chunk_tokens=self.T, rope=rope, **policy)
        ref = qvg.StreamingKVCache(2, self.H, self.D, **kw)
        dev = qvg.torch.KVCache(2, self.H, self.D, layout=layout, **kw)
        for i in range(chunks):
            k = blobs(self.H, self.T, self.D, 8, seed=10 + i, dir_seed=77)
            v = blobs(self.H, self.T, self.D, 8, seed=50 + i, dir_seed=78)
            pos = wan_positions(i * self.FRAMES, self.FRAMES, self.GH, self.GW)
            ref.append(1, k, v, positions=pos if rope == "3d" else None)
            kt, vt = torch.from_numpy(k).cuda()[None], torch.from_numpy(v).cuda()[None]
            if layout == "bthd":
                kt, vt = kt.transpose(1, 2), vt.transpose(1, 2)  # strided views: the cache reads them as they are
            dev.append(1, kt, vt, frame=i * self.FRAMES, grid=(self.GH, self.GW))
            yield ref, dev

    def test_kv_equals_the_host_cache_read(self):
        # BF16 centroids in both layouts; FP8 centroids (keys) beside BF16 ones (values) in one; code=cq.
        cases = [("qvg:centroids=8,iters=3,tol=0",) * 2 + (layout,) for layout in ("bhtd", "bthd")]
        cases.append(("qvg:centroids=8,iters=3,tol=0,centroid_format=fp8", "qvg:centroids=8,iters=3,tol=0", "bhtd"))
        # code=cq: encoded and decoded on the device (the CPU reference's bytes).
        cases.append(("qvg:code=cq,centroids=8,iters=3,tol=0,cq_dim=4,cq_codewords=16,centroid_format=fp8",
                      "qvg:code=cq,centroids=8,iters=3,tol=0", "bthd"))
        for kspec, vspec, layout in cases:
            for ref, dev in self.both(kspec, vspec, "3d", 7, layout=layout, quant_factor=2, sink=1, window_chunks=4):
                rk, rv = ref.read(1)
                for dtype in (torch.float32, torch.bfloat16):
                    k, v = dev.kv(1, dtype=dtype)
                    if layout == "bthd":
                        k, v = k.transpose(1, 2), v.transpose(1, 2)
                    wk = torch.from_numpy(rk)[None].to(dtype)  # BF16: rounded to nearest even
                    wv = torch.from_numpy(rv)[None].to(dtype)
                    self.assertTrue(torch.equal(k.cpu(), wk), f"{kspec} {layout} {dtype} keys")
                    self.assertTrue(torch.equal(v.cpu(), wv), f"{vspec} {layout} {dtype} values")
                m, mr = dev.memory(1), ref.memory(1)
                for key in ("k_spans", "v_spans", "k_tail", "v_tail", "warm_start", "tokens_live", "spans"):
                    self.assertEqual(m[key], mr[key], key)

    def test_empty_cache_returns_a_dropped_caches_memory(self):
        # The stream-ordered pool keeps what a dropped cache freed; qvg.empty_cache() hands it back to
        # the driver (the device's free memory grows), and a second call finds nothing.
        for _, dev in self.both("qvg:centroids=8", "qvg:centroids=8", "none", 4, quant_factor=2):
            pass
        del dev, _
        gc.collect()  # a KVCache and its blocks may form reference cycles: freed by the collector
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]
        released = qvg.empty_cache()
        self.assertGreater(released, 0)
        self.assertGreaterEqual(torch.cuda.mem_get_info()[0], free_before + released)
        self.assertEqual(qvg.empty_cache(), 0)

    def test_head_shards_read_those_heads_of_one_cache(self):
        # Ulysses: two caches of 2 heads each (first_head 0 and 2) read, bit for bit, the heads of a
        # 4-head cache after every append (k-means++ and warm-started spans, 3-D RoPE on read).
        import qvg.torch
        kw = dict(key="qvg:iters=3", value="qvg-pro:iters=2", chunk_tokens=self.T, rope="3d", quant_factor=2)
        whole = qvg.torch.KVCache(1, 4, self.D, layout="bhtd", **kw)
        shards = [qvg.torch.KVCache(1, 2, self.D, layout="bhtd", first_head=f, **kw) for f in (0, 2)]
        for i in range(5):
            k = torch.from_numpy(blobs(4, self.T, self.D, 8, seed=10 + i, dir_seed=77)).cuda()[None]
            v = torch.from_numpy(blobs(4, self.T, self.D, 8, seed=50 + i, dir_seed=78)).cuda()[None]
            whole.append(0, k, v, frame=i * self.FRAMES, grid=(self.GH, self.GW))
            for f, c in zip((0, 2), shards):
                c.append(0, k[:, f:f + 2].contiguous(), v[:, f:f + 2].contiguous(), frame=i * self.FRAMES,
                         grid=(self.GH, self.GW))
            wk, wv = (t.clone() for t in whole.kv(0))
            for f, c in zip((0, 2), shards):
                sk, sv = c.kv(0)
                self.assertTrue(torch.equal(sk, wk[:, f:f + 2]), f"chunk {i}, heads {f}+2: keys")
                self.assertTrue(torch.equal(sv, wv[:, f:f + 2]), f"chunk {i}, heads {f}+2: values")

    def test_extra_rows_follow_the_history(self):
        for ref, dev in self.both("rtn", "rtn", "none", 3, layout="bthd", quant_factor=2):
            pass
        x = torch.randn(1, 16, self.H, self.D, device="cuda", dtype=torch.bfloat16)
        k, v = dev.kv(1, extra=(x, 2 * x))
        hk, hv = dev.kv(1)
        n = dev.live_tokens(1)
        self.assertEqual(k.shape, (1, n + 16, self.H, self.D))
        k, v = dev.kv(1, extra=(x, 2 * x))  # the buffer is reused: hk was overwritten the same way
        self.assertTrue(torch.equal(k[:, n:], x) and torch.equal(v[:, n:], 2 * x))
        self.assertTrue(torch.equal(k[:, :n], hk[:, :n]))

    def test_overlapped_encodes_read_the_span_as_appended_until_the_next_append(self):
        import qvg.torch
        spec = "qvg:centroids=8,iters=3,tol=0"
        kw = dict(key=spec, value=spec, chunk_tokens=self.T, quant_factor=2, layout="bthd")
        plain = qvg.torch.KVCache(2, self.H, self.D, **kw)
        over = qvg.torch.KVCache(2, self.H, self.D, overlap_encode=True, **kw)
        chunks, formed = [], 0
        for i in range(6):
            k = torch.from_numpy(blobs(self.H, self.T, self.D, 8, seed=10 + i, dir_seed=77)).cuda()[None]
            k = k.transpose(1, 2).to(torch.bfloat16)
            chunks.append(k)
            spans = plain.native.spans_encoded(1)
            plain.append(1, k, k)
            over.append(1, k, k)
            new_span = plain.native.spans_encoded(1) > spans  # spans of 2 chunks: chunks i - 1 and i
            formed += new_span
            pk, _ = plain.kv(1, dtype=torch.float32)
            pk = pk.clone()
            ok, ov = over.kv(1, dtype=torch.float32)
            self.assertTrue(torch.equal(ok, ov))
            fresh = slice((i - 1) * self.T, (i + 1) * self.T) if new_span else slice(0, 0)
            want = pk.clone()
            want[:, fresh] = torch.cat(chunks[i - 1:i + 1], dim=1).float() if new_span else want[:, fresh]
            self.assertTrue(torch.equal(ok, want), f"append {i}")
            if new_span:
                self.assertFalse(torch.equal(pk[:, fresh], want[:, fresh]), "the codec changed the span")
        self.assertEqual(formed, 3)
        m, mp = over.memory(1), plain.memory(1)
        self.assertEqual(m["k_tail"], mp["k_tail"] + 2 * self.T * self.H * self.D * 2)  # the last span's copies
        self.assertEqual(m["k_spans"], mp["k_spans"])

    def test_rope_on_read_matches_wans_formula(self):
        # Wan: angles p * theta^(-2j/n) per part (time 24, height 20, width 20 channels for D = 64),
        # (x[2i] + i x[2i+1]) * e^(i angle) in float64, rounded to float32.
        for ref, dev in self.both("bf16", "bf16", "3d", 2, quant_factor=8):
            pass
        raw = ref.read(1)  # rotated by the C++ reference; compare with the formula on the raw keys
        keys = np.concatenate([blobs(self.H, self.T, self.D, 8, seed=10 + i, dir_seed=77) for i in range(2)], axis=1)
        keys = torch.from_numpy(keys).to(torch.bfloat16).double()  # held in BF16
        pos = torch.from_numpy(np.concatenate([wan_positions(i * self.FRAMES, self.FRAMES, self.GH, self.GW)
                                               for i in range(2)]))
        d = self.D
        parts = [d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6)]
        angles = []
        for c, n in enumerate(parts):
            freq = 1.0 / torch.pow(torch.tensor(10000.0, dtype=torch.float64),
                                   torch.arange(0, n, 2, dtype=torch.float64) / n)
            angles.append(pos[:, c:c + 1].double() * freq[None])
        ang = torch.cat(angles, dim=1)  # [tokens, D/2]
        z = torch.view_as_complex(keys.reshape(self.H, -1, d // 2, 2).contiguous())
        want = torch.view_as_real(z * torch.polar(torch.ones_like(ang), ang)[None]).reshape(self.H, -1, d).float()
        got = dev.kv(1, dtype=torch.float32)[0][0].cpu()
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)  # 1e-6: a float32 ulp or two
        self.assertTrue(torch.equal(got, torch.from_numpy(raw[0])))

    def test_errors(self):
        import qvg.torch
        cache = qvg.torch.KVCache(1, self.H, self.D, rope="3d")
        x = torch.randn(1, self.T, self.H, self.D, device="cuda")
        with self.assertRaises(ValueError):
            cache.append(0, x, x)  # RoPE on read needs frame= and grid= (or positions)
        with self.assertRaises(ValueError):
            cache.append(0, x[0], x[0], frame=0, grid=(self.GH, self.GW))  # no batch dimension
        with self.assertRaises(ValueError):
            cache.append(0, x.cpu(), x.cpu(), frame=0, grid=(self.GH, self.GW))
        with self.assertRaises(ValueError):
            cache.append(0, x, x, frame=0, grid=(5, 5))  # 64 tokens are not whole 5 x 5 frames
        with self.assertRaises(ValueError):
            cache.kv(0)  # empty
        self.assertEqual(cache.chunks_appended(0), 0)
        cache.append(0, x, x, frame=0, grid=(self.GH, self.GW))
        self.assertEqual(cache.kv(0)[0].shape, (1, self.T, self.H, self.D))
        with self.assertRaises(ValueError):
            qvg.torch.KVCache(1, self.H, self.D, layout="tbhd")

    def test_bits_choose_the_specs_per_span_shape(self):
        """bits=: the specs qvg.budget.cache_specs chooses for spans of chunk_tokens * quant_factor tokens,
        their encoded spans within the budget + 3 %; no chunk_tokens: refused."""
        import qvg.budget
        import qvg.torch
        cache = qvg.torch.KVCache(1, self.H, self.D, key="qvg", value="qvg-pro", bits=2.5, chunk_tokens=self.T,
                                  quant_factor=2)
        want = qvg.budget.cache_specs("qvg", "qvg-pro", 2.5, chunk_tokens=self.T, quant_factor=2, dim=self.D)
        self.assertEqual((cache.key, cache.value), want)
        x = torch.randn(1, self.T, self.H, self.D, device="cuda")
        cache.append(0, x, x)
        cache.append(0, x, x)
        m = cache.memory(0)
        self.assertLessEqual(8 * m["spans"] / (2 * 2 * self.T * self.H * self.D), 2.5 * 1.03, m)
        with self.assertRaises(ValueError):
            qvg.torch.KVCache(1, self.H, self.D, bits=2.5)


class TinyCausalStack(torch.nn.Module if torch else object):
    """Attention blocks that use a KV cache the way CausalWanSelfAttention does: keys after RoPE
    (1-D here), the chunk written at current_start, attention over the cache's window."""

    def __init__(self, blocks, heads, dim, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        w = heads * dim
        self.heads, self.dim = heads, dim
        self.qkv = [torch.randn(w, 3 * w, generator=g) / w ** 0.5 for _ in range(blocks)]
        self.qkv = [m.to("cuda", torch.bfloat16) for m in self.qkv]

    def rope(self, x, start):
        t = x.shape[1]
        freq = 1.0 / (10000.0 ** (torch.arange(0, self.dim, 2, dtype=torch.float64, device=x.device) / self.dim))
        ang = torch.arange(start, start + t, dtype=torch.float64, device=x.device)[:, None] * freq[None]
        z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
        rot = torch.polar(torch.ones_like(ang), ang)[None, :, None]
        return torch.view_as_real(z * rot).flatten(-2).to(x.dtype)

    def forward(self, x, caches, current_start, update):
        for b, m in enumerate(self.qkv):
            q, k, v = (x @ m).view(1, x.shape[1], 3, self.heads, self.dim).unbind(2)
            q, k = self.rope(q, current_start), self.rope(k, current_start)
            ka, va = update(caches[b], k, v, current_start)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), ka.transpose(1, 2).contiguous(),
                                               va.transpose(1, 2).contiguous())
            x = x + o.transpose(1, 2).reshape(x.shape)
        return x


def bf16_dicts(blocks, size, heads, dim):
    """Self-Forcing's BF16 dict cache of every block: K/V buffers of `size` tokens, empty."""
    return [{"k": torch.zeros(1, size, heads, dim, device="cuda", dtype=torch.bfloat16),
             "v": torch.zeros(1, size, heads, dim, device="cuda", dtype=torch.bfloat16),
             "global_end_index": 0, "local_end_index": 0} for _ in range(blocks)]


def dict_update(cache, k, v, current_start, sink_tokens, size):
    """Self-Forcing's BF16 dict cache: write the chunk at its local position (rolling the
    non-sink tokens left when it does not fit), attend to the whole buffer up to the chunk."""
    t = k.shape[1]
    end = current_start + t
    if end > cache["global_end_index"] and t + cache["local_end_index"] > size:
        evict = t + cache["local_end_index"] - size
        keep = cache["local_end_index"] - evict - sink_tokens
        for name in ("k", "v"):
            cache[name][:, sink_tokens:sink_tokens + keep] = \
                cache[name][:, sink_tokens + evict:sink_tokens + evict + keep].clone()
        local_end = cache["local_end_index"] + end - cache["global_end_index"] - evict
    else:
        local_end = cache["local_end_index"] + end - cache["global_end_index"]
    cache["k"][:, local_end - t:local_end] = k
    cache["v"][:, local_end - t:local_end] = v
    cache["global_end_index"], cache["local_end_index"] = end, local_end
    return cache["k"][:, :local_end], cache["v"][:, :local_end]


@unittest.skipUnless(TORCH_CUDA, TORCH_WHY)
class SelfForcingAdapter(unittest.TestCase):
    BLOCKS, H, D, FS, FPC = 2, 2, 64, 16, 2  # frames of 16 tokens, chunks of 2 frames

    def generate(self, spec, chunks, local_attn_size, sink_size, steps=3):
        """Runs the stack over `chunks` chunks (steps noisy passes + one clean pass each) with the BF16
        dict cache and with qvg's adapter; returns the outputs of every pass of both."""
        import qvg.torch
        torch.manual_seed(0)
        stack = TinyCausalStack(self.BLOCKS, self.H, self.D)
        t = self.FS * self.FPC
        size = (local_attn_size if local_attn_size != -1 else chunks * self.FPC) * self.FS
        dicts = bf16_dicts(self.BLOCKS, size, self.H, self.D)
        ours = qvg.torch.SelfForcingKVCache(self.BLOCKS, self.H, self.D, frame_seqlen=self.FS,
                                            frames_per_chunk=self.FPC, local_attn_size=local_attn_size,
                                            sink_size=sink_size, key=spec, value=spec, quant_factor=2)
        ref_out, our_out = [], []
        for c in range(chunks):
            for s in range(steps + 1):
                x = torch.randn(1, t, self.H * self.D, device="cuda", dtype=torch.bfloat16)
                ref_out.append(stack(x, dicts, c * t, lambda d, k, v, st: dict_update(
                    d, k, v, st, sink_size * self.FS, size)))
                our_out.append(stack(x, ours, c * t, lambda b, k, v, st: b.update(k, v, st)))
        return ref_out, our_out, ours

    def test_bf16_codec_gives_the_dict_caches_outputs(self):
        for local_attn_size, sink_size in ((-1, 0), (10, 2), (8, 0)):
            ref, ours, _ = self.generate("bf16", 7, local_attn_size, sink_size)
            for i, (a, b) in enumerate(zip(ref, ours)):
                self.assertTrue(torch.equal(a, b), f"pass {i}, local_attn_size {local_attn_size}, sink {sink_size}")

    def test_qvg_codec_error_is_that_of_the_codec(self):
        ref, ours, cache = self.generate("qvg:centroids=16", 6, -1, 0)
        err = max(((a.float() - b.float()).norm() / a.float().norm()).item() for a, b in zip(ref, ours))
        first = max(((a.float() - b.float()).norm()).item() for a, b in zip(ref[:4], ours[:4]))
        self.assertEqual(first, 0.0)  # the first chunk attends to itself only: no compressed history yet
        self.assertGreater(err, 0.0)
        self.assertLess(err, 0.2)  # random K/V at ~2.3 bits: attention outputs within 20 % (rel. L2)
        m = cache.memory()
        self.assertGreater(m["spans"], 0)
        self.assertGreater(m["ratio"], 1.0)

    def test_zero_copy_reads_return_the_same_kv(self):
        """SelfForcingKVCache with zero_copy_reads: every update() returns the K and V of one without it, bit
        for bit (spans of 1 and 2 chunks, a sink, a window, batched encodes, max_attention_size, reset)."""
        import qvg.torch
        t = self.FS * self.FPC
        for spec, qf, local, sink, batch, mas in (("qvg:centroids=8,iters=2", 2, -1, 0, False, None),
                                                  ("qvg:centroids=8,iters=2", 2, 10, 2, True, None),
                                                  ("rtn", 1, 8, 0, False, 5 * self.FS),
                                                  ("bf16", 2, -1, 2, True, None)):
            kw = dict(frame_seqlen=self.FS, frames_per_chunk=self.FPC, local_attn_size=local, sink_size=sink,
                      key=spec, value=spec, quant_factor=qf, batch_encodes=batch, max_attention_size=mas)
            ref = qvg.torch.SelfForcingKVCache(self.BLOCKS, self.H, self.D, **kw)
            zc = qvg.torch.SelfForcingKVCache(self.BLOCKS, self.H, self.D, zero_copy_reads=True, **kw)
            for video in range(2):
                gen = torch.Generator(device="cuda").manual_seed(video)
                for c in range(7):
                    for step in range(3):
                        for b in range(self.BLOCKS):
                            k = torch.randn(1, t, self.H, self.D, device="cuda", generator=gen).to(torch.bfloat16)
                            v = torch.randn(1, t, self.H, self.D, device="cuda", generator=gen).to(torch.bfloat16)
                            rk, rv = ref[b].update(k, v, c * t)
                            zk, zv = zc[b].update(k, v, c * t)
                            what = f"{spec} qf {qf} local {local} sink {sink} batch {batch}: video {video} " \
                                   f"chunk {c} pass {step} block {b}"
                            self.assertEqual(zk.shape, rk.shape, what)
                            self.assertTrue(torch.equal(zk, rk), what + ": K")
                            self.assertTrue(torch.equal(zv, rv), what + ": V")
                self.assertIn("views", zc.memory())
                ref.reset()
                zc.reset()

    def test_zero_copy_reads_refuse_what_they_cannot_give(self):
        import qvg.torch
        with self.assertRaises(ValueError):
            qvg.torch.KVCache(1, self.H, self.D, layout="bhtd", zero_copy_reads=True)
        with self.assertRaises(ValueError):
            qvg.torch.KVCache(1, self.H, self.D, rope="3d", zero_copy_reads=True)
        cache = qvg.torch.KVCache(1, self.H, self.D, zero_copy_reads=True, quant_factor=2)
        k = torch.randn(1, 32, self.H, self.D, device="cuda", dtype=torch.bfloat16)
        cache.append(0, k, k)
        with self.assertRaises(ValueError):
            cache.kv(0, dtype=torch.float32)
        kk, vv = cache.kv(0)
        self.assertTrue(torch.equal(kk, k))
        self.assertTrue(torch.equal(vv, k))

    def test_rewriting_compressed_tokens_is_refused(self):
        import qvg.torch
        cache = qvg.torch.SelfForcingKVCache(1, self.H, self.D, frame_seqlen=self.FS, frames_per_chunk=self.FPC,
                                             quant_factor=2)
        t = self.FS * self.FPC
        k = torch.randn(1, t, self.H, self.D, device="cuda", dtype=torch.bfloat16)
        cache[0].update(k, k, 0)
        cache[0].update(k, k, t)
        with self.assertRaises(ValueError):
            cache[0].update(k, k, 0)  # chunk 0 is history now
        with self.assertRaises(ValueError):
            cache[0].update(k, k, 3 * t)  # skips a chunk
        self.assertEqual(int(cache[0]["global_end_index"].item()), 2 * t)
        with self.assertRaises(ValueError):
            qvg.torch.SelfForcingKVCache(1, self.H, self.D, frame_seqlen=self.FS, frames_per_chunk=self.FPC,
                                         sink_size=1)


if __name__ == "__main__":
    unittest.main()

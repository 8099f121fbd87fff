"""qvg.StreamingKVCache from Python: against the codecs it holds, its policy, memory and files (label cpu)."""
import os
import tempfile
import unittest

import numpy as np

import qvg
from qvg_testing import bf16_round, bits, random_kv

class Cache(unittest.TestCase):
    """qvg.StreamingKVCache against the codecs it holds, and its policy, memory and files."""

    def chunks(self, n, heads=2, tokens=300, dim=64):
        return [(random_kv(heads, tokens, dim, seed=100 + 2 * i), random_kv(heads, tokens, dim, seed=101 + 2 * i))
                for i in range(n)]

    def three_chunk_cache(self):
        """A one-layer cache of three chunks in spans of two (one span, one BF16 chunk)."""
        cache = qvg.StreamingKVCache(1, 2, 64, quant_factor=2)
        for k, v in self.chunks(3):
            cache.append(0, k, v)
        return cache

    def test_head_shards_read_the_same_heads_as_one_cache(self):
        # Head-sharded parallelism (Ulysses): a cache of heads [2, 4) of a
        # 4-head model, built with first_head=2, holds and reads exactly what
        # a cache of all 4 heads holds for them, warm-started spans and a
        # k-means++ start included; without first_head the k-means seeds
        # differ.
        ch = self.chunks(5, heads=4)
        for spec in ("qvg", "qvg-pro:iters=2"):
            with self.subTest(spec=spec):
                whole = qvg.StreamingKVCache(1, 4, 64, key=spec, value=spec, quant_factor=2)
                shards = [qvg.StreamingKVCache(1, 2, 64, key=spec, value=spec, quant_factor=2, first_head=f)
                          for f in (0, 2)]
                unshifted = qvg.StreamingKVCache(1, 2, 64, key=spec, value=spec, quant_factor=2)
                for k, v in ch:
                    whole.append(0, k, v)
                    for f, cache in zip((0, 2), shards):
                        cache.append(0, k[f:f + 2], v[f:f + 2])
                    unshifted.append(0, k[2:], v[2:])
                wk, wv = whole.read(0)
                for f, cache in zip((0, 2), shards):
                    sk, sv = cache.read(0)
                    np.testing.assert_array_equal(bits(sk), bits(wk[f:f + 2]))
                    np.testing.assert_array_equal(bits(sv), bits(wv[f:f + 2]))
                    self.assertEqual(cache.memory()["total"] * 2, whole.memory()["total"])
                self.assertFalse(np.array_equal(unshifted.read(0)[0], wk[2:]))
        with self.assertRaises(ValueError):
            qvg.StreamingKVCache(1, 2, 64, first_head=-1)

    def test_spans_are_the_codecs_encodes_with_warm_starts(self):
        # Span 0 is the codec's encode of its chunks; span 1 the encode warm-
        # started from span 0 (centroid caching). With tail="f32" the chunks
        # are held exactly until then.
        ch = self.chunks(4)
        for spec in ("qvg", "qvg-pro:iters=2", "rtn", "kivi"):
            with self.subTest(spec=spec):
                cache = qvg.StreamingKVCache(1, 2, 64, key=spec, value=spec, quant_factor=2, tail="f32")
                reports = [cache.append(0, k, v) for k, v in ch]
                self.assertEqual([len(r["spans"]) for r in reports], [0, 1, 0, 1])
                codec = qvg.Codec(spec)
                k_all, v_all = cache.read(0)
                prev = {"key": None, "value": None}
                for span in range(2):
                    for role, i, got in (("key", 0, k_all), ("value", 1, v_all)):
                        x = np.concatenate([ch[2 * span][i], ch[2 * span + 1][i]], axis=1)
                        e = codec.encode(x, role=role, warm_start=prev[role])
                        prev[role] = e
                        np.testing.assert_array_equal(bits(got[:, 600 * span:600 * (span + 1)]), bits(codec.decode(e)))
                self.assertEqual(reports[3]["spans"][0]["k_warm_started"], spec.startswith("qvg"))

    def test_tail_chunks_are_bf16_or_exact(self):
        (k, v), = self.chunks(1)
        for tail, want in (("bf16", bf16_round), ("f32", lambda a: a)):
            cache = qvg.StreamingKVCache(1, 2, 64, tail=tail)
            cache.append(0, k, v)
            got_k, got_v = cache.read(0)
            np.testing.assert_array_equal(bits(got_k), bits(want(k)))
            np.testing.assert_array_equal(bits(got_v), bits(want(v)))
            self.assertEqual(cache.memory()["k_tail"], k.size * (2 if tail == "bf16" else 4))

    def test_window_evicts_and_memory_adds_up(self):
        cache = qvg.StreamingKVCache(2, 2, 64, quant_factor=2, window_chunks=3, sink=1)
        for k, v in self.chunks(6):
            cache.append(1, k, v)
        chunks, tokens = cache.live_chunks(1)
        self.assertEqual(chunks, [0, 3, 4, 5])  # the sink and the newest three
        self.assertEqual(cache.live_tokens(1), 1200)
        self.assertEqual(cache.chunks_appended(1), 6)
        self.assertEqual(cache.chunks_appended(0), 0)
        m = cache.memory(1)
        kv = sum(m["k_spans"].values()) + sum(m["v_spans"].values()) + m["k_tail"] + m["v_tail"]
        self.assertEqual(m["kv_bytes"], kv)
        self.assertEqual(m["bits_per_value"], 8.0 * kv / (2 * 2 * m["tokens_held"] * 64))
        self.assertEqual(cache.memory()["kv_bytes"], kv)  # layer 0 is empty

    def test_rope_on_read_needs_positions(self):
        cache = qvg.StreamingKVCache(1, 2, 64, rope="1d")
        (k, v), = self.chunks(1)
        self.assert_raises_with("positions", cache.append, 0, k, v)
        self.assertEqual(cache.chunks_appended(0), 0)  # unchanged
        cache.append(0, k, v, positions=np.arange(300))
        got_k, got_v = cache.read(0)
        np.testing.assert_array_equal(bits(got_v), bits(bf16_round(v)))  # values are never rotated
        self.assertFalse(np.array_equal(got_k, bf16_round(k)))  # keys are rotated on read

    def test_save_and_load(self):
        cache = self.three_chunk_cache()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "c.qvgc")
            cache.save(path)
            back = qvg.StreamingKVCache.load(path)
            for a, b in zip(cache.read(0), back.read(0)):
                np.testing.assert_array_equal(bits(a), bits(b))
            self.assertEqual(back.memory(), cache.memory())
            with open(path, "rb") as fh:
                data = bytearray(fh.read())
            data[len(data) // 2] ^= 0xFF  # a flipped byte: a checksum or a check must catch it
            with open(path, "wb") as fh:
                fh.write(bytes(data))
            with self.assertRaises(ValueError):
                qvg.StreamingKVCache.load(path)
            self.assert_raises_with("", qvg.StreamingKVCache.load, os.path.join(tmp, "missing"))
            # Seeded random damage anywhere in the file (bytes flipped, the
            # file cut): every load raises ValueError (the sections are
            # checksummed); ASan + UBSan watch it in scripts/sanitize.sh.
            import random
            rng = random.Random(270)
            cache.save(path)
            with open(path, "rb") as fh:
                good = fh.read()
            for i in range(150):
                data = bytearray(good)
                if i % 3 == 2:
                    data = data[:rng.randrange(len(data))]
                else:
                    for _ in range(rng.randint(1, 4)):
                        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
                with open(path, "wb") as fh:
                    fh.write(bytes(data))
                with self.assertRaises(ValueError, msg=f"damage {i}"):
                    qvg.StreamingKVCache.load(path)

    def test_save_replaces_regular_files_only(self):
        # save replaced FIFOs, devices and links with a regular file (issue 41):
        # other kinds are refused and left as they are; a link is written through.
        import stat
        cache = self.three_chunk_cache()
        with tempfile.TemporaryDirectory() as tmp:
            fifo = os.path.join(tmp, "fifo")
            os.mkfifo(fifo)
            self.assert_raises_with("fifo: cannot save: is a FIFO (named pipe)", cache.save, fifo)
            self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))
            self.assert_raises_with("cannot save: is a directory", cache.save, tmp)
            null_link = os.path.join(tmp, "null_link")
            os.symlink("/dev/null", null_link)
            self.assert_raises_with("it leads to '/dev/null', which is a character device", cache.save, null_link)
            real, link = os.path.join(tmp, "real.qvgc"), os.path.join(tmp, "link.qvgc")
            cache.save(real)
            os.chmod(real, 0o600)
            with open(real, "rb") as fh:
                want = fh.read()
            with open(real, "wb") as fh:
                fh.write(b"old")
            os.symlink("real.qvgc", link)
            cache.save(link)
            self.assertTrue(os.path.islink(link))
            with open(real, "rb") as fh:
                self.assertEqual(fh.read(), want)
            self.assertEqual(stat.S_IMODE(os.stat(real).st_mode), 0o600)
            self.assertEqual(sorted(os.listdir(tmp)), ["fifo", "link.qvgc", "null_link", "real.qvgc"])

    def test_threads_appending_to_two_layers(self):
        # The cache releases the GIL while it works and holds its own lock:
        # two threads appending to layers 0 and 1 at once leave what one
        # thread appending to both leaves.
        import threading
        ch = self.chunks(4)
        one, two = (qvg.StreamingKVCache(2, 2, 64, quant_factor=2) for _ in range(2))
        for k, v in ch:
            one.append(0, k, v)
            one.append(1, k, v)
        workers = [threading.Thread(target=lambda layer=layer: [two.append(layer, k, v) for k, v in ch])
                   for layer in (0, 1)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        for layer in (0, 1):
            for a, b in zip(one.read(layer), two.read(layer)):
                np.testing.assert_array_equal(bits(a), bits(b))

    def test_bad_arguments_leave_the_cache_unchanged(self):
        cache = qvg.StreamingKVCache(1, 2, 64, chunk_tokens=300)
        (k, v), = self.chunks(1)
        self.assert_raises_with("layer", cache.append, 1, k, v)
        self.assert_raises_with("", cache.append, 0, k[:, :100], v[:, :100])  # not chunk_tokens
        self.assert_raises_with("", cache.append, 0, k, random_kv(3, 300, 64))  # other heads
        self.assert_raises_with("", cache.read, 0)  # no chunk yet
        self.assertEqual(cache.chunks_appended(0), 0)
        self.assert_raises_with("tail", qvg.StreamingKVCache, 1, 2, 64, tail="f16")
        self.assert_raises_with("nope", qvg.StreamingKVCache, 1, 2, 64, key="nope")
        self.assert_raises_with("", qvg.StreamingKVCache, 1, 2, 64, quant_factor=0)

    def assert_raises_with(self, fragment, f, *args, **kwargs):
        with self.assertRaises(ValueError) as cm:
            f(*args, **kwargs)
        self.assertIn(fragment, str(cm.exception))


if __name__ == "__main__":
    unittest.main()

"""Tests of the Python module `qvg`: codecs against the library, byte accounting, properties, bad
input, budgets (run by CTest as `python`, label cpu).

The reference is the C++ library itself, reached independently through the
qvg CLI (QVG_CLI): `qvg eval --write-rec` writes each codec's reconstruction,
which the module's encode + decode must equal bit for bit. The byte counts
are checked against docs/FORMAT.md's sizes, and every bad input against the
error it must raise. Other files: test_pickling, test_streaming_cache,
test_dlpack, test_gpu_module (and test_torch, test_integrations, test_distributed).
"""
import os
import subprocess
import tempfile
import unittest

import numpy as np

import qvg
from qvg_testing import CLI, SPECS, bits, random_kv

class AgainstTheLibrary(unittest.TestCase):
    @unittest.skipUnless(CLI, "QVG_CLI is not set (the qvg CLI is not built)")
    def test_reconstructions_equal_the_clis(self):
        k, v = random_kv(seed=1), random_kv(seed=2)
        with tempfile.TemporaryDirectory() as tmp:
            np.save(os.path.join(tmp, "k.npy"), k)
            np.save(os.path.join(tmp, "v.npy"), v)
            rec = os.path.join(tmp, "rec")
            subprocess.run([CLI, "eval", "--k", os.path.join(tmp, "k.npy"), "--v", os.path.join(tmp, "v.npy"),
                            "--methods", *SPECS, "--write-rec", rec, "--threads", "2", "--quiet"],
                           check=True, stdout=subprocess.DEVNULL)
            for spec in SPECS:
                safe = "".join(c if c.isalnum() or c in "-." else ("-" if c == "=" else "_") for c in spec)
                codec = qvg.Codec(spec)
                for name, x, role in (("k", k, "key"), ("v", v, "value")):
                    with self.subTest(spec=spec, tensor=name):
                        want = np.load(os.path.join(rec, f"{safe}.{name}.npy"))
                        got = codec.decode(codec.encode(x, role=role))
                        self.assertEqual(got.dtype, np.float32)
                        self.assertEqual(got.shape, x.shape)
                        np.testing.assert_array_equal(bits(got), bits(want))


class Accounting(unittest.TestCase):
    def test_qvg_part_sizes_are_the_formats(self):
        # docs/FORMAT.md: INT2 codes (b/8 bytes a value), one FP8 scale per
        # block of B, one uint8 id per token and stage, S x C BF16 centroid
        # rows and one FP32 span scale per head. The presets' centroids=auto:
        # C = floor(0.25 * N / 16) = 10 on 640 tokens.
        h, n, d = 2, 640, 64
        for spec, b, blk, s, c in (("qvg", 2, 64, 1, 10), ("qvg-pro", 2, 16, 4, 10), ("qvg:centroids=256", 2, 64, 1, 256),
                                   ("qvg-int4:centroids=64", 4, 64, 1, 64)):
            with self.subTest(spec=spec):
                e = qvg.Codec(spec).encode(random_kv(h, n, d))
                p = e.part_bytes
                self.assertEqual(p["codes"], h * n * d * b // 8)
                self.assertEqual(p["scales"], h * n * (d // blk))
                self.assertEqual(p["ids"], s * h * n)
                self.assertEqual(p["centroids"], s * h * c * d * 2)
                self.assertEqual(p["span_scales"], 4 * h)
                self.assertEqual(e.nbytes, sum(p.values()))
                self.assertEqual(e.bits_per_value, 8.0 * e.nbytes / (h * n * d))
                self.assertEqual(e.ratio_to_bf16, 2.0 * h * n * d / e.nbytes)
                self.assertEqual({k: len(v) for k, v in e.parts.items()}, p)
                self.assertEqual(e.shape, (h, n, d))


class CodebookCode(unittest.TestCase):
    """qvg's code=cq (docs/FORMAT.md): specs parse through the library, encodings
    pickle and decode the same, the budget rule picks within its family, the CUDA codec encodes to
    the CPU reference's bytes and decodes the same values."""

    SPEC = "qvg:code=cq,cq_dim=4,cq_codewords=32,centroids=8"

    def test_spec_pickle_and_bytes(self):
        import pickle
        h, n, d = 2, 320, 64
        codec = qvg.Codec(self.SPEC)
        e = codec.encode(random_kv(h, n, d), role="key")
        self.assertIn("code=cq,cq_dim=4,cq_codewords=32", e.spec)
        p = e.part_bytes
        self.assertEqual(p["codes"], h * n * (d // 4) * 5 // 8)   # 5-bit indices of 4-channel sub-vectors
        self.assertEqual(p["scales"], h * n)                       # one FP8 scale a token
        self.assertEqual(p["centroids"], h * 8 * d * 2 + h * d * 32 * 2)  # stage centroids, then codebooks (BF16)
        back = pickle.loads(pickle.dumps(e))
        np.testing.assert_array_equal(bits(qvg.Codec(back.spec).decode(back)), bits(codec.decode(e)))
        self.assertNotIn("code=", qvg.Codec("qvg").encode(random_kv(h, n, d)).spec)  # code=int is left out

    def test_budget_and_bad_specs(self):
        pick = qvg.choose("qvg:code=cq", 2.0, tokens=768, dim=128)
        self.assertTrue(pick["reachable"])
        self.assertIn("code=cq", pick["spec"])
        self.assertLessEqual(pick["bits"], 2.0 * 1.03)
        with self.assertRaises(ValueError):
            qvg.Codec("qvg:code=cq,bits=4")

    @unittest.skipUnless(qvg.cuda_available()[0], "no usable CUDA device")
    def test_cuda_encodes_like_the_cpu_reference_and_decodes_the_same(self):
        h, n, d = 2, 320, 64
        x = random_kv(h, n, d)
        cpu, gpu = qvg.Codec(self.SPEC), qvg.Codec(self.SPEC, device="cuda")
        e, g = cpu.encode(x, role="key"), gpu.encode(x, role="key")
        self.assertEqual(set(e.parts), set(g.parts))
        for name in e.parts:
            np.testing.assert_array_equal(np.asarray(g.parts[name]), np.asarray(e.parts[name]), name)
        np.testing.assert_array_equal(bits(gpu.decode(e)), bits(cpu.decode(e)))


class Properties(unittest.TestCase):
    def test_deterministic_for_any_thread_count(self):
        x = random_kv()
        codec = qvg.Codec("qvg-pro:iters=2")
        a, b = codec.encode(x, threads=1), codec.encode(x, threads=2)
        self.assertEqual(a.parts, b.parts)
        np.testing.assert_array_equal(bits(codec.decode(a, threads=1)), bits(codec.decode(b, threads=2)))

    def test_thd_layout_is_the_transpose(self):
        x = random_kv()
        codec = qvg.Codec("qvg")
        e = codec.encode(x)
        e_thd = codec.encode(np.ascontiguousarray(x.transpose(1, 0, 2)), layout="thd")
        self.assertEqual(e.parts, e_thd.parts)
        np.testing.assert_array_equal(bits(codec.decode(e, layout="thd")),
                                      bits(codec.decode(e).transpose(1, 0, 2)))

    def test_other_dtypes_strides_and_a_batch_of_one(self):
        x = random_kv()
        codec = qvg.Codec("rtn")
        want = codec.encode(x).parts
        self.assertEqual(codec.encode(x.astype(np.float64)).parts, want)
        padded = np.zeros((2, 640, 128), np.float32)
        padded[:, :, ::2] = x  # a strided view
        self.assertEqual(codec.encode(padded[:, :, ::2]).parts, want)
        self.assertEqual(codec.encode(x[None]).parts, want)  # a leading batch of 1

    def test_warm_start_is_accepted_from_the_same_codec(self):
        codec = qvg.Codec("qvg:iters=2")
        first = codec.encode(random_kv(seed=3))
        warm = codec.encode(random_kv(seed=4), warm_start=first)
        self.assertEqual(warm.shape, first.shape)
        self.assertEqual(warm.part_bytes, first.part_bytes)

    def test_compare_matches_numpy(self):
        x, y = random_kv(seed=5), random_kv(seed=6)
        s = qvg.compare(x, y)
        diff = x.astype(np.float64) - y.astype(np.float64)
        # Both accumulate in double; the orders of summation differ, so the
        # results agree to a few ulps of the sum (1e-12 relative).
        self.assertAlmostEqual(s["mse"], np.mean(diff ** 2), delta=1e-12 * np.mean(diff ** 2))
        self.assertEqual(s["max_abs"], np.max(np.abs(diff)))
        self.assertEqual(qvg.compare(x, x)["mse"], 0.0)
        self.assertEqual(qvg.compare(x, x)["snr_db"], float("inf"))

    def test_names(self):
        self.assertIn("qvg-pro", qvg.presets())
        self.assertEqual(qvg.describe("qvg"), qvg.Codec("qvg").description)
        self.assertIn("qvg-pro", repr(qvg.Codec("qvg-pro")))
        ok, why = qvg.cuda_available()
        self.assertIsInstance(ok, bool)
        self.assertTrue(ok or why)


class BadInput(unittest.TestCase):
    def assert_error(self, fragment, f, *args, **kwargs):
        with self.assertRaises(ValueError) as cm:
            f(*args, **kwargs)
        self.assertIn(fragment, str(cm.exception))

    def test_bad_specs_roles_layouts_devices(self):
        self.assert_error("nope", qvg.Codec, "nope")
        self.assert_error("bits", qvg.Codec("rtn:bits=3").encode, random_kv())  # validated against the dim
        codec = qvg.Codec("rtn")
        self.assert_error("role", codec.encode, random_kv(), role="query")
        self.assert_error("zyx", codec.encode, random_kv(), layout="zyx")
        self.assert_error("device", qvg.Codec, "rtn", device="tpu")
        self.assert_error("threads", codec.encode, random_kv(), threads=-1)
        self.assert_error("threads", codec.decode, codec.encode(random_kv()), threads=-2)
        self.assert_error("threads", qvg.StreamingKVCache, 1, 2, 64, threads=-1)
        if not qvg.cuda_available()[0]:
            with self.assertRaises(ValueError):
                qvg.Codec("rtn", device="cuda")

    def test_bad_tensors(self):
        codec = qvg.Codec("qvg")
        self.assert_error("got shape [4, 64]", codec.encode, np.zeros((4, 64), np.float32))
        self.assert_error("got shape [2, 2, 640, 64]", codec.encode, np.zeros((2, 2, 640, 64), np.float32))
        x = random_kv()
        x[1, 5, 3] = np.nan
        self.assert_error("finite", codec.encode, x)
        with np.errstate(over="ignore"):
            self.assert_error("finite", codec.encode, np.full((1, 300, 64), 1e39))  # inf once float32
        self.assert_error("multiple", codec.encode, random_kv(dim=48))  # not a multiple of the block
        self.assert_error("tokens", codec.encode, np.zeros((2, 0, 64), np.float32))
        # A complex array was cast with its imaginary part dropped (issue 41).
        for dtype in (np.complex64, np.complex128):
            z = random_kv().astype(dtype) + 1j
            with self.assertRaisesRegex(TypeError, r"x is a complex array \(dtype complex\d+\); qvg encodes real "
                                                   r"tensors: pass its .real or .imag part"):
                codec.encode(z)
        cache = qvg.StreamingKVCache(1, 2, 64)
        with self.assertRaisesRegex(TypeError, "k is a complex array"):
            cache.append(0, random_kv(tokens=64).astype(np.complex64), random_kv(tokens=64))
        self.assertEqual(cache.chunks_appended(0), 0)
        self.assert_error("does nothing for method bf16", qvg.Codec, "bf16:bits=2")
        with self.assertRaises(TypeError):
            codec.encode("not an array")
        # Issue 39: no silent casts of what is not a real number, no lists.
        x = random_kv(heads=1, tokens=64)
        for bad in (x > 0, x.astype(object), x.astype(str)):  # complex: above
            with self.assertRaises(TypeError) as cm:
                codec.encode(bad)
            self.assertIn(f"got {bad.dtype}", str(cm.exception))
        with self.assertRaises(TypeError) as cm:
            codec.encode(x.tolist())
        self.assertIn("got list", str(cm.exception))
        # Integers are real numbers: converted, as docs/PYTHON.md says.
        self.assertEqual(codec.encode((x * 40).astype(np.int32)).parts,
                         codec.encode((x * 40).astype(np.int32).astype(np.float32)).parts)

    def test_decode_with_another_method(self):
        e = qvg.Codec("rtn").encode(random_kv())
        self.assert_error("decoding a", qvg.Codec("kivi").decode, e)

    def test_warm_start_of_another_dim(self):
        codec = qvg.Codec("qvg:iters=2")
        first = codec.encode(random_kv(dim=128))
        with self.assertRaises(ValueError):
            codec.encode(random_kv(dim=64), warm_start=first)


class Budgets(unittest.TestCase):
    """qvg.choose and qvg.Codec(bits=): the budget rule of the library (qvg/budget.h)."""

    def test_choose_from_the_shape(self):
        # The Self-Forcing span at 2.5 bits: INT2 B16 with 58 FP8 centroids, 2 + 8/16 + 8/128 + 8 * 58 /
        # 37,440 + 64 / (37,440 * 128) = 2.5749 bits (tests/test_budget.cpp checks the rule by brute force).
        c = qvg.choose("qvg", 2.5, tokens=37440, dim=128)
        self.assertTrue(c["reachable"])
        self.assertEqual(c["description"], "INT2 B16 fp8 S1 C58 fp8c")
        self.assertAlmostEqual(c["bits"], 2.5625 + 8 * 58 / 37440 + 64 / (37440 * 128), places=12)
        self.assertEqual(qvg.describe(c["spec"]), "INT2 B16 fp8 S1 Cauto(0.0125 b) fp8c")  # the preset's auto kept
        self.assertFalse(qvg.choose("quarot", 2.0, tokens=1536, dim=128)["reachable"])

    def test_codec_with_bits_stores_within_the_budget(self):
        x = random_kv(heads=2, tokens=768, dim=128, seed=3)
        for spec in ("qvg", "qvg-pro", "rtn", "quarot"):
            for budget in (2.5, 3.0):
                codec = qvg.Codec(spec, bits=budget, tokens=768, dim=128)
                self.assertEqual(codec.spec, qvg.choose(spec, budget, tokens=768, dim=128)["spec"])
                for role in ("key", "value"):
                    self.assertLessEqual(codec.encode(x, role=role).bits_per_value, budget * 1.03, (spec, budget))
        with self.assertRaises(ValueError) as cm:
            qvg.Codec("kivi", bits=2, tokens=768, dim=128)
        self.assertIn("cannot reach 2 bits", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            qvg.Codec("qvg", bits=2.5)
        self.assertIn("tokens= and dim=", str(cm.exception))

    def test_choose_on_data_measures_every_candidate(self):
        k, v = random_kv(heads=2, tokens=512, dim=64, seed=4), random_kv(heads=2, tokens=512, dim=64, seed=5)
        c = qvg.choose("qvg", 2.5, k=k, v=v)
        self.assertTrue(c["reachable"])
        errors = [t["error"] for t in c["trials"]]
        self.assertGreaterEqual(len(errors), 2)
        self.assertTrue(all(np.isfinite(errors)), errors)
        best = c["trials"][int(np.argmin(errors))]
        self.assertEqual(qvg.describe(best["spec"]), c["description"])

    def test_cache_specs_for_the_torch_caches(self):
        import qvg.budget
        self.assertEqual(qvg.budget.cache_specs("qvg", "rtn", None, chunk_tokens=0, quant_factor=8, dim=128),
                         ("qvg", "rtn"))
        k, v = qvg.budget.cache_specs("qvg", "qvg-pro", 2.5, chunk_tokens=1560, quant_factor=8, dim=128)
        self.assertEqual(k, qvg.choose("qvg", 2.5, tokens=12480, dim=128)["spec"])
        self.assertEqual(v, qvg.choose("qvg-pro", 2.5, tokens=12480, dim=128)["spec"])
        with self.assertRaises(ValueError):
            qvg.budget.cache_specs("qvg", "qvg", 2.5, chunk_tokens=0, quant_factor=8, dim=128)
        with self.assertRaises(ValueError) as cm:
            qvg.budget.cache_specs("qvg", "kivi", 2.2, chunk_tokens=96, quant_factor=8, dim=128)
        self.assertIn("value='kivi'", str(cm.exception))


class BitsWarning(unittest.TestCase):
    def test_more_than_four_bits_warns(self):
        """The presets stay at or below 4 bits on spans of 256 tokens or more (centroids=auto: 2.44 and 3.75
        at most); a fixed C = 256 on 256 tokens stores 18.19 bits and warns."""
        import warnings
        x = random_kv(heads=1, tokens=256, dim=128, seed=6)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for spec in ("qvg", "qvg-pro:iters=2"):
                self.assertLessEqual(qvg.Codec(spec).encode(x).bits_per_value, 4.0, spec)
            self.assertEqual(len(w), 0, [str(a.message) for a in w])
            e = qvg.Codec("qvg:centroids=256,iters=1").encode(x)
            self.assertAlmostEqual(e.bits_per_value, 18.19, places=2)
            self.assertEqual(len(w), 1)
            self.assertIs(w[0].category, UserWarning)
            self.assertIn("18.19 bits per value", str(w[0].message))


if __name__ == "__main__":
    unittest.main()

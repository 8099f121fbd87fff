"""qvg.EncodedTensor pickles, byte records and golden files (label cpu)."""
import os
import unittest

import numpy as np

import qvg
from qvg_testing import SPECS, TEST_DATA, bits, random_kv

class Pickling(unittest.TestCase):
    def test_round_trip_decodes_the_same(self):
        import pickle
        for spec in SPECS:
            with self.subTest(spec=spec):
                codec = qvg.Codec(spec)
                e = codec.encode(random_kv(), role="value")
                back = pickle.loads(pickle.dumps(e))
                self.assertEqual(back.parts, e.parts)
                self.assertEqual((back.shape, back.role, back.spec), (e.shape, e.role, e.spec))
                np.testing.assert_array_equal(bits(codec.decode(back)), bits(codec.decode(e)))
                # the spec alone makes a codec that decodes it the same
                np.testing.assert_array_equal(bits(qvg.Codec(e.spec).decode(back)), bits(codec.decode(e)))

    def test_damaged_states_are_refused(self):
        # Refused when loaded (__setstate__ checks sizes and stored values: issue 41).
        e = qvg.Codec("qvg").encode(random_kv())
        spec, role, shape, parts = e.__getstate__()
        short = dict(parts, codes=parts["codes"][:-1])
        self.assertIn("part 'codes' has", self.state_error((spec, role, shape, short)))
        few = qvg.Codec("qvg:centroids=8").encode(random_kv())
        s2, r2, sh2, p2 = few.__getstate__()
        self.assertIn("part 'ids' holds 200 at stage 0, head 0, token 0 (C = 8 centroids)",
                      self.state_error((s2, r2, sh2, dict(p2, ids=bytes([200]) * len(p2["ids"])))))
        for state in ((spec, role), ("nope", role, shape, parts), (spec, "query", shape, parts),
                      (spec, role, (2, 0, 64), parts), (spec, role, shape, {"codes": b""})):
            with self.assertRaises(ValueError):
                self.load_state(state)

    def test_states_with_values_no_encoder_writes_are_refused(self):
        # Right sizes, wrong values: NaN / inf stored, or finite values whose
        # decode overflows float. Each is refused when loaded, naming part and place.
        x = random_kv()
        spec, role, shape, parts = qvg.Codec("qvg").encode(x).__getstate__()
        c = bytearray(parts["centroids"])
        c[0:2] = b"\xff\xff"
        self.assertIn("part 'centroids' holds a non-finite value (BF16 0xffff) at stage 0, head 0, centroid 0, "
                      "channel 0", self.state_error((spec, role, shape, dict(parts, centroids=bytes(c)))))
        sc = bytearray(parts["scales"])
        sc[3] = 0x7F
        self.assertIn("part 'scales' holds NaN (FP8 0x7f) at head 0, token 3, block 0",
                      self.state_error((spec, role, shape, dict(parts, scales=bytes(sc)))))
        big = np.array([7.7e37, 7.7e37], dtype="<f4").tobytes()
        self.assertIn("decode beyond the float range at head 0",
                      self.state_error((spec, role, shape, dict(parts, span_scales=big))))
        s3, r3, sh3, p3 = qvg.Codec("bf16").encode(x).__getstate__()
        fp = bytearray(p3["full_precision"])
        fp[-2:] = b"\x80\x7f"  # +inf, the last value
        self.assertIn("part 'full_precision' holds a non-finite value (BF16 0x7f80) at head %d, token %d, channel %d"
                      % (sh3[0] - 1, sh3[1] - 1, sh3[2] - 1),
                      self.state_error((s3, r3, sh3, dict(p3, full_precision=bytes(fp)))))

    def test_state_fields_of_the_wrong_type_or_range(self):
        # TypeError for a field of the wrong type, ValueError for a bad value, with the library's words.
        spec, role, shape, parts = qvg.Codec("rtn").encode(random_kv()).__getstate__()
        for bad_role in (None, 3, b"key"):
            with self.assertRaisesRegex(TypeError, "the role is a .*, not the str"):
                self.load_state((spec, bad_role, shape, parts))
        with self.assertRaisesRegex(TypeError, "sizes are ints"):
            self.load_state((spec, role, (2, "64", 64), parts))
        with self.assertRaisesRegex(ValueError, r"shape \(2, 18446744073709551616, 64\) holds a size outside the int64 range"):
            self.load_state((spec, role, (2, 2**64, 64), parts))
        with self.assertRaisesRegex(ValueError, r"shape \(2, -5, 64\) holds a negative size"):
            self.load_state((spec, role, (2, -5, 64), parts))
        with self.assertRaisesRegex(ValueError, "has 2 sizes, not 3"):
            self.load_state((spec, role, (2, 64), parts))
        with self.assertRaisesRegex(TypeError, "part 'codes' is a str, not bytes"):
            self.load_state((spec, role, shape, dict(parts, codes="abc")))

    def test_bytes_records_hold_the_pickled_state(self):
        # EncodedTensor.to_bytes / from_bytes: the C++ library's encoded tensor
        # record (qvg::serialize_encoded), holding what the pickle holds.
        import pickle
        for spec in SPECS:
            with self.subTest(spec=spec):
                e = qvg.Codec(spec).encode(random_kv(tokens=320), role="value")
                b = e.to_bytes()
                back = qvg.EncodedTensor.from_bytes(b)
                self.assertEqual(back.__getstate__(), e.__getstate__())
                self.assertEqual(back.to_bytes(), b)
                self.assertEqual(pickle.loads(pickle.dumps(back)).to_bytes(), b)
        with self.assertRaisesRegex(ValueError, "encoded tensor record: .*runs past the end"):
            qvg.EncodedTensor.from_bytes(b[:-1])
        with self.assertRaisesRegex(ValueError, "checksum mismatch"):
            qvg.EncodedTensor.from_bytes(b[:40] + bytes([b[40] ^ 1]) + b[41:])

    @unittest.skipUnless(os.path.isdir(TEST_DATA), "the source tree's tests/data is not at hand")
    def test_golden_records_written_by_the_cpp_tests(self):
        # tests/data/encoded_*.qvgt (tests/test_embed.cpp, EncodedRecord.GoldenFiles):
        # records of the same input, read here and encoded here to the same bytes.
        i = np.arange(2 * 40 * 32, dtype=np.uint64)
        h = (i * np.uint64(2654435761)) % np.uint64(2**32)
        x = (((h >> np.uint64(7)) % np.uint64(129)).astype(np.int64) - 64).astype(np.float32).reshape(2, 40, 32) / 64
        for name, role in (("encoded_qvg.qvgt", "key"), ("encoded_kivi.qvgt", "value")):
            with self.subTest(name=name):
                with open(os.path.join(TEST_DATA, name), "rb") as f:
                    golden = f.read()
                e = qvg.EncodedTensor.from_bytes(golden)
                self.assertEqual((e.shape, e.role), ((2, 40, 32), role))
                self.assertEqual(e.to_bytes(), golden)
                self.assertEqual(qvg.Codec(e.spec).encode(x, role=role).to_bytes(), golden)

    @staticmethod
    def load_state(state):
        qvg.EncodedTensor.__new__(qvg.EncodedTensor).__setstate__(state)

    def state_error(self, state):
        with self.assertRaises(ValueError) as cm:
            self.load_state(state)
        return str(cm.exception)

    def test_mutated_states_decode_or_raise_value_error(self):
        # What an unpickler may be handed: seeded random damage to every
        # part and field of valid states. The property: __setstate__ and
        # decode either succeed with the stated shape or raise ValueError
        # (never another exception, never a crash; scripts/sanitize.sh runs
        # this under ASan + UBSan).
        import random
        rng = random.Random(27)
        outcomes = {"decoded": 0, "refused": 0}
        for spec in SPECS:
            codec = qvg.Codec(spec)
            spec_s, role, shape, parts = codec.encode(random_kv(tokens=320), role="key").__getstate__()
            for _ in range(60):
                p = dict(parts)
                name = rng.choice(sorted(p))
                data = bytearray(p[name])
                how = rng.randrange(4)
                if how == 0 and data:  # flip bytes
                    for _ in range(rng.randint(1, 8)):
                        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
                elif how == 1:  # cut or grow
                    data = data[:rng.randrange(len(data) + 1)] if rng.random() < 0.5 else data + bytes(rng.randint(1, 64))
                elif how == 2:  # a part missing
                    del p[name]
                sh = tuple(shape)
                if how == 3:  # a field changed
                    sh = tuple(rng.choice([0, 1, v - 1, v + 1, 2 * v, 2**31, 2**40]) if rng.random() < 0.5 else v
                               for v in shape)
                if name in p:
                    p[name] = bytes(data)
                try:
                    e = qvg.EncodedTensor.__new__(qvg.EncodedTensor)
                    e.__setstate__((spec_s, role, sh, p))
                    out = qvg.Codec(spec_s).decode(e)
                    self.assertEqual(out.shape, sh, spec)
                    self.assertTrue(np.isfinite(out).all(), spec)  # a loaded state decodes finite (issue 41)
                    outcomes["decoded"] += 1
                except ValueError:
                    outcomes["refused"] += 1
        # both outcomes happen (the damage reaches the checks and the data)
        self.assertGreater(outcomes["decoded"], 0)
        self.assertGreater(outcomes["refused"], 0)


if __name__ == "__main__":
    unittest.main()

// The residual-overflow case of the QVG encoders, shared by the CPU test
// (test_codecs) and the GPU one (test_cuda): finite inputs whose x - c
// overflows float must be an encode error, and inputs at the safe bound must
// decode to finite values.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "qvg/codec.h"

namespace qvg::test {

/// One head of 8 x 64 values of magnitude 0.5 big .. big, every third one
/// negative: each dimension's clusters mix signs, so x - c reaches about
/// 4/3 big (3e38 overflows; 2^(126 - S) does not).
inline HeadTensor overflow_input(float big) {
  HeadTensor x(1, 8, 64);
  for (size_t i = 0; i < x.data.size(); ++i)
    x.data[i] = (i % 3 == 0 ? -big : big) * (0.5f + 0.005f * static_cast<float>((i * 7919) % 100));
  return x;
}

/// encode() must throw an Error whose message contains `phrase`.
inline void expect_encode_error(const std::function<void()>& encode, const std::string& phrase,
                                const std::string& what) {
  try {
    encode();
    ADD_FAILURE() << what << ": encoded without an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << what << ": " << e.what();
  }
}

/// The CPU decode of e holds only finite values.
inline void expect_finite_decode(const EncodedTensor& e, const std::string& what) {
  HeadTensor y;
  make_codec(e.config)->decode(e, y);
  size_t not_finite = 0;
  for (const float v : y.data) not_finite += !std::isfinite(v);
  EXPECT_EQ(not_finite, 0u) << what;
}

}  // namespace qvg::test

// StreamingKVCache tests (being written).
#include <gtest/gtest.h>

#include "qvg/cache.h"

TEST(Cache, Placeholder) { SUCCEED(); }

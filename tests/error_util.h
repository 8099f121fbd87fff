// Shared by the CPU tests: the message of the qvg::Error a call throws.
#pragma once

#include <string>

#include "qvg/common.h"

namespace qvg::test {

/// The what() of the qvg::Error f() throws; "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace qvg::test

# Sanitizers and fuzzing instrumentation for every target of the build.
#
# QVG_SANITIZE: a -fsanitize= list, e.g. "address,undefined" or "thread";
# empty = none. Every C++ compile and link gets -fsanitize=<list>
# -fno-omit-frame-pointer, and -fno-sanitize-recover=all so that any UBSan
# report ends the process with an error (a test that triggers one fails).
#
# QVG_BUILD_FUZZ (clang only): every C++ compile also gets
# -fsanitize=fuzzer-no-link (coverage for libFuzzer); fuzz/ holds the
# targets, linked with -fsanitize=fuzzer. Usually combined with
# QVG_SANITIZE=address,undefined (scripts/fuzz.sh).
set(QVG_SANITIZE "" CACHE STRING "Sanitizers for every target: a -fsanitize= list such as address,undefined or thread (empty: none)")

if(QVG_SANITIZE)
  if(QVG_SANITIZE MATCHES "thread" AND QVG_SANITIZE MATCHES "address")
    message(FATAL_ERROR "QVG_SANITIZE=${QVG_SANITIZE}: ThreadSanitizer cannot be combined with AddressSanitizer")
  endif()
  set(_qvg_san -fsanitize=${QVG_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_qvg_san}>")
  add_link_options("$<$<LINK_LANGUAGE:CXX>:-fsanitize=${QVG_SANITIZE}>")
  message(STATUS "qvg: sanitizers ${QVG_SANITIZE} on every target")
endif()

if(QVG_BUILD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "QVG_BUILD_FUZZ needs clang (libFuzzer); configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>")
endif()

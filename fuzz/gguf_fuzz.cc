// libFuzzer target for the GGUF reader: see gguf_fuzz_body.h. Build and run with
// bench/fuzz_gguf.sh.
#include <cstddef>
#include <cstdint>

#include "gguf_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvserve::Status s = kvserve::fuzz::RunGgufFuzzBody(data, size);
  // Internal errors are broken invariants of the reader, not bad input: report them.
  if (s.code() == kvserve::StatusCode::kInternal) __builtin_trap();
  return 0;
}

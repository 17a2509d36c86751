// The stub answer both HTTP-layer stubs give to POST /v1/completions: usage.prompt_tokens is
// the number of entries of the body's "prompt" array (what abuse_probe.py's pipelining probe
// checks), so the two libraries are compared on framing alone, with no engine behind them.
#pragma once
#include <stdio.h>
#include <string.h>

static inline int StubPromptTokens(const char* body, size_t len) {
  const char* open = (const char*)memchr(body, (int)'[', len);
  if (open == NULL) return 0;
  int n = 1;
  for (const char* p = open + 1; p < body + len && *p != ']'; ++p) n += *p == ',';
  return n;
}

static inline int StubCompletion(const char* body, size_t len, char* out, size_t out_len) {
  return snprintf(out, out_len, "{\"choices\":[{\"text\":\"x\"}],\"usage\":{\"prompt_tokens\":%d}}",
                  StubPromptTokens(body, len));
}

#include "promptlint/prompt_lint_report.h"

#include "base/str_format.h"

namespace kvserve::promptlint {
namespace {

// Quoted, with control characters escaped; longer than max_chars: head ... tail (cut on UTF-8
// character boundaries).
std::string Shown(const std::string& text, size_t max_chars = 72) {
  std::string s = text;
  if (s.size() > max_chars) {
    size_t head = max_chars / 2, tail = s.size() - (max_chars - head);
    while (head > 0 && (static_cast<unsigned char>(s[head]) & 0xC0) == 0x80) --head;
    while (tail < s.size() && (static_cast<unsigned char>(s[tail]) & 0xC0) == 0x80) ++tail;
    s = s.substr(0, head) + " ... " + s.substr(tail);
  }
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '"') {
      out += "\\\"";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += StrFormat("\\x%02x", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Pct(double rate) { return StrFormat("%.1f%%", 100.0 * rate); }

std::string Range(int64_t lo, int64_t hi) {
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + ".." + std::to_string(hi);
}

}  // namespace

std::string FormatPromptLintText(const PromptLintReport& r) {
  const PromptLintOptions& o = r.options;
  std::string out = StrFormat(
      "prompt-lint: %lld requests in %lld cache namespace%s, %lld prompt tokens; block size %lld, "
      "%s cache\n",
      static_cast<long long>(r.num_requests), static_cast<long long>(r.num_namespaces),
      r.num_namespaces == 1 ? "" : "s", static_cast<long long>(r.num_prompt_tokens),
      static_cast<long long>(o.block_size_tokens),
      o.capacity_blocks > 0 ? StrFormat("%lld-block", static_cast<long long>(o.capacity_blocks)).c_str()
                            : "unbounded");
  out += StrFormat("prefix-cache hit rate (replayed in file order): %s today", Pct(r.hit_rate).c_str());
  if (r.num_spans_found > 0) {
    out += StrFormat(", %s with %s moved after the shared content\n", Pct(r.hit_rate_all_reordered).c_str(),
                     r.num_spans_found == 1 ? "the span below" : "every span found");
  } else {
    out += "\n";
  }
  if (r.num_spans_found == 0) {
    out += StrFormat(
        "no volatile span: no region that differs between requests is followed by %lld or more "
        "tokens they share (%lld cluster%s of requests sharing content)\n",
        static_cast<long long>(o.min_shared_tokens), static_cast<long long>(r.num_clusters),
        r.num_clusters == 1 ? "" : "s");
    return out;
  }
  if (static_cast<int64_t>(r.spans.size()) < r.num_spans_found) {
    out += StrFormat("%lld spans found; the %lld that cost the most hits:\n",
                     static_cast<long long>(r.num_spans_found), static_cast<long long>(r.spans.size()));
  }
  for (size_t i = 0; i < r.spans.size(); ++i) {
    const VolatileSpan& s = r.spans[i];
    out += StrFormat("\nspan %zu: tokens [%lld, %s) vary in %lld of %lld requests sharing content "
                     "(first: line %lld%s)\n",
                     i + 1, static_cast<long long>(s.begin_tokens),
                     Range(s.min_end_tokens, s.max_end_tokens).c_str(),
                     static_cast<long long>(s.num_requests),
                     static_cast<long long>(s.num_cluster_requests),
                     static_cast<long long>(s.first_line),
                     s.cache_namespace.empty() ? "" : (", cache_salt " + Shown(s.cache_namespace)).c_str());
    out += StrFormat("  span length:   %s tokens\n", Range(s.min_span_tokens, s.max_span_tokens).c_str());
    out += "  after:         " + Shown(s.context_before_text) + "\n";
    for (size_t e = 0; e < s.examples.size(); ++e) {
      const SpanExample& x = s.examples[e];
      out += StrFormat("  %s line %-6lld %s\n", e == 0 ? "values:" : "       ",
                       static_cast<long long>(x.line), Shown(x.text).c_str());
    }
    out += StrFormat("  followed by:   %s (%lld tokens the same in every one)\n",
                     Shown(s.shared_start_text, 48).c_str(), static_cast<long long>(s.shared_tokens));
    out += StrFormat("  hit rate:      %s today -> %s with this span after the shared content "
                     "(these requests: %s -> %s; +%lld cached tokens)\n",
                     Pct(s.hit_rate_before).c_str(), Pct(s.hit_rate_after).c_str(),
                     Pct(s.cluster_hit_rate_before).c_str(), Pct(s.cluster_hit_rate_after).c_str(),
                     static_cast<long long>(s.cached_tokens_after - s.cached_tokens_before));
  }
  return out;
}

nlohmann::ordered_json PromptLintToJson(const PromptLintReport& r) {
  using ojson = nlohmann::ordered_json;
  ojson spans = ojson::array();
  for (const VolatileSpan& s : r.spans) {
    ojson examples = ojson::array();
    for (const SpanExample& x : s.examples) {
      examples.push_back({{"line", x.line},
                          {"begin_tokens", x.begin_tokens},
                          {"end_tokens", x.end_tokens},
                          {"text", x.text},
                          {"token_ids", x.tokens}});
    }
    spans.push_back({{"namespace", s.cache_namespace},
                     {"first_line", s.first_line},
                     {"requests", s.num_requests},
                     {"cluster_requests", s.num_cluster_requests},
                     {"begin_tokens", s.begin_tokens},
                     {"end_tokens_min", s.min_end_tokens},
                     {"end_tokens_max", s.max_end_tokens},
                     {"span_tokens_min", s.min_span_tokens},
                     {"span_tokens_max", s.max_span_tokens},
                     {"shared_tokens", s.shared_tokens},
                     {"context_before", s.context_before_text},
                     {"shared_start", s.shared_start_text},
                     {"examples", std::move(examples)},
                     {"cached_tokens_before", s.cached_tokens_before},
                     {"cached_tokens_after", s.cached_tokens_after},
                     {"hit_rate_before", s.hit_rate_before},
                     {"hit_rate_after", s.hit_rate_after},
                     {"cluster_hit_rate_before", s.cluster_hit_rate_before},
                     {"cluster_hit_rate_after", s.cluster_hit_rate_after}});
  }
  const PromptLintOptions& o = r.options;
  return {{"requests", r.num_requests},
          {"namespaces", r.num_namespaces},
          {"prompt_tokens", r.num_prompt_tokens},
          {"block_size", o.block_size_tokens},
          {"capacity_blocks", o.capacity_blocks},
          {"min_shared_tokens", o.min_shared_tokens},
          {"kgram_tokens", o.kgram_tokens},
          {"clusters", r.num_clusters},
          {"spans_found", r.num_spans_found},
          {"cached_tokens", r.cached_tokens},
          {"hit_rate", r.hit_rate},
          {"cached_tokens_all_reordered", r.cached_tokens_all_reordered},
          {"hit_rate_all_reordered", r.hit_rate_all_reordered},
          {"spans", std::move(spans)}};
}

}  // namespace kvserve::promptlint

#include "loadgen/dataset.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "base/check.h"

namespace kvserve::loadgen {
namespace {

using json = nlohmann::json;


// Common English words; most are one token (with their leading space) in BPE and
// SentencePiece vocabularies.
constexpr const char* kWords[] = {
    "the",    "of",     "and",    "to",     "in",     "is",     "you",    "that",   "it",
    "he",     "was",    "for",    "on",     "are",    "as",     "with",   "his",    "they",
    "at",     "be",     "this",   "have",   "from",   "or",     "one",    "had",    "by",
    "word",   "but",    "not",    "what",   "all",    "were",   "we",     "when",   "your",
    "can",    "said",   "there",  "use",    "an",     "each",   "which",  "she",    "do",
    "how",    "their",  "if",     "will",   "up",     "other",  "about",  "out",    "many",
    "then",   "them",   "these",  "so",     "some",   "her",    "would",  "make",   "like",
    "him",    "into",   "time",   "has",    "look",   "two",    "more",   "write",  "go",
    "see",    "number", "no",     "way",    "could",  "people", "my",     "than",   "first",
    "water",  "been",   "call",   "who",    "oil",    "its",    "now",    "find",   "long",
    "down",   "day",    "did",    "get",    "come",   "made",   "may",    "part",   "over",
    "new",    "sound",  "take",   "only",   "little", "work",   "know",   "place",  "year",
    "live",   "me",     "back",   "give",   "most",   "very",   "after",  "thing",  "our",
    "just",   "name",   "good",   "man",    "think",  "say",    "great",  "where",  "help",
    "through", "much",  "before", "line",   "right",  "too",    "mean",   "old",    "any",
    "same",   "tell",   "boy",    "follow", "came",   "want",   "show",   "also",   "around",
    "form",   "three",  "small",  "set",    "put",    "end",    "does",   "another", "well",
    "large",  "must",   "big",    "even",   "such",   "because", "turn",  "here",   "why",
    "ask",    "went",   "men",    "read",   "need",   "land",   "different", "home", "us",
    "move",   "try",    "kind",   "hand",   "picture", "again", "change", "off",    "play",
    "spell",  "air",    "away",   "animal", "house",  "point",  "page",   "letter", "mother",
    "answer", "found",  "study",  "still",  "learn",  "should", "world",  "high",   "every",
    "near",   "add",    "food",   "between", "own",   "below",  "country", "plant", "last",
    "school", "father", "keep",   "tree",   "never",  "start",  "city",   "earth",  "eye",
    "light",  "thought", "head",  "under",  "story",  "saw",    "left",   "few",    "while",
    "along",  "might",  "close",  "something", "seem", "next",  "hard",   "open",   "example",
    "begin",  "life",   "always", "those",  "both",   "paper",  "together", "got",  "group",
    "often",  "run",    "important", "until", "children", "side", "feet", "car",    "mile",
    "night",  "walk",   "white",  "sea",    "began",  "grow",   "took",   "river",  "four",
    "carry",  "state",  "once",   "book",   "hear",   "stop",   "without", "second", "late",
};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

// Draws `n` ids in [begin, end) from `rng`, appended to `out`.
void AppendRandomIds(std::mt19937_64& rng, int64_t n, int32_t begin, int32_t end,
                     std::vector<int32_t>* out) {
  std::uniform_int_distribution<int32_t> dist(begin, end - 1);
  for (int64_t i = 0; i < n; ++i) out->push_back(dist(rng));
}

// Uniform integer in [floor(len * (1 - r)), ceil(len * (1 + r))], at least `min_value`.
int64_t DrawLength(std::mt19937_64& rng, int64_t len, double ratio, int64_t min_value) {
  int64_t lo = static_cast<int64_t>(std::floor(static_cast<double>(len) * (1.0 - ratio)));
  int64_t hi = static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1.0 + ratio)));
  lo = std::max(lo, min_value);
  hi = std::max(hi, lo);
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  return dist(rng);
}

// Converts token-id prompts to text when asked to.
void ApplyPromptFormat(const DatasetOptions& o, std::vector<BenchRequest>* requests) {
  if (o.prompt_format != PromptFormat::kText) return;
  for (BenchRequest& r : *requests) {
    if (r.prompt_token_ids.empty()) continue;
    r.prompt_text = TokenIdsToText(r.prompt_token_ids);
    r.prompt_token_ids.clear();
    r.prompt_token_ids.shrink_to_fit();
  }
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLossError("cannot read " + path);
  return ss.str();
}

std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    pos = nl + 1;
  }
  return lines;
}

bool IsBlank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

std::string LineError(size_t line_index, const std::string& what) {
  return "line " + std::to_string(line_index + 1) + ": " + what;
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// "YYYY-MM-DD hh:mm:ss[.fraction]" -> ms since the epoch (UTC).
std::optional<double> ParseTimestampMs(std::string_view s) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, consumed = 0;
  double sec = 0.0;
  const std::string str(s);
  if (std::sscanf(str.c_str(), "%d-%d-%d %d:%d:%lf%n", &y, &mo, &d, &h, &mi, &sec, &consumed) != 6) {
    return std::nullopt;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 ||
      sec >= 61) {
    return std::nullopt;
  }
  const double days = static_cast<double>(DaysFromCivil(y, mo, d));
  return ((days * 24 + h) * 60 + mi) * 60000.0 + sec * 1000.0;
}

std::vector<BenchRequest> TakeFirst(std::vector<BenchRequest> v, int64_t n) {
  if (n > 0 && static_cast<size_t>(n) < v.size()) v.resize(static_cast<size_t>(n));
  return v;
}

}  // namespace

std::string TokenIdsToText(const std::vector<int32_t>& ids) {
  std::string text;
  text.reserve(ids.size() * 6);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) text += ' ';
    text += kWords[static_cast<uint32_t>(ids[i]) % kNumWords];
  }
  return text;
}

int64_t EstimateTextTokens(std::string_view text) {
  return std::max<int64_t>(1, static_cast<int64_t>((text.size() + 3) / 4));
}

std::vector<BenchRequest> GenerateRandomDataset(const DatasetOptions& o) {
  std::mt19937_64 rng(HashCombine(o.seed, 0x72616e64));
  const int64_t n = o.num_prompts > 0 ? o.num_prompts : 1000;
  std::vector<int32_t> prefix;
  AppendRandomIds(rng, o.random_prefix_len, o.vocab_begin, o.vocab_end, &prefix);
  std::vector<BenchRequest> out(static_cast<size_t>(n));
  for (BenchRequest& r : out) {
    const int64_t in_len = DrawLength(rng, o.random_input_len, o.random_range_ratio, 1);
    const int64_t out_len = DrawLength(rng, o.random_output_len, o.random_range_ratio, 1);
    r.prompt_token_ids = prefix;
    AppendRandomIds(rng, in_len, o.vocab_begin, o.vocab_end, &r.prompt_token_ids);
    r.prompt_len = static_cast<int64_t>(r.prompt_token_ids.size());
    r.output_len = out_len;
    r.fixed_output_len = true;
  }
  ApplyPromptFormat(o, &out);
  return out;
}

std::vector<BenchRequest> GenerateSharedPrefixDataset(const DatasetOptions& o) {
  std::mt19937_64 rng(HashCombine(o.seed, 0x73686172));
  std::vector<BenchRequest> out;
  out.reserve(static_cast<size_t>(o.sp_num_groups * o.sp_prompts_per_group));
  for (int64_t g = 0; g < o.sp_num_groups; ++g) {
    std::vector<int32_t> system;
    AppendRandomIds(rng, o.sp_system_prompt_len, o.vocab_begin, o.vocab_end, &system);
    for (int64_t q = 0; q < o.sp_prompts_per_group; ++q) {
      BenchRequest r;
      r.prompt_token_ids = system;
      AppendRandomIds(rng, o.sp_question_len, o.vocab_begin, o.vocab_end, &r.prompt_token_ids);
      r.prompt_len = static_cast<int64_t>(r.prompt_token_ids.size());
      r.output_len = o.sp_output_len;
      r.fixed_output_len = true;
      out.push_back(std::move(r));
    }
  }
  std::shuffle(out.begin(), out.end(), rng);
  out = TakeFirst(std::move(out), o.num_prompts);
  ApplyPromptFormat(o, &out);
  return out;
}

StatusOr<std::vector<BenchRequest>> ParseShareGptDataset(std::string_view json_text,
                                                         const DatasetOptions& o) {
  json doc = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgumentError("ShareGPT file is not valid JSON");
  if (!doc.is_array()) return InvalidArgumentError("ShareGPT file: expected a JSON array");
  std::vector<BenchRequest> out;
  for (const json& entry : doc) {
    if (!entry.is_object()) continue;
    auto it = entry.find("conversations");
    if (it == entry.end()) it = entry.find("conversation");
    if (it == entry.end() || !it->is_array()) continue;
    const json& turns = *it;
    std::string prompt, reply;
    size_t i = 0;
    for (; i < turns.size(); ++i) {
      const json& t = turns[i];
      if (!t.is_object() || !t.contains("value") || !t["value"].is_string()) continue;
      const std::string from = t.value("from", std::string());
      if (from == "human" || from == "user") {
        prompt = t["value"].get<std::string>();
        break;
      }
    }
    if (prompt.empty()) continue;
    for (++i; i < turns.size(); ++i) {
      const json& t = turns[i];
      if (t.is_object() && t.contains("value") && t["value"].is_string()) {
        reply = t["value"].get<std::string>();
        break;
      }
    }
    BenchRequest r;
    r.prompt_len = EstimateTextTokens(prompt);
    r.prompt_text = std::move(prompt);
    if (o.sharegpt_output_len > 0) {
      r.output_len = o.sharegpt_output_len;
      r.fixed_output_len = true;
    } else if (!reply.empty()) {
      r.output_len = EstimateTextTokens(reply);
      r.fixed_output_len = false;
    } else {
      r.output_len = 256;
      r.fixed_output_len = true;
    }
    out.push_back(std::move(r));
  }
  if (out.empty()) return InvalidArgumentError("ShareGPT file: no conversation with a human turn");
  std::mt19937_64 rng(HashCombine(o.seed, 0x73676174));
  std::shuffle(out.begin(), out.end(), rng);
  return TakeFirst(std::move(out), o.num_prompts);
}

StatusOr<std::vector<TraceRequest>> ParseAzureTrace(std::string_view text) {
  const std::vector<std::string_view> lines = SplitLines(text);
  size_t li = 0;
  while (li < lines.size() && IsBlank(lines[li])) ++li;
  if (li == lines.size()) return InvalidArgumentError("Azure trace: empty file");
  // Header: find the three columns by name.
  std::vector<std::string> cols;
  {
    std::string cell;
    std::stringstream ss{std::string(lines[li])};
    while (std::getline(ss, cell, ',')) cols.push_back(cell);
  }
  int ts_col = -1, in_col = -1, out_col = -1;
  for (size_t c = 0; c < cols.size(); ++c) {
    if (cols[c] == "TIMESTAMP") ts_col = static_cast<int>(c);
    if (cols[c] == "ContextTokens") in_col = static_cast<int>(c);
    if (cols[c] == "GeneratedTokens") out_col = static_cast<int>(c);
  }
  if (ts_col < 0 || in_col < 0 || out_col < 0) {
    return InvalidArgumentError(
        "Azure trace: the header must name TIMESTAMP, ContextTokens and GeneratedTokens");
  }
  std::vector<TraceRequest> rows;
  double first_ms = 0.0;
  for (++li; li < lines.size(); ++li) {
    if (IsBlank(lines[li])) continue;
    std::vector<std::string> cells;
    std::string cell;
    std::stringstream ss{std::string(lines[li])};
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    const size_t need = static_cast<size_t>(std::max({ts_col, in_col, out_col})) + 1;
    if (cells.size() < need) return InvalidArgumentError(LineError(li, "too few columns"));
    std::optional<double> ts = ParseTimestampMs(cells[static_cast<size_t>(ts_col)]);
    if (!ts) return InvalidArgumentError(LineError(li, "bad TIMESTAMP '" + cells[static_cast<size_t>(ts_col)] + "'"));
    TraceRequest row;
    char* end = nullptr;
    const std::string& in_s = cells[static_cast<size_t>(in_col)];
    const std::string& out_s = cells[static_cast<size_t>(out_col)];
    row.input_tokens = std::strtoll(in_s.c_str(), &end, 10);
    if (in_s.empty() || *end != '\0' || row.input_tokens < 0) {
      return InvalidArgumentError(LineError(li, "bad ContextTokens '" + in_s + "'"));
    }
    row.output_tokens = std::strtoll(out_s.c_str(), &end, 10);
    if (out_s.empty() || *end != '\0' || row.output_tokens < 0) {
      return InvalidArgumentError(LineError(li, "bad GeneratedTokens '" + out_s + "'"));
    }
    if (rows.empty()) first_ms = *ts;
    row.timestamp_ms = *ts - first_ms;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<int32_t> MooncakePromptTokens(const TraceRequest& row,
                                          int64_t tokens_per_hash_id, int32_t vocab_begin,
                                          int32_t vocab_end) {
  KV_CHECK_GT(tokens_per_hash_id, 0);
  KV_CHECK_LT(vocab_begin, vocab_end);
  const int64_t h = tokens_per_hash_id;
  // Same number of blocks as the trace: scale the length by H / 512, rounding up.
  const int64_t len = std::max<int64_t>(
      1, (row.input_tokens * h + kMooncakeTraceBlockTokens - 1) / kMooncakeTraceBlockTokens);
  // The parser's input_length check (at most 512 tokens per hash id) keeps every token inside
  // a hash block.
  KV_CHECK_LE(len, static_cast<int64_t>(row.hash_ids.size()) * h) << "input_tokens "
                                                                   << row.input_tokens;
  const uint64_t range = static_cast<uint64_t>(vocab_end - vocab_begin);
  std::vector<int32_t> ids(static_cast<size_t>(len));
  for (int64_t p = 0; p < len; ++p) {
    const uint64_t key = HashCombine(
        0x6d6f6f6e ^ static_cast<uint64_t>(row.hash_ids[static_cast<size_t>(p / h)]),
        static_cast<uint64_t>(p % h));
    ids[static_cast<size_t>(p)] = vocab_begin + static_cast<int32_t>(key % range);
  }
  return ids;
}

StatusOr<std::vector<BenchRequest>> BuildDataset(const DatasetOptions& o) {
  if (o.num_prompts < 0) return InvalidArgumentError("--num-prompts must be >= 0");
  if (o.vocab_begin < 0 || o.vocab_end <= o.vocab_begin) {
    return InvalidArgumentError("--vocab-range must be BEGIN END with 0 <= BEGIN < END");
  }
  const std::string& n = o.name;
  std::vector<BenchRequest> requests;
  if (n == "random") {
    if (o.random_input_len < 1) return InvalidArgumentError("--random-input-len must be >= 1");
    if (o.random_output_len < 1) return InvalidArgumentError("--random-output-len must be >= 1");
    if (o.random_prefix_len < 0) return InvalidArgumentError("--random-prefix-len must be >= 0");
    if (!(o.random_range_ratio >= 0.0 && o.random_range_ratio < 1.0)) {
      return InvalidArgumentError("--random-range-ratio must be in [0, 1)");
    }
    requests = GenerateRandomDataset(o);
  } else if (n == "shared-prefix") {
    if (o.sp_num_groups < 1) return InvalidArgumentError("--sp-num-groups must be >= 1");
    if (o.sp_prompts_per_group < 1) return InvalidArgumentError("--sp-prompts-per-group must be >= 1");
    if (o.sp_system_prompt_len < 0) return InvalidArgumentError("--sp-system-prompt-len must be >= 0");
    if (o.sp_question_len < 0) return InvalidArgumentError("--sp-question-len must be >= 0");
    if (o.sp_system_prompt_len + o.sp_question_len < 1) {
      return InvalidArgumentError("--sp-system-prompt-len + --sp-question-len must be >= 1");
    }
    if (o.sp_output_len < 1) return InvalidArgumentError("--sp-output-len must be >= 1");
    requests = GenerateSharedPrefixDataset(o);
  } else if (n == "sharegpt" || n == "mooncake" || n == "azure") {
    if (o.dataset_path.empty()) return InvalidArgumentError("--dataset-name " + n + " needs --dataset-path");
    KV_ASSIGN_OR_RETURN(std::string text, ReadFile(o.dataset_path));
    if (n == "sharegpt") {
      if (o.sharegpt_output_len < 0) return InvalidArgumentError("--sharegpt-output-len must be >= 0");
      auto r = ParseShareGptDataset(text, o);
      if (!r.ok()) return r.status().WithContext(o.dataset_path);
      requests = std::move(r).value();
    } else {
      if (n == "mooncake" && (o.tokens_per_hash_id < 1 || o.tokens_per_hash_id > (1 << 20))) {
        return InvalidArgumentError("--tokens-per-hash-id must be in [1, 1048576]");
      }
      auto rows = n == "mooncake" ? ParseMooncakeTrace(text, kMooncakeTraceBlockTokens)
                                   : ParseAzureTrace(text);
      if (!rows.ok()) return rows.status().WithContext(o.dataset_path);
      std::vector<TraceRequest>& rows_by_time = *rows;
      std::stable_sort(rows_by_time.begin(), rows_by_time.end(),
                       [](const TraceRequest& a, const TraceRequest& b) {
                         return a.timestamp_ms < b.timestamp_ms;
                       });
      if (o.num_prompts > 0 && static_cast<size_t>(o.num_prompts) < rows_by_time.size()) {
        rows_by_time.resize(static_cast<size_t>(o.num_prompts));
      }
      if (rows_by_time.empty()) return InvalidArgumentError(o.dataset_path + ": the trace has no requests");
      const double first_ms = rows_by_time.front().timestamp_ms;
      for (size_t i = 0; i < rows_by_time.size(); ++i) {
        const TraceRequest& row = rows_by_time[i];
        BenchRequest r;
        if (n == "mooncake") {
          r.prompt_token_ids =
              MooncakePromptTokens(row, o.tokens_per_hash_id, o.vocab_begin, o.vocab_end);
        } else {
          std::mt19937_64 rng(HashCombine(HashCombine(o.seed, 0x617a7572), i));
          AppendRandomIds(rng, std::max<int64_t>(1, row.input_tokens), o.vocab_begin, o.vocab_end,
                          &r.prompt_token_ids);
        }
        r.prompt_len = static_cast<int64_t>(r.prompt_token_ids.size());
        r.output_len = std::max<int64_t>(1, row.output_tokens);
        r.fixed_output_len = true;
        r.trace_arrival_ms = row.timestamp_ms - first_ms;
        requests.push_back(std::move(r));
      }
      ApplyPromptFormat(o, &requests);
    }
  } else {
    return InvalidArgumentError("unknown --dataset-name '" + n +
                                "' (random, shared-prefix, sharegpt, mooncake, azure)");
  }
  if (requests.empty()) return InvalidArgumentError("the dataset has no requests");
  if (!(o.repeat_fraction >= 0.0 && o.repeat_fraction < 1.0)) {
    return InvalidArgumentError("--repeat-fraction must be in [0, 1)");
  }
  ApplyRepeats(o.repeat_fraction, o.seed, &requests);
  return requests;
}

void ApplyRepeats(double fraction, uint64_t seed, std::vector<BenchRequest>* requests) {
  if (fraction <= 0.0) return;
  std::mt19937_64 rng(HashCombine(seed, 0x72657065617473));  // "repeats"
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  for (size_t i = 1; i < requests->size(); ++i) {
    if (coin(rng) >= fraction) continue;
    const size_t j = static_cast<size_t>(rng() % i);
    const double arrival = (*requests)[i].trace_arrival_ms;
    (*requests)[i] = (*requests)[j];
    (*requests)[i].trace_arrival_ms = arrival;
  }
}

std::vector<double> ComputeArrivalTimes(const std::vector<BenchRequest>& requests,
                                        const ArrivalOptions& o) {
  std::vector<double> t(requests.size(), 0.0);
  const bool all_traced =
      !requests.empty() && std::all_of(requests.begin(), requests.end(), [](const BenchRequest& r) {
        return r.trace_arrival_ms >= 0.0;
      });
  if (!o.request_rate_per_s.has_value() && all_traced) {
    const double first_ms = requests.front().trace_arrival_ms;
    double prev = 0.0;
    for (size_t i = 0; i < requests.size(); ++i) {
      // Non-decreasing even if the caller did not sort by timestamp.
      prev = std::max(prev, (requests[i].trace_arrival_ms - first_ms) / 1000.0 * o.trace_time_scale);
      t[i] = prev;
    }
    return t;
  }
  const double rate = o.request_rate_per_s.value_or(std::numeric_limits<double>::infinity());
  if (!std::isfinite(rate)) return t;
  KV_CHECK_GT(rate, 0.0);
  std::mt19937_64 rng(HashCombine(o.seed, 0x706f6973));
  std::exponential_distribution<double> gap(rate);
  double now = 0.0;
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = now;  // the first request goes at once, as in vLLM
    now += gap(rng);
  }
  return t;
}

}  // namespace kvserve::loadgen

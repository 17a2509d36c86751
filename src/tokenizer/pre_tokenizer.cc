#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

// Regex lists per llama.cpp pre-tokenizer kind (llama-vocab.cpp, llm_tokenizer_bpe). Each
// list is applied in order; see PreTokenizer.
constexpr const char* kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr const char* kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kCjk = R"re([一-龥ࠀ-一가-퟿]+)re";
constexpr const char* kDeepseekLlmLetters =
    // Letter ranges of the deepseek-llm tokenizer.json, as code points (several are
    // canonical singletons that text tools would normalize away).
    R"re(\s?[)re"
    R"re(A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF})re"
    R"re(\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D})re"
    R"re(\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5})re"
    R"re(\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})re"
    R"re(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B})re"
    R"re(\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})re"
    R"re(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})re"
    R"re(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})re"
    R"re(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC})re"
    R"re(\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115})re"
    R"re(\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})re"
    R"re(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})re"
    R"re(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3})re"
    R"re(\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})re"
    R"re(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})re"
    R"re(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})re"
    R"re(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})re"
    R"re(\x{1E900}-\x{1E943})re"
    R"re(]+)re";
constexpr const char* kPoro = R"re( ?[^(\s|.,!?…。，、।۔،)]+)re";
constexpr const char* kTekken =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

struct PreKind {
  std::vector<const char*> names;
  std::vector<const char*> regexes;
  bool ignore_merges = false;
};

const std::vector<PreKind>& PreKinds() {
  static const std::vector<PreKind>* kinds = new std::vector<PreKind>{
      {{"default"},
       {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", "[0-9][0-9][0-9]"}},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es",
        "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion"},
       {kGpt2}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
        "lfm2"},
       {kLlama3},
       /*ignore_merges=*/true},
      {{"dbrx", "smaug-bpe", "chatglm-bpe"}, {kLlama3}},
      {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"}, {kQwen2}},
      {{"deepseek-llm"},
       {"[\r\n]", kDeepseekLlmLetters, R"re(\s?[!-/:-~！-／：-～‘-‟　-。]+)re", R"re(\s+$)re",
        kCjk, R"re(\p{N}+)re"}},
      {{"deepseek-v3"},
       {R"re(\p{N}{1,3})re", R"re([一-龥぀-ゟ゠-ヿ]+)re",
        R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {{"deepseek-coder"},
       {"[\r\n]", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kCjk, R"re(\p{N})re"}},
      {{"falcon"}, {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {R"re(\p{N})re", kGpt2}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kPoro}},
      {{"viking"}, {kPoro, R"re(\p{N})re"}},
      {{"tekken"}, {kTekken}, /*ignore_merges=*/true},
      {{"gpt-4o", "llama4"}, {kGpt4o}},
      {{"chameleon"},
       {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", R"re(([\t\n]|    |  ))re",
        R"re(\p{N})re", R"re([\p{P}!-/:-@\[-`{-~])re", kGpt2}},
  };
  return *kinds;
}

const PreKind* FindPreKind(std::string_view pre) {
  for (const PreKind& kind : PreKinds()) {
    for (const char* name : kind.names) {
      if (pre == name) return &kind;
    }
  }
  return nullptr;
}

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

const char kGpt2PreTokenizerRegex[] =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";

StatusOr<std::vector<std::string>> PreTokenizerRegexes(std::string_view pre) {
  const PreKind* kind = FindPreKind(pre);
  if (kind == nullptr) {
    std::string known;
    for (const std::string& name : SupportedPreTokenizerNames()) {
      known += known.empty() ? name : ", " + name;
    }
    return NotFoundError("unknown BPE pre-tokenizer '" + std::string(pre) +
                         "' (supported: " + known + ")");
  }
  return std::vector<std::string>(kind->regexes.begin(), kind->regexes.end());
}

std::vector<std::string> SupportedPreTokenizerNames() {
  std::vector<std::string> names;
  for (const PreKind& kind : PreKinds()) names.insert(names.end(), kind.names.begin(), kind.names.end());
  std::sort(names.begin(), names.end());
  return names;
}

bool PreTokenizerIgnoresMerges(std::string_view pre) {
  const PreKind* kind = FindPreKind(pre);
  return kind != nullptr && kind->ignore_merges;
}

// Decodes like llama.cpp's unicode_cpts_from_utf8: a lead byte with the right number of
// continuation bytes is one code point (overlong forms accepted); anything else consumes one
// byte and yields U+FFFD.
std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cpt = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cpt = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cpt = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cpt = c & 0x07;
    }
    bool ok = len > 0 && i + len <= n;
    for (int k = 1; ok && k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) {
        ok = false;
      } else {
        cpt = (cpt << 6) | (s[i + k] & 0x3F);
      }
    }
    if (!ok) {
      AppendUtf8(0xFFFD, &out);
      ++i;
      continue;
    }
    if ((cpt >= 0xD800 && cpt <= 0xDFFF) || cpt > 0x10FFFF) cpt = 0xFFFD;
    AppendUtf8(cpt, &out);
    i += len;
  }
  return out;
}

class PreTokenizerImpl {
 public:
  std::vector<std::unique_ptr<pcre2_code, CodeDeleter>> codes;
  uint32_t max_capture_pairs = 1;
};

PreTokenizer::PreTokenizer(std::unique_ptr<PreTokenizerImpl> impl) : impl_(std::move(impl)) {}
PreTokenizer::~PreTokenizer() = default;

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(
    const std::vector<std::string>& regexes) {
  auto impl = std::make_unique<PreTokenizerImpl>();
  for (const std::string& regex : regexes) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    // DOLLAR_ENDONLY: `$` is the end of the piece only (std::regex semantics, as in llama.cpp).
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error_code,
                                     &error_offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      return InvalidArgumentError("invalid pre-tokenizer regex '" + regex + "' at offset " +
                                  std::to_string(error_offset) + ": " +
                                  reinterpret_cast<const char*>(message));
    }
    // JIT is optional: when unavailable, matching falls back to the interpreter.
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    uint32_t capture_count = 0;
    pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &capture_count);
    impl->max_capture_pairs = std::max(impl->max_capture_pairs, capture_count + 1);
    impl->codes.emplace_back(code);
  }
  return std::unique_ptr<PreTokenizer>(new PreTokenizer(std::move(impl)));
}

std::vector<std::string> PreTokenizer::Split(std::string_view text) const {
  const std::string clean = SanitizeUtf8(text);
  // Pieces as [begin, end) byte offsets into `clean`.
  std::vector<std::pair<size_t, size_t>> pieces;
  if (!clean.empty()) pieces.emplace_back(0, clean.size());
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
      pcre2_match_data_create(impl_->max_capture_pairs, nullptr));
  const auto* subject_base = reinterpret_cast<PCRE2_SPTR>(clean.data());
  std::vector<std::pair<size_t, size_t>> next;
  for (const auto& code : impl_->codes) {
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const auto& [begin, end] : pieces) {
      // The subject is the piece alone, so lookaheads and `$` stop at its end.
      const PCRE2_SPTR subject = subject_base + begin;
      const size_t length = end - begin;
      size_t pos = 0;        // where the next search starts
      size_t emitted = 0;    // end of the last emitted piece
      while (pos < length) {
        int rc = pcre2_match(code.get(), subject, length, pos, PCRE2_NO_UTF_CHECK, match.get(),
                             nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
          rc = pcre2_match(code.get(), subject, length, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                           match.get(), nullptr);
        }
        if (rc < 0) break;  // no match (or a resource limit): the rest is one piece
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
        const size_t m_begin = ovector[0];
        const size_t m_end = ovector[1];
        if (m_end <= m_begin) {
          // Empty match: step over one UTF-8 character.
          ++pos;
          while (pos < length && (subject[pos] & 0xC0) == 0x80) ++pos;
          continue;
        }
        if (m_begin > emitted) next.emplace_back(begin + emitted, begin + m_begin);
        next.emplace_back(begin + m_begin, begin + m_end);
        emitted = m_end;
        pos = m_end;
      }
      if (emitted < length) next.emplace_back(begin + emitted, end);
    }
    pieces.swap(next);
  }
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (const auto& [begin, end] : pieces) out.emplace_back(clean, begin, end - begin);
  return out;
}

}  // namespace kvserve

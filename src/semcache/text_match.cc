#include "semcache/text_match.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

namespace kvserve::semcache {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsUpper(char c) { return c >= 'A' && c <= 'Z'; }
// Letters, digits and bytes of non-ASCII characters make words.
bool IsWordByte(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || (static_cast<unsigned char>(c) & 0x80);
}

struct Features {
  std::multiset<std::string> numbers;
  std::set<std::string> names;
  // Capitalised words at a sentence's start that are not counted as names: a name in the
  // other text that appears here is not a difference ("Berlin weather" / "weather in Berlin").
  std::set<std::string> initials;
  int negations = 0;
};

// The pronoun I and its contractions are capitalised but name nothing.
bool IsPronounI(const std::string& word) {
  return word == "I" || word == "I'm" || word == "I've" || word == "I'd" || word == "I'll";
}

// A name as compared: a plural or possessive "s" dropped from a mixed-case word of more than
// three letters ("Sundays" / "Sunday", "Alice's" / "Alice"; "EU" and "US" stay).
std::string NameForm(std::string word) {
  if (word.size() > 2 && word.compare(word.size() - 2, 2, "'s") == 0) word.resize(word.size() - 2);
  const bool all_caps = std::all_of(word.begin(), word.end(), [](char c) { return !std::islower(static_cast<unsigned char>(c)); });
  if (word.size() > 3 && !all_caps && word.back() == 's') word.pop_back();
  return word;
}

bool IsNegation(const std::string& lower) {
  static const std::set<std::string> kWords = {
      "not", "no", "never", "none", "nothing", "nobody", "nowhere", "neither", "nor",
      "without", "cannot", "cant", "dont", "doesnt", "didnt", "isnt", "arent", "wasnt",
      "werent", "wont", "wouldnt", "shouldnt", "couldnt", "mustnt", "hasnt", "havent", "hadnt"};
  if (kWords.count(lower) != 0) return true;
  // "don't", "can't", ... arrive as "don" + "t" after splitting on the apostrophe: the
  // caller joins apostrophe contractions before asking.
  return lower.size() > 3 && lower.compare(lower.size() - 3, 3, "n't") == 0;
}

Features Extract(std::string_view text) {
  Features f;
  bool sentence_start = true;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (IsDigit(c)) {
      // A number: digits with inner '.', ',' or ':' (3.5, 1,000, 10:30), leading zeros kept.
      size_t j = i;
      while (j < text.size() && (IsDigit(text[j]) || ((text[j] == '.' || text[j] == ',' || text[j] == ':') &&
                                                     j + 1 < text.size() && IsDigit(text[j + 1])))) {
        ++j;
      }
      f.numbers.insert(std::string(text.substr(i, j - i)));
      i = j;
      sentence_start = false;
      continue;
    }
    if (IsWordByte(c)) {
      size_t j = i;
      // Words keep inner apostrophes (don't, O'Brien).
      while (j < text.size() && (IsWordByte(text[j]) ||
                                 (text[j] == '\'' && j + 1 < text.size() && IsWordByte(text[j + 1])))) {
        ++j;
      }
      const std::string word(text.substr(i, j - i));
      std::string lower = word;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (IsNegation(lower)) ++f.negations;
      const int capitals = static_cast<int>(std::count_if(word.begin(), word.end(), IsUpper));
      const bool all_caps = capitals == static_cast<int>(word.size()) && word.size() > 1;
      if (capitals > 0 && !IsPronounI(word)) {
        if (!sentence_start || capitals > 1 || all_caps) {
          f.names.insert(NameForm(word));
        } else {
          f.initials.insert(NameForm(word));
        }
      }
      // Digits inside words ("gpt4", "A320") count as numbers too.
      for (size_t k = 0; k < word.size();) {
        if (!IsDigit(word[k])) {
          ++k;
          continue;
        }
        size_t e = k;
        while (e < word.size() && IsDigit(word[e])) ++e;
        if (k > 0) f.numbers.insert(word.substr(k, e - k));
        k = e;
      }
      i = j;
      sentence_start = false;
      continue;
    }
    if (c == '.' || c == '?' || c == '!' || c == '\n' || c == ':') sentence_start = true;
    ++i;
  }
  return f;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

template <typename Set>
std::vector<std::string> Difference(const Set& a, const Set& b) {
  std::vector<std::string> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

std::string NormalizeForExactMatch(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool pending_space = false;
  for (char c : text) {
    if (IsSpace(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

std::string VetoReason(std::string_view a, std::string_view b) {
  const Features fa = Extract(a);
  const Features fb = Extract(b);
  if (fa.numbers != fb.numbers) {
    return "numbers differ (" + Join(Difference(fa.numbers, fb.numbers)) + " vs " +
           Join(Difference(fb.numbers, fa.numbers)) + ")";
  }
  // Names of one text missing from the other (where a sentence-initial word also counts).
  auto missing = [](const Features& x, const Features& y) {
    std::vector<std::string> out;
    for (const std::string& n : x.names) {
      if (y.names.count(n) == 0 && y.initials.count(n) == 0) out.push_back(n);
    }
    return out;
  };
  const std::vector<std::string> only_a = missing(fa, fb), only_b = missing(fb, fa);
  if (!only_a.empty() || !only_b.empty()) {
    return "names differ (" + Join(only_a) + " vs " + Join(only_b) + ")";
  }
  if (fa.negations != fb.negations) {
    return "negation differs (" + std::to_string(fa.negations) + " vs " +
           std::to_string(fb.negations) + " negative words)";
  }
  return "";
}

}  // namespace kvserve::semcache

#include "grammar/grammar.h"

#include <algorithm>
#include <map>

#include "base/check.h"

namespace kvserve::grammar {

bool DecodeUtf8(std::string_view s, size_t* pos, uint32_t* cp) {
  size_t i = *pos;
  if (i >= s.size()) return false;
  const auto b0 = static_cast<uint8_t>(s[i]);
  int len = 0;
  uint32_t v = 0;
  uint32_t min_value = 0;
  if (b0 < 0x80) {
    *cp = b0;
    *pos = i + 1;
    return true;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2, v = b0 & 0x1F, min_value = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, v = b0 & 0x0F, min_value = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, v = b0 & 0x07, min_value = 0x10000;
  } else {
    return false;
  }
  if (i + len > s.size()) return false;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return false;
    v = (v << 6) | (b & 0x3F);
  }
  if (v < min_value || v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) return false;
  *cp = v;
  *pos = i + len;
  return true;
}

int32_t Grammar::FindRule(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? -1 : it->second;
}

int32_t Grammar::GetOrAddRule(std::string_view name) {
  int32_t id = FindRule(name);
  if (id >= 0) return id;
  rules_.push_back(Rule{std::string(name), {}});
  id = static_cast<int32_t>(rules_.size()) - 1;
  index_.emplace(rules_.back().name, id);
  return id;
}

int32_t Grammar::NewRule(std::string_view base) {
  std::string name(base);
  int& k = next_suffix_[name];
  while (FindRule(name) >= 0) name = std::string(base) + "-" + std::to_string(++k);
  return GetOrAddRule(name);
}

void Grammar::AddAlternative(int32_t rule, Sequence seq) {
  KV_CHECK(rule >= 0 && rule < static_cast<int32_t>(rules_.size()));
  rules_[rule].alternatives.push_back(std::move(seq));
}

void Grammar::AppendLiteral(Sequence* seq, std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp = 0;
    if (!DecodeUtf8(text, &pos, &cp)) cp = static_cast<uint8_t>(text[pos++]);
    seq->push_back(Element::Char(cp));
  }
}

Element Grammar::Alternatives(std::vector<Sequence> alts, std::string_view base) {
  const int32_t r = NewRule(base);
  for (auto& a : alts) AddAlternative(r, std::move(a));
  return Element::Ref(r);
}

Element Grammar::Repeat(const Sequence& body, int min_count, int max_count,
                        std::string_view base) {
  KV_CHECK(min_count >= 0);
  KV_CHECK(max_count < 0 || max_count >= min_count);
  Element item;
  if (body.size() == 1) {
    item = body[0];
  } else {
    item = Alternatives({body}, std::string(base) + "-item");
  }
  // The tail after the first min_count copies.
  int32_t tail = -1;
  if (max_count < 0) {
    tail = NewRule(std::string(base) + "-star");
    AddAlternative(tail, {item, Element::Ref(tail)});
    AddAlternative(tail, {});
  } else {
    for (int k = 1; k <= max_count - min_count; ++k) {
      const int32_t opt = NewRule(std::string(base) + "-opt");
      Sequence seq{item};
      if (tail >= 0) seq.push_back(Element::Ref(tail));
      AddAlternative(opt, std::move(seq));
      AddAlternative(opt, {});
      tail = opt;
    }
  }
  if (min_count == 0 && tail >= 0) return Element::Ref(tail);
  const int32_t r = NewRule(base);
  Sequence seq(static_cast<size_t>(min_count), item);
  if (tail >= 0) seq.push_back(Element::Ref(tail));
  AddAlternative(r, std::move(seq));
  return Element::Ref(r);
}

Grammar WrapGrammar(const Grammar& inner, std::string_view prefix, std::string_view suffix,
                    int min_repeats, int max_repeats, std::string_view separator) {
  KV_CHECK(inner.root() >= 0);
  KV_CHECK(min_repeats >= 1 && (max_repeats < 0 || max_repeats >= min_repeats));
  Grammar g = inner;
  Sequence item;
  Grammar::AppendLiteral(&item, prefix);
  item.push_back(Element::Ref(inner.root()));
  Grammar::AppendLiteral(&item, suffix);
  const Element one = g.Alternatives({item}, "wrapped-item");
  Sequence seq = {one};
  if (max_repeats != 1) {
    Sequence more;
    Grammar::AppendLiteral(&more, separator);
    more.push_back(one);
    seq.push_back(g.Repeat(more, min_repeats - 1, max_repeats < 0 ? -1 : max_repeats - 1, "wrapped-more"));
  }
  const int32_t root = g.NewRule("wrapped-root");
  g.AddAlternative(root, std::move(seq));
  g.set_root(root);
  return g;
}

Status Grammar::Validate() const {
  const auto n = static_cast<int32_t>(rules_.size());
  if (root_ < 0 || root_ >= n) return InvalidArgumentError("grammar has no root rule");
  for (const Rule& r : rules_) {
    if (r.alternatives.empty()) {
      return InvalidArgumentError("rule '" + r.name + "' is referenced but never defined");
    }
    for (const Sequence& s : r.alternatives) {
      for (const Element& e : s) {
        if (e.kind == Element::Kind::kRuleRef && (e.rule < 0 || e.rule >= n)) {
          return InvalidArgumentError("rule '" + r.name + "' references an unknown rule");
        }
        if (e.kind == Element::Kind::kCharSet) {
          for (const CharRange& cr : e.ranges) {
            if (cr.lo > cr.hi || cr.hi > kMaxCodePoint) {
              return InvalidArgumentError("rule '" + r.name + "' has an invalid character range");
            }
          }
        }
      }
    }
  }
  // Nullable rules (derive the empty string), by fixpoint.
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t i = 0; i < n; ++i) {
      if (nullable[i]) continue;
      for (const Sequence& s : rules_[i].alternatives) {
        bool all = true;
        for (const Element& e : s) {
          if (e.kind == Element::Kind::kCharSet || !nullable[e.rule]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[i] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // Left edges: rule i may call rule j before consuming any character. An edge is "tail"
  // when the reference ends its alternative (the matcher pushes nothing for it).
  struct Edge {
    int32_t to;
    bool tail;
  };
  std::vector<std::vector<Edge>> left(n);
  for (int32_t i = 0; i < n; ++i) {
    for (const Sequence& s : rules_[i].alternatives) {
      for (size_t k = 0; k < s.size(); ++k) {
        const Element& e = s[k];
        if (e.kind == Element::Kind::kCharSet) break;
        left[i].push_back({e.rule, k + 1 == s.size()});
        if (!nullable[e.rule]) break;
      }
    }
  }
  // Strongly connected components (iterative Tarjan). A cycle made only of tail calls comes
  // back with the same stack and the matcher cuts it; a cycle with a non-tail call grows the
  // stack forever: that is left recursion, an error.
  std::vector<int32_t> index(n, -1), low(n, 0), comp(n, -1);
  std::vector<char> on_stack(n, 0);
  std::vector<int32_t> scc_stack;
  std::vector<std::pair<int32_t, size_t>> call;
  int32_t counter = 0, num_comps = 0;
  for (int32_t s0 = 0; s0 < n; ++s0) {
    if (index[s0] >= 0) continue;
    call.push_back({s0, 0});
    index[s0] = low[s0] = counter++;
    scc_stack.push_back(s0);
    on_stack[s0] = 1;
    while (!call.empty()) {
      auto& [v, next] = call.back();
      if (next < left[v].size()) {
        const int32_t w = left[v][next++].to;
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          scc_stack.push_back(w);
          on_stack[w] = 1;
          call.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        while (true) {
          const int32_t w = scc_stack.back();
          scc_stack.pop_back();
          on_stack[w] = 0;
          comp[w] = num_comps;
          if (w == v) break;
        }
        ++num_comps;
      }
      const int32_t done = v;
      call.pop_back();
      if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[done]);
    }
  }
  for (int32_t v = 0; v < n; ++v) {
    for (const Edge& e : left[v]) {
      if (comp[e.to] == comp[v] && !e.tail) {
        return InvalidArgumentError("rule '" + rules_[e.to].name +
                                    "' is left-recursive (it can call itself before consuming "
                                    "any character)");
      }
    }
  }
  return OkStatus();
}

namespace {

void AppendEscaped(uint32_t cp, bool in_class, std::string* out) {
  switch (cp) {
    case '\n': *out += "\\n"; return;
    case '\r': *out += "\\r"; return;
    case '\t': *out += "\\t"; return;
    case '\\': *out += "\\\\"; return;
    case '"': *out += in_class ? "\"" : "\\\""; return;
    default: break;
  }
  if (in_class && (cp == ']' || cp == '-' || cp == '^' || cp == '[')) {
    *out += '\\';
    out->push_back(static_cast<char>(cp));
    return;
  }
  if (cp < 0x20 || cp == 0x7F) {
    char buf[8];
    snprintf(buf, sizeof(buf), "\\x%02X", cp);
    *out += buf;
  } else if (cp >= 0xD800 && cp <= 0xDFFF) {
    char buf[12];
    snprintf(buf, sizeof(buf), "\\u%04X", cp);
    *out += buf;
  } else {
    AppendUtf8(cp, out);
  }
}

std::vector<CharRange> Normalize(const Element& e) {
  std::vector<CharRange> r = e.ranges;
  std::sort(r.begin(), r.end(), [](const CharRange& a, const CharRange& b) { return a.lo < b.lo; });
  std::vector<CharRange> merged;
  for (const CharRange& cr : r) {
    if (!merged.empty() && cr.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, cr.hi);
    } else {
      merged.push_back(cr);
    }
  }
  if (!e.negated) return merged;
  std::vector<CharRange> comp;
  uint32_t next = 0;
  for (const CharRange& cr : merged) {
    if (cr.lo > next) comp.push_back({next, cr.lo - 1});
    next = cr.hi + 1;
  }
  if (next <= kMaxCodePoint) comp.push_back({next, kMaxCodePoint});
  return comp;
}

}  // namespace

std::string Grammar::ToGbnf() const {
  std::string out;
  auto emit_rule = [&](const Rule& r) {
    out += r.name + " ::= ";
    for (size_t a = 0; a < r.alternatives.size(); ++a) {
      if (a) out += " | ";
      const Sequence& s = r.alternatives[a];
      if (s.empty()) out += "\"\"";
      for (size_t k = 0; k < s.size(); ++k) {
        if (k) out += ' ';
        const Element& e = s[k];
        if (e.kind == Element::Kind::kRuleRef) {
          out += rules_[e.rule].name;
        } else if (!e.negated && e.ranges.size() == 1 && e.ranges[0].lo == e.ranges[0].hi) {
          out += '"';
          AppendEscaped(e.ranges[0].lo, false, &out);
          out += '"';
        } else {
          out += e.negated ? "[^" : "[";
          for (const CharRange& cr : e.ranges) {
            AppendEscaped(cr.lo, true, &out);
            if (cr.hi != cr.lo) {
              out += '-';
              AppendEscaped(cr.hi, true, &out);
            }
          }
          out += ']';
        }
      }
    }
    out += '\n';
  };
  if (root_ >= 0 && root_ < static_cast<int32_t>(rules_.size())) emit_rule(rules_[root_]);
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (static_cast<int32_t>(i) != root_) emit_rule(rules_[i]);
  }
  return out;
}

bool CompiledGrammar::CharSet::Contains(uint32_t cp) const {
  if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const CharRange& r) { return v < r.lo; });
  return it != ranges.begin() && cp <= std::prev(it)->hi;
}

bool CompiledGrammar::CharSet::Intersects(uint32_t lo, uint32_t hi) const {
  for (const CharRange& r : ranges) {
    if (r.lo > hi) return false;
    if (r.hi >= lo) return true;
  }
  return false;
}

StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Compile(const Grammar& grammar) {
  KV_RETURN_IF_ERROR(grammar.Validate());
  auto g = std::make_shared<CompiledGrammar>();
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, int32_t> charset_ids;
  const auto& rules = grammar.rules();
  g->alt_starts_.resize(rules.size());
  for (size_t r = 0; r < rules.size(); ++r) {
    g->rule_names_.push_back(rules[r].name);
    for (const Sequence& s : rules[r].alternatives) {
      g->alt_starts_[r].push_back(static_cast<uint32_t>(g->elements_.size()));
      for (const Element& e : s) {
        if (e.kind == Element::Kind::kRuleRef) {
          g->elements_.push_back({Op::kRuleRef, e.rule});
          continue;
        }
        std::vector<CharRange> norm = Normalize(e);
        std::vector<std::pair<uint32_t, uint32_t>> key;
        for (const CharRange& cr : norm) key.push_back({cr.lo, cr.hi});
        auto [it, inserted] = charset_ids.try_emplace(key, static_cast<int32_t>(g->charsets_.size()));
        if (inserted) {
          CharSet cs;
          cs.ranges = norm;
          for (const CharRange& cr : norm) {
            for (uint32_t c = cr.lo; c <= cr.hi && c < 128; ++c) cs.ascii[c >> 6] |= uint64_t{1} << (c & 63);
          }
          g->charsets_.push_back(std::move(cs));
        }
        g->elements_.push_back({Op::kCharSet, it->second});
      }
      g->elements_.push_back({Op::kEnd, -1});
    }
  }
  if (g->elements_.size() > kMaxElements) {
    return InvalidArgumentError("grammar too large: " + std::to_string(g->elements_.size()) +
                                " elements after expanding repetitions (limit " +
                                std::to_string(kMaxElements) + ")");
  }
  g->root_ = grammar.root();
  g->gbnf_ = grammar.ToGbnf();
  return std::shared_ptr<const CompiledGrammar>(std::move(g));
}

size_t CompiledGrammar::memory_bytes() const {
  size_t bytes = sizeof(*this) + elements_.size() * sizeof(FlatElement) + gbnf_.size();
  for (const CharSet& cs : charsets_) bytes += sizeof(cs) + cs.ranges.size() * sizeof(CharRange);
  for (const auto& a : alt_starts_) bytes += a.size() * sizeof(uint32_t) + sizeof(a);
  for (const auto& n : rule_names_) bytes += n.size() + sizeof(n);
  return bytes;
}

}  // namespace kvserve::grammar

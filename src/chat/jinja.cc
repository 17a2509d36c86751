// The jinja renderer and the entry points Template::Parse and Template::Render (see jinja.h);
// the lexer and parser are jinja_lexer.cc and jinja_parser.cc, their shared types
// jinja_syntax.h.
#include "chat/jinja.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "base/check.h"
#include "chat/jinja_internal.h"
#include "chat/jinja_syntax.h"

namespace kvserve::jinja {

using internal::Env;

namespace {

// ---- renderer -------------------------------------------------------------------------------

struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Scope> parent;

  Value* Find(const std::string& name) {
    for (Scope* s = this; s != nullptr; s = s->parent.get()) {
      for (auto& [k, v] : s->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void Set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer : public Env {
 public:
  Renderer(const Options& o, std::optional<std::time_t> now) : opt_(o), now_(now) {}
  ~Renderer() override {
    for (Value& ns : namespaces_) ns.mutable_dict().entries.clear();  // break reference cycles
  }

  const Options& options() const override { return opt_; }

  StatusOr<Value> Call(const Value& callee, const CallArgs& args) override {
    try {
      return CallValue(callee, args, cur_line_);
    } catch (const TemplateError& e) {
      return InvalidArgumentError(e.message);
    }
  }

  void Run(const Body& body, const Value& context, std::string* out) {
    auto globals = std::make_shared<Scope>();
    const Value g = internal::MakeGlobals(opt_, now_, &namespaces_);
    for (const auto& [k, v] : g.dict().entries) globals->vars.emplace_back(k.str(), v);
    auto root = std::make_shared<Scope>();
    root->parent = globals;
    root_ = root;
    if (context.is_dict()) {
      for (const auto& [k, v] : context.dict().entries) {
        if (k.is_string()) root->Set(k.str(), v);
      }
    }
    Exec(body, root, out);
  }

 private:
  void Append(std::string* out, const std::string& s, int line) {
    if (static_cast<int64_t>(out->size() + s.size()) > opt_.max_output_bytes) {
      Fail(line, "rendered output exceeds " + std::to_string(opt_.max_output_bytes) + " bytes");
    }
    out->append(s);
  }

  Flow Exec(const Body& body, const ScopePtr& scope, std::string* out) {
    for (const NodePtr& n : body) {
      const Flow f = ExecOne(*n, scope, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow ExecOne(const Node& n, const ScopePtr& scope, std::string* out) {
    cur_line_ = n.line;
    switch (n.kind) {
      case NodeKind::kText: Append(out, n.name, n.line); return Flow::kNormal;
      case NodeKind::kOutput: {
        const Value v = Eval(*n.kids[0], scope);
        Append(out, ToPyStr(v), n.line);
        return Flow::kNormal;
      }
      case NodeKind::kIf: {
        for (size_t i = 0; i < n.kids.size(); ++i) {
          if (Eval(*n.kids[i], scope).truthy()) return Exec(n.bodies[i], scope, out);
        }
        if (n.has_else) return Exec(n.bodies.back(), scope, out);
        return Flow::kNormal;
      }
      case NodeKind::kFor: ExecFor(n, scope, out); return Flow::kNormal;
      case NodeKind::kSet: {
        Value v = Eval(*n.kids[0], scope);
        if (!n.attr.empty()) {
          Value* ns = scope->Find(n.name);
          if (ns == nullptr || !ns->is_namespace()) {
            Fail(n.line, "cannot assign attribute on non-namespace object");
          }
          ns->mutable_dict().Set(Value::String(n.attr), std::move(v));
        } else {
          Assign(n.targets, std::move(v), scope.get(), n.line);
        }
        return Flow::kNormal;
      }
      case NodeKind::kSetBlock: {
        std::string captured;
        Exec(n.bodies[0], scope, &captured);
        scope->Set(n.name, Value::String(std::move(captured)));
        return Flow::kNormal;
      }
      case NodeKind::kMacro: {
        auto f = std::make_shared<Function>();
        f->name = n.name;
        f->macro = &n;
        f->closure = scope;
        scope->Set(n.name, Value::Func(std::move(f)));
        return Flow::kNormal;
      }
      case NodeKind::kCallBlock: {  // the call, with `caller` bound to the block
        const Node& call = *n.kids.back();
        const Value callee = Eval(*call.kids[0], scope);
        CallArgs a = EvalArgs(call, 1, scope);
        auto f = std::make_shared<Function>();
        f->name = "caller";
        f->macro = &n;
        f->closure = scope;
        a.kwargs.emplace_back("caller", Value::Func(std::move(f)));
        cur_line_ = n.line;
        Append(out, ToPyStr(CallValue(callee, a, n.line)), n.line);
        return Flow::kNormal;
      }
      case NodeKind::kBreak: return Flow::kBreak;
      case NodeKind::kContinue: return Flow::kContinue;
      case NodeKind::kWith: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        for (size_t i = 0; i < n.targets.size(); ++i) inner->Set(n.targets[i], Eval(*n.kids[i], scope));
        return Exec(n.bodies[0], inner, out);
      }
      case NodeKind::kScope: return Exec(n.bodies[0], scope, out);
      case NodeKind::kFilterBlock: {
        std::string body;
        const Flow f = Exec(n.bodies[0], scope, &body);
        Value v = Value::String(std::move(body));
        std::vector<const Node*> chain;  // outermost filter first
        for (const Node* k = n.kids[0].get(); k != nullptr; k = k->kids[0].get()) chain.push_back(k);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          CallArgs a = EvalArgs(**it, 1, scope);
          v = Unwrap(internal::ApplyFilter(*this, (*it)->name, v, a), (*it)->line);
        }
        Append(out, ToPyStr(v), n.line);
        return f;
      }
      default: KV_CHECK(false) << "not a statement";
    }
    return Flow::kNormal;
  }

  void Assign(const std::vector<std::string>& targets, Value v, Scope* scope, int line) {
    if (targets.size() == 1) {
      scope->Set(targets[0], std::move(v));
      return;
    }
    std::vector<Value> items = Unwrap(internal::Iterate(v), line);
    if (items.size() != targets.size()) {
      Fail(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                     std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope->Set(targets[i], std::move(items[i]));
  }

  void CountIteration(int line) {
    if (++iterations_ > opt_.max_loop_iterations) {
      Fail(line, "more than " + std::to_string(opt_.max_loop_iterations) + " loop iterations");
    }
  }

  void ExecFor(const Node& n, const ScopePtr& scope, std::string* out) {
    const Value iterable = Eval(*n.kids[0], scope);
    if (!iterable.is_undefined() && !iterable.is_list() && !iterable.is_dict() && !iterable.is_string()) {
      Fail(n.line, "'" + internal::TypeName(iterable) + "' object is not iterable");
    }
    std::vector<Value> items = Unwrap(internal::Iterate(iterable), n.line);
    if (n.kids[1]) {  // {% for x in xs if cond %}
      std::vector<Value> kept;
      for (Value& item : items) {
        CountIteration(n.line);
        auto s = std::make_shared<Scope>();
        s->parent = scope;
        Assign(n.targets, item, s.get(), n.line);
        if (Eval(*n.kids[1], s).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    auto current = std::make_shared<int64_t>(0);  // loop.cycle() reads the iteration index
    auto cycle = std::make_shared<Function>();
    cycle->name = "cycle";
    cycle->builtin = [current](const CallArgs& a) -> StatusOr<Value> {
      if (a.args.empty()) return InvalidArgumentError("no items for cycling given");
      return a.args[*current % static_cast<int64_t>(a.args.size())];
    };
    const Value cycle_value = Value::Func(std::move(cycle));
    for (int64_t i = 0; i < len; ++i) {
      *current = i;
      CountIteration(n.line);
      auto s = std::make_shared<Scope>();
      s->parent = scope;
      Value loop = Value::Dict();
      ValueDict& d = loop.mutable_dict();
      auto set = [&](const char* k, Value v) { d.entries.emplace_back(Value::String(k), std::move(v)); };
      set("index", Value::Int(i + 1));
      set("index0", Value::Int(i));
      set("revindex", Value::Int(len - i));
      set("revindex0", Value::Int(len - i - 1));
      set("first", Value::Bool(i == 0));
      set("last", Value::Bool(i == len - 1));
      set("length", Value::Int(len));
      set("depth", Value::Int(1));
      set("depth0", Value::Int(0));
      if (i > 0) set("previtem", items[i - 1]);
      if (i + 1 < len) set("nextitem", items[i + 1]);
      set("cycle", cycle_value);
      s->vars.emplace_back("loop", std::move(loop));
      Assign(n.targets, items[i], s.get(), n.line);
      const Flow f = Exec(n.bodies[0], s, out);
      if (f == Flow::kBreak) break;
    }
    if (len == 0 && n.has_else) Exec(n.bodies[1], scope, out);
  }

  Value CallValue(const Value& callee, const CallArgs& args, int line) {
    if (callee.is_undefined()) {
      Fail(line, callee.undefined_hint().empty() ? "undefined value is not callable"
                                                 : callee.undefined_hint());
    }
    if (!callee.is_function()) Fail(line, "'" + internal::TypeName(callee) + "' object is not callable");
    const Function& f = *callee.function();
    if (f.builtin) {
      StatusOr<Value> r = f.builtin(args);
      if (!r.ok()) Fail(line, r.status().message());
      return std::move(r).value();
    }
    const Node& m = *static_cast<const Node*>(f.macro);
    if (++call_depth_ > opt_.max_call_depth) {
      Fail(line, "macro calls nested more than " + std::to_string(opt_.max_call_depth) + " deep");
    }
    auto s = std::make_shared<Scope>();
    s->parent = std::static_pointer_cast<Scope>(f.closure.lock());
    if (!s->parent) s->parent = root_;  // the defining scope ended (macro escaped a loop body)
    if (args.args.size() > m.targets.size() && !m.uses_varargs) {
      Fail(line, "macro '" + m.name + "' takes not more than " + std::to_string(m.targets.size()) +
                     " argument(s)");
    }
    std::vector<bool> bound(m.targets.size(), false);
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.args.size(); ++i) {
      if (i >= m.targets.size()) {
        varargs.push_back(args.args[i]);
        continue;
      }
      s->Set(m.targets[i], args.args[i]);
      bound[i] = true;
    }
    Value kwargs = Value::Dict();
    for (const auto& [k, v] : args.kwargs) {
      auto it = std::find(m.targets.begin(), m.targets.end(), k);
      if (it != m.targets.end()) {
        s->Set(k, v);
        bound[it - m.targets.begin()] = true;
      } else if (k == "caller" && m.uses_caller) {
        s->Set(k, v);
      } else if (m.uses_kwargs) {
        kwargs.mutable_dict().Set(Value::String(k), v);
      } else {
        Fail(line, "macro '" + m.name + "' takes no keyword argument '" + k + "'");
      }
    }
    if (m.uses_varargs) s->Set("varargs", Value::List(std::move(varargs), /*is_tuple=*/true));
    if (m.uses_kwargs) s->Set("kwargs", std::move(kwargs));
    for (size_t i = 0; i < m.targets.size(); ++i) {
      if (bound[i]) continue;
      if (m.kids[i]) {
        s->Set(m.targets[i], Eval(*m.kids[i], s));
      } else {
        s->Set(m.targets[i], Value::Undefined("parameter '" + m.targets[i] + "' was not provided"));
      }
    }
    std::string body;
    Exec(m.bodies[0], s, &body);
    --call_depth_;
    return Value::String(std::move(body));
  }

  CallArgs EvalArgs(const Node& n, size_t first, const ScopePtr& scope) {
    CallArgs a;
    const size_t num_kw = n.kw_names.size();
    const size_t num_pos = n.kids.size() - first - num_kw;
    for (size_t i = 0; i < num_pos; ++i) a.args.push_back(Eval(*n.kids[first + i], scope));
    for (size_t i = 0; i < num_kw; ++i) {
      a.kwargs.emplace_back(n.kw_names[i], Eval(*n.kids[first + num_pos + i], scope));
    }
    return a;
  }

  Value Eval(const Node& n, const ScopePtr& scope) {
    switch (n.kind) {
      case NodeKind::kLiteral: return n.literal;
      case NodeKind::kName: {
        Value* v = scope->Find(n.name);
        if (v == nullptr) return Value::Undefined("'" + n.name + "' is undefined");
        return *v;
      }
      case NodeKind::kAttr: return Unwrap(internal::GetAttr(Eval(*n.kids[0], scope), n.name), n.line);
      case NodeKind::kItem: {
        const Value obj = Eval(*n.kids[0], scope);
        return Unwrap(internal::GetItem(obj, Eval(*n.kids[1], scope)), n.line);
      }
      case NodeKind::kSlice: return EvalSlice(n, scope);
      case NodeKind::kCall: {
        const Value callee = Eval(*n.kids[0], scope);
        CallArgs a = EvalArgs(n, 1, scope);
        cur_line_ = n.line;
        return CallValue(callee, a, n.line);
      }
      case NodeKind::kFilter: {
        const Value v = Eval(*n.kids[0], scope);
        CallArgs a = EvalArgs(n, 1, scope);
        cur_line_ = n.line;
        return Unwrap(internal::ApplyFilter(*this, n.name, v, a), n.line);
      }
      case NodeKind::kTest: {
        const Value v = Eval(*n.kids[0], scope);
        CallArgs a = EvalArgs(n, 1, scope);
        cur_line_ = n.line;
        const bool r = Unwrap(internal::ApplyTest(*this, n.name, v, a), n.line);
        return Value::Bool(n.negated ? !r : r);
      }
      case NodeKind::kNeg:
      case NodeKind::kPos: {
        const Value v = Eval(*n.kids[0], scope);
        if (v.is_undefined()) Fail(n.line, v.undefined_hint());
        if (!v.is_number()) Fail(n.line, "bad operand type for unary " + std::string(n.kind == NodeKind::kNeg ? "-" : "+") + ": '" + internal::TypeName(v) + "'");
        if (n.kind == NodeKind::kPos) return v.is_bool() ? Value::Int(v.int_value()) : v;
        if (v.is_float()) return Value::Float(-v.float_value());
        if (v.int_value() == std::numeric_limits<int64_t>::min()) Fail(n.line, "integer overflow");
        return Value::Int(-v.int_value());
      }
      case NodeKind::kNot: return Value::Bool(!Eval(*n.kids[0], scope).truthy());
      case NodeKind::kAnd: {
        Value l = Eval(*n.kids[0], scope);
        if (!l.truthy()) return l;
        return Eval(*n.kids[1], scope);
      }
      case NodeKind::kOr: {
        Value l = Eval(*n.kids[0], scope);
        if (l.truthy()) return l;
        return Eval(*n.kids[1], scope);
      }
      case NodeKind::kCond: {
        if (Eval(*n.kids[1], scope).truthy()) return Eval(*n.kids[0], scope);
        if (n.kids[2]) return Eval(*n.kids[2], scope);
        return Value::Undefined("the inline if-expression evaluated to false and no else section was defined");
      }
      case NodeKind::kCompare: {
        Value l = Eval(*n.kids[0], scope);
        for (size_t i = 0; i < n.ops.size(); ++i) {
          Value r = Eval(*n.kids[i + 1], scope);
          if (!Compare(n.ops[i], l, r, n.line)) return Value::Bool(false);
          l = std::move(r);
        }
        return Value::Bool(true);
      }
      case NodeKind::kBinary: return EvalBinary(n, scope);
      case NodeKind::kListLit:
      case NodeKind::kTupleLit: {
        std::vector<Value> items;
        for (const NodePtr& k : n.kids) items.push_back(Eval(*k, scope));
        return Value::List(std::move(items), n.kind == NodeKind::kTupleLit);
      }
      case NodeKind::kDictLit: {
        Value d = Value::Dict();
        for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
          Value k = Eval(*n.kids[i], scope);
          if (k.is_list() && !k.is_tuple()) Fail(n.line, "unhashable type: 'list'");
          if (k.is_dict()) Fail(n.line, "unhashable type: 'dict'");
          d.mutable_dict().Set(k, Eval(*n.kids[i + 1], scope));
        }
        return d;
      }
      default: KV_CHECK(false) << "not an expression";
    }
    return Value();
  }

  Value EvalSlice(const Node& n, const ScopePtr& scope) {
    const Value obj = Eval(*n.kids[0], scope);
    if (obj.is_undefined()) Fail(n.line, obj.undefined_hint());
    std::optional<int64_t> idx[3];
    for (int k = 0; k < 3; ++k) {
      if (!n.kids[k + 1]) continue;
      const Value v = Eval(*n.kids[k + 1], scope);
      if (v.is_none()) continue;
      if (!v.is_int() && !v.is_bool()) Fail(n.line, "slice indices must be integers or None");
      idx[k] = v.int_value();
    }
    const int64_t step = idx[2].value_or(1);
    if (step == 0) Fail(n.line, "slice step cannot be zero");
    auto do_slice = [&](int64_t len, auto&& take) {
      int64_t start, stop;
      auto adjust = [&](std::optional<int64_t> v, int64_t def_pos, int64_t def_neg, bool is_start) {
        (void)is_start;
        if (!v) return step > 0 ? def_pos : def_neg;
        int64_t x = *v;
        if (x < 0) {
          x += len;
          if (x < 0) x = step > 0 ? 0 : -1;
        } else if (x >= len) {
          x = step > 0 ? len : len - 1;
        }
        return x;
      };
      start = adjust(idx[0], 0, len - 1, true);
      stop = adjust(idx[1], len, -1, false);
      if (step > 0) {
        for (int64_t i = start; i < stop; i += step) take(i);
      } else {
        for (int64_t i = start; i > stop; i += step) take(i);
      }
    };
    if (obj.is_string()) {
      const std::u32string s = internal::Decode(obj.str());
      std::u32string r;
      do_slice(static_cast<int64_t>(s.size()), [&](int64_t i) { r.push_back(s[i]); });
      return Value::String(internal::Encode(r));
    }
    if (obj.is_list()) {
      const auto& items = obj.items();
      std::vector<Value> r;
      do_slice(static_cast<int64_t>(items.size()), [&](int64_t i) { r.push_back(items[i]); });
      return Value::List(std::move(r), obj.is_tuple());
    }
    Fail(n.line, "'" + internal::TypeName(obj) + "' object is not subscriptable");
  }

  bool Compare(const std::string& op, const Value& l, const Value& r, int line) {
    if (op == "==") return internal::PyEqual(l, r);
    if (op == "!=") return !internal::PyEqual(l, r);
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.is_string()) {
        if (!l.is_string()) Fail(line, "'in <string>' requires string as left operand, not " + internal::TypeName(l));
        found = r.str().find(l.str()) != std::string::npos;
      } else if (r.is_list()) {
        for (const Value& v : r.items()) {
          if (internal::PyEqual(l, v)) {
            found = true;
            break;
          }
        }
      } else if (r.is_dict()) {
        found = r.dict().Find(l) != nullptr;
      } else if (r.is_undefined()) {
        found = false;
      } else {
        Fail(line, "argument of type '" + internal::TypeName(r) + "' is not iterable");
      }
      return op == "in" ? found : !found;
    }
    if (l.is_undefined()) Fail(line, l.undefined_hint());
    if (r.is_undefined()) Fail(line, r.undefined_hint());
    if (op == "<") return Unwrap(internal::PyLess(l, r), line);
    if (op == ">") return Unwrap(internal::PyLess(r, l), line);
    if (op == "<=") return !Unwrap(internal::PyLess(r, l), line);
    if (op == ">=") return !Unwrap(internal::PyLess(l, r), line);
    Fail(line, "unknown comparison " + op);
  }

  Value EvalBinary(const Node& n, const ScopePtr& scope) {
    const Value l = Eval(*n.kids[0], scope);
    const Value r = Eval(*n.kids[1], scope);
    const std::string& op = n.name;
    const int line = n.line;
    if (op == "~") {
      std::string s = ToPyStr(l);
      s += ToPyStr(r);
      CheckSize(s.size(), line);
      return Value::String(std::move(s));
    }
    if (op == "%" && l.is_string()) {  // str % x formats an undefined x as '' (str(x))
      CallArgs a;
      if (r.is_tuple()) {
        a.args = r.items();
      } else {
        a.args.push_back(r);
      }
      if (!l.is_markup()) return Unwrap(internal::ApplyFilter(*this, "format", l, a), line);
      for (Value& x : a.args) {  // Markup.__mod__ escapes its string arguments
        if (x.is_string() && !x.is_markup()) x = Value::String(internal::HtmlEscape(x.str()));
      }
      const Value s = Unwrap(internal::ApplyFilter(*this, "format", l, a), line);
      return Value::Markup(s.str());
    }
    if (l.is_undefined()) Fail(line, l.undefined_hint());
    if (r.is_undefined()) Fail(line, r.undefined_hint());
    auto type_error = [&]() {
      Fail(line, "unsupported operand type(s) for " + op + ": '" + internal::TypeName(l) + "' and '" +
                     internal::TypeName(r) + "'");
    };
    if (op == "+") {
      if (l.is_string() && r.is_string()) {
        CheckSize(l.str().size() + r.str().size(), line);
        if (l.is_markup() || r.is_markup()) {  // Markup.__add__ / __radd__ escape the str side
          return Value::Markup((l.is_markup() ? l.str() : internal::HtmlEscape(l.str())) +
                               (r.is_markup() ? r.str() : internal::HtmlEscape(r.str())));
        }
        return Value::String(l.str() + r.str());
      }
      if (l.is_list() && r.is_list() && l.is_tuple() == r.is_tuple()) {
        std::vector<Value> items = l.items();
        items.insert(items.end(), r.items().begin(), r.items().end());
        return Value::List(std::move(items), l.is_tuple());
      }
      if (l.is_string() || r.is_string()) {
        if (l.is_string()) Fail(line, "can only concatenate str (not \"" + internal::TypeName(r) + "\") to str");
        type_error();
      }
    }
    if (op == "*" && ((l.is_string() || l.is_list()) != (r.is_string() || r.is_list()))) {
      const Value& seq = (l.is_string() || l.is_list()) ? l : r;
      const Value& cnt = (l.is_string() || l.is_list()) ? r : l;
      if (!cnt.is_int() && !cnt.is_bool()) type_error();
      const int64_t times = std::max<int64_t>(0, cnt.int_value());
      if (seq.is_string()) {
        if (times > 0 && seq.str().size() > 0) CheckSize(static_cast<double>(seq.str().size()) * times, line);
        std::string s;
        for (int64_t i = 0; i < times && !seq.str().empty(); ++i) s += seq.str();
        return seq.is_markup() ? Value::Markup(std::move(s)) : Value::String(std::move(s));
      }
      if (times > 0 && !seq.items().empty()) CheckSize(static_cast<double>(seq.items().size()) * times * 8, line);
      std::vector<Value> items;
      for (int64_t i = 0; i < times; ++i) items.insert(items.end(), seq.items().begin(), seq.items().end());
      return Value::List(std::move(items), seq.is_tuple());
    }
    if (!l.is_number() || !r.is_number()) type_error();
    const bool as_float = l.is_float() || r.is_float();
    const double a = l.as_double(), b = r.as_double();
    const int64_t x = l.int_value(), y = r.int_value();
    if (op == "/") {
      if (b == 0.0) Fail(line, "division by zero");
      return Value::Float(a / b);
    }
    if (op == "//" || op == "%") {
      if (as_float) {
        if (b == 0.0) Fail(line, "float division by zero");
        double m = std::fmod(a, b);
        if (m != 0.0 && ((m < 0) != (b < 0))) m += b;
        if (op == "%") return Value::Float(m);
        return Value::Float(std::floor(a / b));
      }
      if (y == 0) Fail(line, "integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) Fail(line, "integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        --q;
      }
      return Value::Int(op == "//" ? q : m);
    }
    if (op == "**") {
      if (!as_float && y >= 0) {
        int64_t result = 1, base = x;
        int64_t e = y;
        while (e > 0) {
          if (e & 1) {
            if (__builtin_mul_overflow(result, base, &result)) Fail(line, "integer overflow");
          }
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) Fail(line, "integer overflow");
        }
        return Value::Int(result);
      }
      if (a == 0.0 && b < 0) Fail(line, "0.0 cannot be raised to a negative power");
      return Value::Float(std::pow(a, b));
    }
    if (as_float) {
      if (op == "+") return Value::Float(a + b);
      if (op == "-") return Value::Float(a - b);
      if (op == "*") return Value::Float(a * b);
    } else {
      int64_t res = 0;
      bool overflow = false;
      if (op == "+") overflow = __builtin_add_overflow(x, y, &res);
      else if (op == "-") overflow = __builtin_sub_overflow(x, y, &res);
      else if (op == "*") overflow = __builtin_mul_overflow(x, y, &res);
      else type_error();
      if (overflow) Fail(line, "integer overflow");
      return Value::Int(res);
    }
    type_error();
    return Value();
  }

  void CheckSize(double bytes, int line) {
    if (bytes > static_cast<double>(opt_.max_output_bytes)) {
      Fail(line, "string or list exceeds " + std::to_string(opt_.max_output_bytes) + " bytes");
    }
  }

  const Options& opt_;
  std::optional<std::time_t> now_;
  std::shared_ptr<Scope> root_;
  std::vector<Value> namespaces_;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  int cur_line_ = 0;
};

// Normalizes newlines as jinja2 does (\r\n and \r become \n) and drops one trailing newline
// (keep_trailing_newline=False).
std::string NormalizeSource(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string WithLine(const TemplateError& e) {
  if (e.message.rfind(internal::kRaisePrefix, 0) == 0) {
    return e.message.substr(std::strlen(internal::kRaisePrefix));
  }
  return "line " + std::to_string(e.line) + ": " + e.message;
}

}  // namespace

StatusOr<Template> Template::Parse(const std::string& source, const Options& options) {
  try {
    auto root = std::make_shared<Node>();
    root->kind = NodeKind::kScope;
    root->bodies.push_back(ParseTemplate(Lex(NormalizeSource(source)), options));
    Template t;
    t.root_ = std::move(root);
    t.options_ = options;
    return t;
  } catch (const TemplateError& e) {
    return InvalidArgumentError("chat template syntax error: " + WithLine(e));
  }
}

StatusOr<std::string> Template::Render(const Value& context,
                                       std::optional<std::time_t> now_unix_seconds) const {
  KV_CHECK(root_ != nullptr) << "Render on a default-constructed Template";
  std::string out;
  try {
    Renderer r(options_, now_unix_seconds);
    r.Run(root_->bodies[0], context, &out);
  } catch (const TemplateError& e) {
    if (e.message.rfind(internal::kRaisePrefix, 0) == 0) return InvalidArgumentError(WithLine(e));
    return InvalidArgumentError("chat template error: " + WithLine(e));
  }
  return out;
}

}  // namespace kvserve::jinja

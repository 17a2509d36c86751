#include "kvtier/redis_kv_store.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <utility>

#include "base/logging.h"
#include "base/str_format.h"

namespace kvserve {

namespace {

constexpr std::string_view kUrlForms =
    "expected redis://[:password@]host[:port][/db] or unix:///path/to/socket";

// The URL with its user info replaced, so that an error message never shows the password.
std::string RedactedUrl(std::string_view url) {
  const size_t scheme_end = url.find("://");
  const size_t at = url.rfind('@');
  if (scheme_end == std::string_view::npos || at == std::string_view::npos || at < scheme_end) {
    return std::string(url);
  }
  return std::string(url.substr(0, scheme_end + 3)) + "***" + std::string(url.substr(at));
}

// A decimal integer in [lo, hi], digits only (no sign, no spaces).
bool ParseBoundedInt(std::string_view text, int lo, int hi, int* out) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) return false;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

// %XX decoding, so that a password may hold '@', ':' or '/'.
bool PercentDecode(std::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    unsigned v = 0;
    if (i + 2 >= in.size() ||
        std::from_chars(in.data() + i + 1, in.data() + i + 3, v, 16).ptr != in.data() + i + 3) {
      return false;
    }
    out->push_back(static_cast<char>(v));
    i += 2;
  }
  return true;
}

timeval ToTimeval(int64_t ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

// hiredis 0.14 writes with write(2), so a write to a connection that Redis closed raises
// SIGPIPE, which kills a process that did not ignore it (the server does; tests and tools may
// not). Blocks SIGPIPE on this thread for one command, then discards the one it raised.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    was_pending_ = SigpipePending();
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~ScopedSigpipeBlock() {
    const timespec zero{};
    if (!was_pending_ && SigpipePending()) sigtimedwait(&pipe_, nullptr, &zero);
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  static bool SigpipePending() {
    sigset_t pending;
    sigemptyset(&pending);
    return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  }
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

std::string Describe(const RedisAddress& a, int64_t ttl_seconds) {
  std::string where = !a.unix_path.empty() ? "unix:" + a.unix_path
                      : a.host.find(':') != std::string::npos
                          ? "[" + a.host + "]:" + std::to_string(a.port)
                          : a.host + ":" + std::to_string(a.port);
  const std::string ttl = ttl_seconds > 0 ? std::to_string(ttl_seconds) + " s" : "none";
  return "redis " + where + " db " + std::to_string(a.db) + ", TTL " + ttl;
}

}  // namespace

StatusOr<RedisAddress> ParseRedisUrl(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("bad Redis URL '" + RedactedUrl(url) + "': " + why + " (" +
                                std::string(kUrlForms) + ")");
  };
  RedisAddress address;
  if (url.starts_with("unix://")) {
    const std::string_view path = url.substr(7);
    if (path.size() < 2 || path[0] != '/') return bad("the socket path must be absolute");
    address.unix_path = std::string(path);
    return address;
  }
  if (url.starts_with("rediss://")) return bad("TLS (rediss://) is not supported");
  if (!url.starts_with("redis://")) return bad("unknown scheme");
  std::string_view rest = url.substr(8);

  // [userinfo@]host[:port] up to the first '/', then the db.
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && !ParseBoundedInt(db, 0, 1 << 20, &address.db)) {
      return bad("the db must be a non-negative number");
    }
  }
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) return bad("the password must follow a ':'");
    // Redis 6 ACL users other than the legacy "default" would need AUTH user password.
    const std::string_view user = userinfo.substr(0, colon);
    if (!user.empty() && user != "default") return bad("only the 'default' ACL user is supported");
    if (!PercentDecode(userinfo.substr(colon + 1), &address.password)) {
      return bad("bad %-escape in the password");
    }
  }
  // host[:port], or [IPv6 literal][:port]; `after` is what follows the host.
  size_t host_end = authority.starts_with('[') ? authority.find(']') : authority.find(':');
  if (authority.starts_with('[') && host_end == std::string_view::npos) return bad("no ']'");
  address.host = authority.starts_with('[') ? authority.substr(1, host_end - 1)
                                            : authority.substr(0, host_end);
  if (authority.starts_with('[')) ++host_end;
  const std::string_view after = authority.substr(std::min(host_end, authority.size()));
  if (address.host.empty()) return bad("no host");
  if (!after.empty() &&
      (after[0] != ':' || !ParseBoundedInt(after.substr(1), 1, 65535, &address.port))) {
    return bad("the port must be a number in [1, 65535] (an IPv6 host goes in [brackets])");
  }
  return address;
}

std::string RedisKvStore::RedisKey(uint64_t fingerprint, uint64_t key) {
  return StrFormat("kvserve:kv:%016llx:%016llx", static_cast<unsigned long long>(fingerprint),
                   static_cast<unsigned long long>(key));
}

StatusOr<std::unique_ptr<RedisKvStore>> RedisKvStore::Create(const RedisKvStoreOptions& options) {
  KV_ASSIGN_OR_RETURN(RedisAddress address, ParseRedisUrl(options.url));
  // A zero timeout means "block forever" to the socket layer: exactly what must not happen.
  if (options.connect_timeout_ms <= 0 || options.command_timeout_ms <= 0) {
    return InvalidArgumentError("Redis connect and command timeouts must be positive");
  }
  if (options.ttl_seconds < 0 || options.retry_interval_ms < 0) {
    return InvalidArgumentError("Redis TTL and retry interval must not be negative");
  }
  std::unique_ptr<RedisKvStore> store(new RedisKvStore(options, std::move(address)));
  std::lock_guard<std::mutex> lock(store->mu_);
  (void)store->EnsureConnectedLocked();  // a Redis that is down is retried later
  return store;
}

RedisKvStore::RedisKvStore(const RedisKvStoreOptions& options, RedisAddress address)
    : options_(options),
      address_(std::move(address)),
      description_(Describe(address_, options.ttl_seconds)) {}

RedisKvStore::~RedisKvStore() {
  std::lock_guard<std::mutex> lock(mu_);
  DropLocked();
}

void RedisKvStore::DropLocked() {
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;
  connected_.store(false, std::memory_order_relaxed);
}

Status RedisKvStore::FailLocked(const std::string& what) {
  const bool was_connected = context_ != nullptr;
  DropLocked();
  num_errors_.fetch_add(1, std::memory_order_relaxed);
  retry_after_ = Clock::now() + std::chrono::milliseconds(options_.retry_interval_ms);
  last_error_ = what;
  if (was_connected || !outage_logged_) {
    KV_LOG(WARNING) << description_ << ": " << what << "; retrying every "
                    << options_.retry_interval_ms << " ms";
    outage_logged_ = true;
  }
  return UnavailableError(description_ + ": " + what);
}

Status RedisKvStore::ConnectLocked() {
  const timeval connect_timeout = ToTimeval(options_.connect_timeout_ms);
  context_ = address_.unix_path.empty()
                 ? redisConnectWithTimeout(address_.host.c_str(), address_.port, connect_timeout)
                 : redisConnectUnixWithTimeout(address_.unix_path.c_str(), connect_timeout);
  if (context_ == nullptr) return UnavailableError("cannot allocate a hiredis context");
  if (context_->err != 0) return UnavailableError(std::string("connect: ") + context_->errstr);
  if (redisSetTimeout(context_, ToTimeval(options_.command_timeout_ms)) != REDIS_OK) {
    return UnavailableError("cannot set the command timeout");
  }
  // Finds a peer that vanished without closing (a dead host) on an idle connection.
  if (address_.unix_path.empty()) (void)redisEnableKeepAlive(context_);
  std::string error;
  if (!address_.password.empty() && !CommandLocked({"AUTH", address_.password}, &error)) {
    return UnavailableError("AUTH: " + error);
  }
  if (address_.db != 0 && !CommandLocked({"SELECT", std::to_string(address_.db)}, &error)) {
    return UnavailableError("SELECT " + std::to_string(address_.db) + ": " + error);
  }
  return OkStatus();
}

Status RedisKvStore::EnsureConnectedLocked() {
  if (context_ != nullptr) return OkStatus();
  if (Clock::now() < retry_after_) {
    const auto wait_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(retry_after_ - Clock::now());
    return UnavailableError(description_ + " is unavailable (" + last_error_ +
                            "); next attempt in " + std::to_string(wait_ms.count()) + " ms");
  }
  const bool initial = !first_attempt_done_;
  first_attempt_done_ = true;
  if (Status s = ConnectLocked(); !s.ok()) {
    DropLocked();  // not a lost connection: FailLocked logs this once per outage
    return FailLocked(s.message());
  }
  connected_.store(true, std::memory_order_relaxed);
  if (!initial) {
    num_reconnects_.fetch_add(1, std::memory_order_relaxed);
    KV_LOG(INFO) << description_ << ": reconnected";
  }
  outage_logged_ = false;
  return OkStatus();
}

RedisKvStore::ReplyPtr RedisKvStore::CommandLocked(const std::vector<std::string_view>& args,
                                                   std::string* error) {
  std::vector<const char*> argv;
  std::vector<size_t> argvlen;
  argv.reserve(args.size());
  argvlen.reserve(args.size());
  for (std::string_view a : args) {
    argv.push_back(a.data());
    argvlen.push_back(a.size());
  }
  void* raw;
  int saved_errno;
  {
    ScopedSigpipeBlock no_sigpipe;
    errno = 0;
    raw = redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), argvlen.data());
    saved_errno = errno;
  }
  ReplyPtr reply(static_cast<redisReply*>(raw), freeReplyObject);
  if (reply == nullptr) {
    // SO_RCVTIMEO / SO_SNDTIMEO expiring shows up as EAGAIN.
    if (context_->err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK)) {
      *error = "no reply within " + std::to_string(options_.command_timeout_ms) + " ms";
    } else {
      *error = context_->err != 0 ? context_->errstr : "no reply";
    }
    return ReplyPtr(nullptr, freeReplyObject);
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    *error = "Redis replied: " + std::string(reply->str, reply->len);
    return ReplyPtr(nullptr, freeReplyObject);
  }
  return reply;
}

Status RedisKvStore::Put(uint64_t key, std::string_view value) {
  const std::string redis_key = RedisKey(options_.fingerprint, key);
  const std::string ttl = std::to_string(options_.ttl_seconds);
  std::vector<std::string_view> args = {"SET", redis_key, value};
  if (options_.ttl_seconds > 0) args.insert(args.end(), {"EX", ttl});

  std::lock_guard<std::mutex> lock(mu_);
  KV_RETURN_IF_ERROR(EnsureConnectedLocked());
  std::string error;
  const ReplyPtr reply = CommandLocked(args, &error);
  if (reply == nullptr) return FailLocked("SET: " + error);
  if (reply->type != REDIS_REPLY_STATUS) return FailLocked("SET: unexpected reply type");
  return OkStatus();
}

StatusOr<std::vector<std::string>> RedisKvStore::GetPrefix(std::span<const uint64_t> keys) {
  std::vector<std::string> values;
  if (keys.empty()) return values;
  std::vector<std::string> redis_keys;
  redis_keys.reserve(keys.size());
  std::vector<std::string_view> args = {"MGET"};
  args.reserve(keys.size() + 1);
  for (uint64_t key : keys) {
    redis_keys.push_back(RedisKey(options_.fingerprint, key));
    args.push_back(redis_keys.back());
  }

  std::lock_guard<std::mutex> lock(mu_);
  KV_RETURN_IF_ERROR(EnsureConnectedLocked());
  std::string error;
  const ReplyPtr reply = CommandLocked(args, &error);
  if (reply == nullptr) return FailLocked("MGET: " + error);
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != keys.size()) {
    return FailLocked("MGET: unexpected reply");
  }
  // One round trip for the whole chain; values past the first miss are not used.
  for (size_t i = 0; i < reply->elements; ++i) {
    const redisReply* element = reply->element[i];
    if (element == nullptr || element->type != REDIS_REPLY_STRING) break;  // nil: absent
    values.emplace_back(element->str, element->len);
  }
  return values;
}

StatusOr<size_t> RedisKvStore::ForEachInPrefix(
    std::span<const uint64_t> keys,
    const std::function<bool(size_t index, std::string_view value)>& visit) {
  size_t visited = 0;
  while (visited < keys.size()) {
    const std::span<const uint64_t> slice =
        keys.subspan(visited, std::min(kMgetKeys, keys.size() - visited));
    StatusOr<std::vector<std::string>> values = GetPrefix(slice);
    if (!values.ok()) {
      if (visited == 0) return values.status();
      return visited;  // what was read stays good; the rest is a miss
    }
    for (const std::string& v : *values) {
      if (!visit(visited, v)) return visited;
      ++visited;
    }
    if (values->size() < slice.size()) break;  // a key was absent
  }
  return visited;
}

void RedisKvStore::Erase(uint64_t key) {
  const std::string redis_key = RedisKey(options_.fingerprint, key);
  std::lock_guard<std::mutex> lock(mu_);
  if (!EnsureConnectedLocked().ok()) return;
  std::string error;
  const ReplyPtr reply = CommandLocked({"DEL", redis_key}, &error);
  if (reply == nullptr || reply->type != REDIS_REPLY_INTEGER) {
    (void)FailLocked("DEL: " + (reply == nullptr ? error : "unexpected reply type"));
  }
}

}  // namespace kvserve

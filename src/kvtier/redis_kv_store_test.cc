// RedisKvStore against a real redis-server that each test starts on a free port, and
// ParseRedisUrl on its own.
#include "kvtier/redis_kv_store.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/testing/test_dependency.h"
#include "kvtier/testing/redis_server.h"

namespace kvserve {
namespace {

using std::chrono::milliseconds;

TEST(ParseRedisUrlTest, AcceptsTheDocumentedForms) {
  struct Case {
    const char* url;
    RedisAddress want;
  };
  const Case cases[] = {
      {"redis://localhost", {"localhost", 6379, "", "", 0}},
      {"redis://:s3cret@10.0.0.7:6380/15", {"10.0.0.7", 6380, "", "s3cret", 15}},
      {"redis://default:p%40ss%3Aw%2Fd@cache/", {"cache", 6379, "", "p@ss:w/d", 0}},  // escaped
      {"redis://[::1]:7000/2", {"::1", 7000, "", "", 2}},
      {"unix:///run/redis/redis.sock", {"", 6379, "/run/redis/redis.sock", "", 0}},
  };
  for (const Case& c : cases) {
    const auto a = ParseRedisUrl(c.url);
    ASSERT_TRUE(a.ok()) << c.url << ": " << a.status().ToString();
    EXPECT_EQ(a->host, c.want.host) << c.url;
    EXPECT_EQ(a->port, c.want.port) << c.url;
    EXPECT_EQ(a->unix_path, c.want.unix_path) << c.url;
    EXPECT_EQ(a->password, c.want.password) << c.url;
    EXPECT_EQ(a->db, c.want.db) << c.url;
  }
}

TEST(ParseRedisUrlTest, RefusesMalformedUrls) {
  for (const char* url :
       {"", "localhost:6379", "http://h", "rediss://h", "redis://", "redis://:6379", "redis://h:",
        "redis://h:0", "redis://h:65536", "redis://h:6379x", "redis://h/x", "redis://h/-1",
        "redis://h/1?timeout=1", "redis://user:pw@h", "redis://pw@h", "redis://:p%zz@h",
        "redis://:p%4@h", "redis://::1:6379", "redis://[::1", "redis://[::1]x", "unix://",
        "unix://relative.sock", "unix:///"}) {
    const auto a = ParseRedisUrl(url);
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << url;
  }
  // The message names the URL without its password.
  const auto a = ParseRedisUrl("redis://:topsecret@h:99999");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message().find("topsecret"), std::string::npos) << a.status().message();
}

TEST(RedisKvStoreCreateTest, RefusesBadUrlsAndStartsDisconnectedWhenRedisIsDown) {
  RedisKvStoreOptions options;
  options.url = "redis://h:notaport";
  EXPECT_EQ(RedisKvStore::Create(options).status().code(), StatusCode::kInvalidArgument);
  options.url = "redis://127.0.0.1:1";  // nothing listens on port 1
  options.retry_interval_ms = 60000;
  auto store = RedisKvStore::Create(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_FALSE((*store)->connected());
  EXPECT_EQ((*store)->num_errors(), 1);
  const uint64_t keys[] = {1};
  EXPECT_EQ((*store)->Put(1, "v").code(), StatusCode::kUnavailable);
  EXPECT_EQ((*store)->GetPrefix(keys).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ((*store)->num_errors(), 1);  // failed fast: no second attempt inside the interval
  EXPECT_EQ((*store)->description(), "redis 127.0.0.1:1 db 0, TTL 3600 s");
}

class RedisKvStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVSERVE_SKIP_IF_ABSENT(testing::TestRedisServer::Available(),
                           testing::kRedisServerBinary << " (apt-get install redis-server)");
    server_ = std::make_unique<testing::TestRedisServer>();
    port_ = server_->port();
    dir_ = server_->dir();
    ASSERT_GT(port_, 0);
    ASSERT_TRUE(StartServer());
  }
  void TearDown() override { server_.reset(); }

  bool StartServer(const std::vector<std::string>& extra = {}) { return server_->Start(extra); }
  void KillServer() { server_->Kill(); }

  RedisKvStoreOptions Options(uint64_t fingerprint = 0xab) const {
    RedisKvStoreOptions options;
    options.url = "redis://127.0.0.1:" + std::to_string(port_);
    options.fingerprint = fingerprint;
    // Generous timeouts: a slow sanitizer build on 2 busy cores must not read as an outage
    // (the outage tests below set their own).
    options.connect_timeout_ms = 2000;
    options.command_timeout_ms = 3000;
    options.retry_interval_ms = 300;
    return options;
  }
  static std::unique_ptr<RedisKvStore> Open(const RedisKvStoreOptions& options) {
    auto store = RedisKvStore::Create(options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }

  std::unique_ptr<testing::TestRedisServer> server_;
  std::string dir_;
  int port_ = -1;
};

// Elapsed time of fn(), in milliseconds.
template <typename Fn>
int64_t TimeMs(Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start)
      .count();
}

TEST_F(RedisKvStoreTest, RoundTripsBinaryValues) {
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->connected());
  EXPECT_EQ(store->description(), "redis 127.0.0.1:" + std::to_string(port_) + " db 0, TTL 3600 s");
  std::string big(1 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  const std::vector<std::string> values = {std::string("a\0b\0", 4), "", big, "\xff\r\n"};
  const std::vector<uint64_t> keys = {1, 2, 3, ~uint64_t{0}};
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_TRUE(store->Put(keys[i], values[i]).ok());
  const auto got = store->GetPrefix(keys);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, values);
  EXPECT_EQ(store->num_errors(), 0);
}

TEST_F(RedisKvStoreTest, ReturnsThePrefixUpToTheFirstMissingKey) {
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put(10, "a").ok());
  ASSERT_TRUE(store->Put(30, "c").ok());
  const uint64_t abc[] = {10, 20, 30};
  EXPECT_EQ(*store->GetPrefix(abc), std::vector<std::string>{"a"});
  EXPECT_TRUE(store->GetPrefix(std::span<const uint64_t>(abc + 1, 2))->empty());
  EXPECT_TRUE(store->GetPrefix({})->empty());
  store->Erase(10);
  EXPECT_TRUE(store->GetPrefix(abc)->empty());
  EXPECT_TRUE(store->MayContain(20));
}

TEST_F(RedisKvStoreTest, FingerprintsDoNotSeeEachOther) {
  auto one = Open(Options(1));
  auto two = Open(Options(2));
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  ASSERT_TRUE(one->Put(7, "one's").ok());
  ASSERT_TRUE(one->Put(8, "only one's").ok());
  ASSERT_TRUE(two->Put(7, "two's").ok());
  const uint64_t keys[] = {7, 8};
  EXPECT_EQ(*one->GetPrefix(keys), (std::vector<std::string>{"one's", "only one's"}));
  EXPECT_EQ(*two->GetPrefix(keys), std::vector<std::string>{"two's"});
  // The documented key layout, seen from outside.
  redisContext* raw = testing::RawRedisConnect(port_);
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(testing::RawRedisCommand(raw, {"GET", "kvserve:kv:0000000000000001:0000000000000008"}), "only one's");
  EXPECT_EQ(RedisKvStore::RedisKey(0xab, 0x1234), "kvserve:kv:00000000000000ab:0000000000001234");
  redisFree(raw);
}

TEST_F(RedisKvStoreTest, SetsTheTtl) {
  auto with_ttl = Open(Options(1));
  RedisKvStoreOptions options = Options(2);
  options.ttl_seconds = 0;
  auto without = Open(options);
  ASSERT_NE(with_ttl, nullptr);
  ASSERT_NE(without, nullptr);
  EXPECT_EQ(without->description(), "redis 127.0.0.1:" + std::to_string(port_) + " db 0, TTL none");
  ASSERT_TRUE(with_ttl->Put(5, "v").ok());
  ASSERT_TRUE(without->Put(5, "v").ok());
  redisContext* raw = testing::RawRedisConnect(port_);
  ASSERT_NE(raw, nullptr);
  const int ttl = std::stoi(testing::RawRedisCommand(raw, {"TTL", RedisKvStore::RedisKey(1, 5)}));
  EXPECT_GT(ttl, 3590);
  EXPECT_LE(ttl, 3600);
  EXPECT_EQ(testing::RawRedisCommand(raw, {"TTL", RedisKvStore::RedisKey(2, 5)}), "-1");  // no expiry
  redisFree(raw);
}

TEST_F(RedisKvStoreTest, ConnectsOverAUnixSocket) {
  RedisKvStoreOptions options = Options();
  options.url = "unix://" + dir_ + "/redis.sock";
  auto store = Open(options);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->connected());
  ASSERT_TRUE(store->Put(1, "via socket").ok());
  const uint64_t keys[] = {1};
  EXPECT_EQ(*Open(Options())->GetPrefix(keys), std::vector<std::string>{"via socket"});
}

TEST_F(RedisKvStoreTest, AuthenticatesAndSelectsTheDb) {
  KillServer();
  ASSERT_TRUE(StartServer({"--requirepass", "pw@1"}));
  RedisKvStoreOptions options = Options();
  options.url = "redis://:pw%401@127.0.0.1:" + std::to_string(port_) + "/3";
  auto store = Open(options);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->connected());
  ASSERT_TRUE(store->Put(9, "in db 3").ok());
  redisContext* raw = testing::RawRedisConnect(port_);
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(testing::RawRedisCommand(raw, {"AUTH", "pw@1"}), "OK");
  EXPECT_EQ(testing::RawRedisCommand(raw, {"GET", RedisKvStore::RedisKey(0xab, 9)}), "(nil)");  // db 0
  EXPECT_EQ(testing::RawRedisCommand(raw, {"SELECT", "3"}), "OK");
  EXPECT_EQ(testing::RawRedisCommand(raw, {"GET", RedisKvStore::RedisKey(0xab, 9)}), "in db 3");
  redisFree(raw);

  options.url = "redis://:wrong@127.0.0.1:" + std::to_string(port_);
  auto refused = Open(options);
  ASSERT_NE(refused, nullptr);
  EXPECT_FALSE(refused->connected());
  EXPECT_EQ(refused->Put(9, "x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(refused->description().find("wrong"), std::string::npos);
}

TEST_F(RedisKvStoreTest, FailsFastWhileRedisIsDownAndReconnects) {
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put(1, "before").ok());
  KillServer();
  const uint64_t keys[] = {1};
  // A value larger than the socket buffer: hiredis's write() after Redis's reset would raise
  // SIGPIPE, which must not kill the process.
  const std::string big(4 << 20, 'x');
  EXPECT_LT(TimeMs([&] { EXPECT_FALSE(store->Put(2, big).ok()); }), 1000);
  EXPECT_FALSE(store->connected());
  EXPECT_LT(TimeMs([&] { EXPECT_FALSE(store->GetPrefix(keys).ok()); }), 1000);
  EXPECT_LT(TimeMs([&] { store->Erase(1); }), 1000);
  EXPECT_GE(store->num_errors(), 1);

  ASSERT_TRUE(StartServer());
  std::this_thread::sleep_for(milliseconds(Options().retry_interval_ms + 50));
  ASSERT_TRUE(store->Put(3, "after").ok());
  EXPECT_TRUE(store->connected());
  EXPECT_EQ(store->num_reconnects(), 1);
  const uint64_t after[] = {3};
  EXPECT_EQ(*store->GetPrefix(after), std::vector<std::string>{"after"});
}

TEST_F(RedisKvStoreTest, TimesOutOnAHungRedis) {
  RedisKvStoreOptions options = Options();
  options.command_timeout_ms = 300;
  options.retry_interval_ms = 5000;  // the fail-fast call below is well inside the interval
  auto store = Open(options);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put(1, "v").ok());
  kill(server_->pid(), SIGSTOP);  // accepts nothing, answers nothing: a stalled Redis
  const uint64_t keys[] = {1};
  EXPECT_LT(TimeMs([&] { EXPECT_FALSE(store->GetPrefix(keys).ok()); }), 2000);
  EXPECT_LT(TimeMs([&] { EXPECT_FALSE(store->Put(1, "w").ok()); }), 50);  // fail fast
  kill(server_->pid(), SIGCONT);
  std::this_thread::sleep_for(milliseconds(options.retry_interval_ms + 50));
  const auto got = store->GetPrefix(keys);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, std::vector<std::string>{"v"});
}

TEST_F(RedisKvStoreTest, IsSafeToShareBetweenThreads) {
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      for (uint64_t i = 0; i < 50; ++i) {
        const uint64_t key = t * 1000 + i;
        const std::string value = std::to_string(key);
        EXPECT_TRUE(store->Put(key, value).ok());
        const uint64_t keys[] = {key};
        EXPECT_EQ(*store->GetPrefix(keys), std::vector<std::string>{value});
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(store->num_errors(), 0);
}

}  // namespace
}  // namespace kvserve

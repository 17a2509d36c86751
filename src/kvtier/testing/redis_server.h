// Tests: a real redis-server (Debian's /usr/bin/redis-server) started as a child process on a
// free local port, killed with the test (PR_SET_PDEATHSIG) or by Kill(); Start() again to
// bring it back on the same port. Tests skip without it (KVSERVE_SKIP_IF_ABSENT: a failure
// under KVSERVE_REQUIRE_ASSETS=1).
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace kvserve::testing {

inline constexpr const char* kRedisServerBinary = "/usr/bin/redis-server";

// A port that nothing listens on now (the kernel's pick for port 0).
inline int FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// A raw hiredis connection to 127.0.0.1:port (for checks behind a store's back), or null.
inline redisContext* RawRedisConnect(int port) {
  timeval tv{0, 200 * 1000};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (c != nullptr && c->err != 0) {
    redisFree(c);
    return nullptr;
  }
  if (c != nullptr) redisSetTimeout(c, tv);
  return c;
}

// Runs one command on a raw connection: the reply as text ("(nil)", integers in decimal).
inline std::string RawRedisCommand(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (r == nullptr) return "(no reply)";
  std::string out = r->type == REDIS_REPLY_INTEGER ? std::to_string(r->integer)
                    : r->type == REDIS_REPLY_NIL   ? "(nil)"
                                                   : std::string(r->str, r->len);
  freeReplyObject(r);
  return out;
}

// Owns the child process and its scratch folder (removed by the destructor).
class TestRedisServer {
 public:
  TestRedisServer() {
    char dir[] = "/tmp/kvserve_redis_test.XXXXXX";
    if (mkdtemp(dir) != nullptr) dir_ = dir;
    port_ = FreeTcpPort();
  }
  ~TestRedisServer() {
    Kill();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  TestRedisServer(const TestRedisServer&) = delete;
  TestRedisServer& operator=(const TestRedisServer&) = delete;

  static bool Available() { return std::filesystem::exists(kRedisServerBinary); }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // Starts redis-server on port() (again, after Kill) without persistence and waits until it
  // answers PING (up to 5 s). `extra`: more redis-server arguments.
  bool Start(const std::vector<std::string>& extra = {}) {
    if (dir_.empty() || port_ <= 0) return false;
    std::vector<std::string> args = {kRedisServerBinary, "--port", std::to_string(port_),
                                     "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                     "--daemonize", "no", "--dir", dir_, "--unixsocket",
                                     dir_ + "/redis.sock", "--unixsocketperm", "700",
                                     "--logfile", dir_ + "/redis.log"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphan Redis when the test dies
      execv(kRedisServerBinary, argv.data());
      _exit(127);
    }
    for (int i = 0; i < 500; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      if (redisContext* c = RawRedisConnect(port_)) {
        const std::string pong = RawRedisCommand(c, {"PING"});
        redisFree(c);
        if (pong != "(no reply)") return true;  // PONG, or NOAUTH under requirepass
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string dir_;
  int port_ = -1;
  pid_t pid_ = -1;
};

}  // namespace kvserve::testing

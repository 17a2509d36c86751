// Test-only helpers shared by the CLI tests: temporary directories, file reading, and running
// the built `kvserve` binary (KVSERVE_BINARY, defined by the test targets) with its exit code,
// stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kvserve::cli::testing {

// A fresh directory under /tmp, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kvserve_test_XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    path_ = made != nullptr ? made : "/tmp";
  }
  ~TempDir() {
    std::error_code ec;
    if (path_ != "/tmp") std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Single-quotes a shell argument.
inline std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct Ran {
  int exit_code = -1;  // 128 + signal when killed by one
  std::string out;
  std::string err;
};

#ifdef KVSERVE_BINARY
// Runs `kvserve args...` and captures its exit code, stdout and stderr. `env` (NAME=VALUE
// pairs) is set for the child only.
inline Ran RunKv(const std::vector<std::string>& args,
                 const std::vector<std::string>& env = {}) {
  TempDir tmp;
  std::string cmd;
  for (const std::string& e : env) cmd += Quote(e) + " ";
  if (!env.empty()) cmd = "env " + cmd;
  cmd += Quote(KVSERVE_BINARY);
  for (const std::string& a : args) cmd += " " + Quote(a);
  cmd += " 2>" + Quote(tmp.file("stderr"));
  Ran r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.exit_code = 128 + WTERMSIG(status);
  }
  r.err = ReadFile(tmp.file("stderr"));
  return r;
}
#endif

}  // namespace kvserve::cli::testing

#include "kvtier/disk_kv_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "base/str_format.h"

namespace kvserve {
namespace fs = std::filesystem;

namespace {

std::string Hex16(uint64_t v) { return StrFormat("%016llx", static_cast<unsigned long long>(v)); }

bool ParseHex16(std::string_view s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

// Writes all of `data` to a new file `path` (O_EXCL); errno on failure.
int WriteWholeFile(const std::string& path, std::string_view data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  size_t done = 0;
  int err = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

// The whole file into the front of *buffer (grown when too small, never shrunk) and its size
// into *size; 0, or the errno of the failure (ENODATA for a file that shrank while read).
int ReadWholeFile(const std::string& path, std::string* buffer, size_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  errno = 0;
  struct stat st;
  bool ok = ::fstat(fd, &st) == 0;
  if (ok) {
    *size = static_cast<size_t>(st.st_size);
    if (buffer->size() < *size) buffer->resize(*size);
    size_t done = 0;
    while (ok && done < *size) {
      const ssize_t n = ::read(fd, buffer->data() + done, *size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ok = false;
      else done += static_cast<size_t>(n);
    }
  }
  const int err = ok ? 0 : (errno != 0 ? errno : ENODATA);
  ::close(fd);
  return err;
}

}  // namespace

StatusOr<std::unique_ptr<DiskKvStore>> DiskKvStore::Open(const DiskKvStoreOptions& options) {
  if (options.dir.empty()) return InvalidArgumentError("--kv-offload-dir: empty path");
  if (options.max_bytes <= 0) return InvalidArgumentError("--kv-offload-bytes must be > 0");
  const std::string folder = (fs::path(options.dir) / ("kvserve-" + Hex16(options.fingerprint)))
                                 .string();
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) {
    return InvalidArgumentError("--kv-offload-dir: cannot create " + folder + ": " +
                                ec.message());
  }
  std::unique_ptr<DiskKvStore> store(new DiskKvStore(folder, options.max_bytes));
  const std::string lock_path = folder + "/.lock";
  store->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (store->lock_fd_ < 0) {
    return InvalidArgumentError("--kv-offload-dir: cannot create " + lock_path + ": " +
                                std::strerror(errno));
  }
  if (::flock(store->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return FailedPreconditionError(
        "--kv-offload-dir: " + folder +
        " is in use by another process (one folder per server; replicas share blocks "
        "through --kv-redis)");
  }
  // Index what an earlier run left, oldest first.
  struct Found {
    fs::file_time_type mtime;
    uint64_t key;
    int64_t bytes;
  };
  std::vector<Found> found;
  fs::recursive_directory_iterator it(folder, ec), end;
  if (ec) return InvalidArgumentError("--kv-offload-dir: cannot list " + folder + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    if (!it->is_regular_file(ec) || ec) continue;
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    uint64_t key;
    if (name.find(".tmp") != std::string::npos) {
      fs::remove(p, ec);  // ours: the folder's lock says no other process is writing here
      ++store->num_removed_temporaries_;
    } else if (p.extension() == ".kvb" && ParseHex16(p.stem().string(), &key)) {
      std::error_code time_ec, size_ec;
      const fs::file_time_type mtime = it->last_write_time(time_ec);
      const uintmax_t size = it->file_size(size_ec);
      if (time_ec || size_ec) continue;  // vanished while listed
      found.push_back({mtime, key, static_cast<int64_t>(size)});
    }
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::vector<std::string> victims;
  {
    std::lock_guard<std::mutex> lock(store->mu_);
    for (const Found& f : found) {
      store->lru_.push_back(f.key);
      store->index_[f.key] = {f.bytes, std::prev(store->lru_.end())};
      store->total_bytes_ += f.bytes;
    }
    store->num_recovered_files_ = static_cast<int64_t>(found.size());
    while (store->total_bytes_ > store->max_bytes_ && !store->lru_.empty()) {
      victims.push_back(store->path_of(store->lru_.front()));
      store->forget_locked(store->lru_.front());
    }
  }
  // Files trimmed here are not reported: no event ever announced them.
  for (const std::string& v : victims) ::unlink(v.c_str());
  return store;
}

void DiskKvStore::remove_files(const std::vector<uint64_t>& keys) const {
  for (uint64_t key : keys) {
    ::unlink(path_of(key).c_str());
    if (on_removed_) on_removed_(key);
  }
}

DiskKvStore::~DiskKvStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::string DiskKvStore::path_of(uint64_t key) const {
  const std::string hex = Hex16(key);
  return folder_ + "/" + hex.substr(0, 2) + "/" + hex + ".kvb";
}

void DiskKvStore::forget_locked(uint64_t key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  total_bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
}

Status DiskKvStore::Put(uint64_t key, std::string_view value) {
  const auto bytes = static_cast<int64_t>(value.size());
  if (bytes > max_bytes_) {
    return ResourceExhaustedError("a block of " + std::to_string(bytes) +
                                  " bytes exceeds --kv-offload-bytes");
  }
  const std::string path = path_of(key);
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int err = WriteWholeFile(tmp, value);
  if (err == ENOENT) {  // the shard folder is missing: create it and retry once
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    err = WriteWholeFile(tmp, value);
  }
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return UnavailableError("disk tier: cannot write " + path + ": " + std::strerror(err));
  }
  std::vector<uint64_t> victims;
  {
    std::lock_guard<std::mutex> lock(mu_);
    forget_locked(key);
    lru_.push_back(key);
    index_[key] = {bytes, std::prev(lru_.end())};
    total_bytes_ += bytes;
    while (total_bytes_ > max_bytes_ && lru_.front() != key) {
      victims.push_back(lru_.front());
      forget_locked(lru_.front());
    }
  }
  remove_files(victims);
  return OkStatus();
}

StatusOr<std::vector<std::string>> DiskKvStore::GetPrefix(std::span<const uint64_t> keys) {
  std::vector<std::string> values;
  KV_ASSIGN_OR_RETURN(size_t n, ForEachInPrefix(keys, [&](size_t, std::string_view v) {
    values.emplace_back(v);
    return true;
  }));
  (void)n;
  return values;
}

StatusOr<size_t> DiskKvStore::ForEachInPrefix(
    std::span<const uint64_t> keys,
    const std::function<bool(size_t index, std::string_view value)>& visit) {
  thread_local std::string buffer;  // grows to the largest record, then reused
  size_t visited = 0;
  for (uint64_t key : keys) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = index_.find(key);
      if (it == index_.end()) break;
      lru_.splice(lru_.end(), lru_, it->second.lru);  // used now
    }
    size_t size = 0;
    if (const int err = ReadWholeFile(path_of(key), &buffer, &size); err != 0) {
      // Gone (an operator removed it): forget it. Anything else (EMFILE, EIO) is a miss now,
      // and the file stays for later.
      if (err == ENOENT) Erase(key);
      break;
    }
    if (!visit(visited, std::string_view(buffer.data(), size))) break;
    ++visited;
  }
  return visited;
}

bool DiskKvStore::MayContain(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(key) != 0;
}

void DiskKvStore::Erase(uint64_t key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.count(key) == 0) return;
    forget_locked(key);
  }
  remove_files({key});
}

int64_t DiskKvStore::num_files() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(index_.size());
}

int64_t DiskKvStore::num_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_bytes_;
}

}  // namespace kvserve

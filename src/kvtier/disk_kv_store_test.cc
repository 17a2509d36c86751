#include "kvtier/disk_kv_store.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kvserve {
namespace {
namespace fs = std::filesystem;

class DiskKvStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvserve_disk_store_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<DiskKvStore> Open(uint64_t fingerprint, int64_t max_bytes) {
    auto s = DiskKvStore::Open({dir_.string(), fingerprint, max_bytes});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  fs::path dir_;
};

std::string Value(int i, size_t n = 100) { return std::string(n, static_cast<char>('a' + i)); }

TEST_F(DiskKvStoreTest, GetPrefixStopsAtTheFirstMissingKey) {
  auto s = Open(7, 1 << 20);
  ASSERT_TRUE(s->Put(1, Value(1)).ok());
  ASSERT_TRUE(s->Put(2, Value(2)).ok());
  ASSERT_TRUE(s->Put(4, Value(4)).ok());
  const std::vector<uint64_t> keys = {1, 2, 3, 4};
  auto got = s->GetPrefix(keys);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, (std::vector<std::string>{Value(1), Value(2)}));
  EXPECT_TRUE(s->MayContain(4));
  EXPECT_FALSE(s->MayContain(3));
  EXPECT_EQ(s->num_files(), 3);
  EXPECT_EQ(s->num_bytes(), 300);
  s->Erase(1);
  EXPECT_TRUE(s->GetPrefix(keys)->empty());
}

TEST_F(DiskKvStoreTest, KeepsItsBudgetByDroppingTheLeastRecentlyUsed) {
  auto s = Open(7, 350);
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(s->Put(i, Value(i)).ok());
  const uint64_t first = 1;
  ASSERT_EQ(s->GetPrefix({&first, 1})->size(), 1u);  // 1 is now the most recently used
  ASSERT_TRUE(s->Put(4, Value(4)).ok());             // over 350: 2 goes
  EXPECT_TRUE(s->MayContain(1));
  EXPECT_FALSE(s->MayContain(2));
  EXPECT_TRUE(s->MayContain(3));
  EXPECT_TRUE(s->MayContain(4));
  EXPECT_EQ(s->num_bytes(), 300);
  EXPECT_FALSE(s->Put(9, Value(9, 400)).ok());  // larger than the whole budget
}

TEST_F(DiskKvStoreTest, ReportsEveryFileItDeletes) {
  std::vector<uint64_t> removed;
  auto s = DiskKvStore::Open({dir_.string(), 7, 250});
  ASSERT_TRUE(s.ok());
  (*s)->set_removal_listener([&](uint64_t k) { removed.push_back(k); });
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE((*s)->Put(i, Value(i)).ok());  // 3 evicts 1
  (*s)->Erase(2);
  (*s)->Erase(2);  // not there any more: nothing to report
  EXPECT_EQ(removed, (std::vector<uint64_t>{1, 2}));
}

TEST_F(DiskKvStoreTest, ARestartFindsTheBlocksAndDropsTemporaries) {
  {
    auto s = Open(7, 1 << 20);
    ASSERT_TRUE(s->Put(1, Value(1)).ok());
    ASSERT_TRUE(s->Put(2, Value(2)).ok());
    // A write a crash interrupted.
    std::ofstream(s->folder() + "/00/0000000000000003.kvb.tmp.1.0") << "partial";
  }
  auto s = Open(7, 1 << 20);
  EXPECT_EQ(s->num_recovered_files(), 2);
  EXPECT_EQ(s->num_removed_temporaries(), 1);
  const std::vector<uint64_t> keys = {1, 2};
  EXPECT_EQ(*s->GetPrefix(keys), (std::vector<std::string>{Value(1), Value(2)}));
  // Another fingerprint (another model or KV setting) sees nothing of it.
  auto other = Open(8, 1 << 20);
  EXPECT_EQ(other->num_files(), 0);
  EXPECT_TRUE(other->GetPrefix(keys)->empty());
  // A smaller budget at restart trims the oldest.
  s.reset();
  auto small = Open(7, 150);
  EXPECT_EQ(small->num_files(), 1);
}

TEST_F(DiskKvStoreTest, AFailedWriteStoresNothingAndLeavesNoFile) {
  auto s = Open(7, 1 << 20);
  ASSERT_TRUE(s->Put(1, Value(1)).ok());
  // A file size limit makes writes fail as a full disk does (EFBIG instead of ENOSPC).
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 50;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status st = s->Put(2, Value(2));
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot write"), std::string::npos) << st.message();
  EXPECT_FALSE(s->MayContain(2));
  EXPECT_EQ(s->num_files(), 1);
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(s->folder())) {
    files += e.is_regular_file() && e.path().filename() != ".lock";
  }
  EXPECT_EQ(files, 1);  // no partial file left
  EXPECT_TRUE(s->Put(3, Value(3)).ok());  // and it works again once there is room
}

TEST_F(DiskKvStoreTest, OneProcessPerFolder) {
  auto first = Open(7, 1 << 20);
  auto second = DiskKvStore::Open({dir_.string(), 7, 1 << 20});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use by another process"), std::string::npos);
  first.reset();  // the lock goes with it
  EXPECT_TRUE(DiskKvStore::Open({dir_.string(), 7, 1 << 20}).ok());
}

TEST_F(DiskKvStoreTest, RefusesABadFolder) {
  std::ofstream(dir_.string()) << "a file, not a folder";
  EXPECT_FALSE(DiskKvStore::Open({dir_.string(), 7, 100}).ok());
  fs::remove(dir_);
  EXPECT_FALSE(DiskKvStore::Open({dir_.string(), 7, 0}).ok());
  EXPECT_FALSE(DiskKvStore::Open({"", 7, 100}).ok());
}

}  // namespace
}  // namespace kvserve

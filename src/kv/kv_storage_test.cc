#include "kv/kv_storage.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace kvserve {
namespace {

KvCacheSpec Spec(DType dtype) {
  KvCacheSpec spec;
  spec.num_layers = 2;
  spec.num_kv_heads = 3;
  spec.head_dim = 40;
  spec.dtype = dtype;
  spec.block_size = 4;
  return spec;
}

std::vector<float> RandomRows(int64_t n, uint32_t seed, float magnitude) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, magnitude);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

// Relative error bound per dtype of one stored value (vs the head's absmax for int8/fp8).
float Bound(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 0.0f;
    case DType::kF16: return 1.0f / 1024;
    case DType::kBF16: return 1.0f / 128;
    case DType::kFp8E4M3: return 1.0f / 8;
    case DType::kFp8E5M2: return 1.0f / 4;
    case DType::kI8: return 1.0f / 127;
    default: return 1.0f;
  }
}

class KvStorageDtypeTest : public ::testing::TestWithParam<DType> {};

TEST_P(KvStorageDtypeTest, WriteThenReadBackWithinBound) {
  const DType dtype = GetParam();
  const KvCacheSpec spec = Spec(dtype);
  auto storage_or = KvStorage::Create(spec, 5);
  ASSERT_TRUE(storage_or.ok()) << storage_or.status().ToString();
  KvStorage& storage = **storage_or;
  const int64_t kv_dim = spec.num_kv_heads * spec.head_dim;
  EXPECT_EQ(storage.total_bytes(), 5 * spec.bytes_per_block() + spec.fixed_scale_bytes());
  const std::vector<float> k = RandomRows(6 * kv_dim, 1, 2.0f);
  const std::vector<float> v = RandomRows(6 * kv_dim, 2, 0.5f);
  if (dtype == DType::kFp8E4M3 || dtype == DType::kFp8E5M2) {
    // Calibrate on the same data through an f32 observer.
    auto observer = KvStorage::Create(Spec(DType::kF32), 5);
    ASSERT_TRUE(observer.ok());
    (*observer)->observe_absmax(true);
    const int64_t obs_slots[6] = {0, 1, 2, 3, 4, 5};
    for (int64_t l = 0; l < 2; ++l) (*observer)->Write(l, obs_slots, 6, k.data(), v.data());
    KvScales scales = Fp8ScalesFromAbsmax(dtype, (*observer)->absmax_k(),
                                          (*observer)->absmax_v(), 1.0f);
    scales.source = KvScaleSource::kCalibrated;
    ASSERT_TRUE(storage.SetScales(scales).ok());
  }
  const int64_t slots[6] = {19, 0, 7, 8, 3, 12};
  storage.Write(1, slots, 6, k.data(), v.data());
  std::vector<float> kb(static_cast<size_t>(kv_dim)), vb(static_cast<size_t>(kv_dim));
  for (int t = 0; t < 6; ++t) {
    storage.ReadSlot(1, slots[t], kb.data(), vb.data());
    for (int64_t h = 0; h < spec.num_kv_heads; ++h) {
      float amax_k = 0, amax_v = 0;
      for (int64_t i = 0; i < spec.head_dim; ++i) {
        amax_k = std::max(amax_k, std::fabs(k[t * kv_dim + h * spec.head_dim + i]));
        amax_v = std::max(amax_v, std::fabs(v[t * kv_dim + h * spec.head_dim + i]));
      }
      for (int64_t i = 0; i < spec.head_dim; ++i) {
        const size_t j = static_cast<size_t>(h * spec.head_dim + i);
        const float xk = k[t * kv_dim + j], xv = v[t * kv_dim + j];
        // Floating formats: relative to the value (plus the subnormal floor); int8: absolute
        // in units of the head's absmax.
        const bool is_int = dtype == DType::kI8;
        const float tol_k = Bound(dtype) * (is_int ? amax_k / 2 : std::fabs(xk)) + 1e-3f * amax_k * (dtype != DType::kF32);
        const float tol_v = Bound(dtype) * (is_int ? amax_v / 2 : std::fabs(xv)) + 1e-3f * amax_v * (dtype != DType::kF32);
        ASSERT_LE(std::fabs(kb[j] - xk), tol_k) << DTypeName(dtype) << " t=" << t << " j=" << j;
        ASSERT_LE(std::fabs(vb[j] - xv), tol_v) << DTypeName(dtype) << " t=" << t << " j=" << j;
      }
    }
  }
  EXPECT_EQ(storage.quant_stats().total_clipped(), 0);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, KvStorageDtypeTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16,
                                           DType::kFp8E4M3, DType::kFp8E5M2, DType::kI8),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// Token eviction's compaction: per-head moves, overlapping in place, are exact in every dtype.
TEST_P(KvStorageDtypeTest, MoveHeadSlotsIsExactAndMayOverlap) {
  const DType dtype = GetParam();
  const KvCacheSpec spec = Spec(dtype);
  auto storage_or = KvStorage::Create(spec, 3);
  ASSERT_TRUE(storage_or.ok());
  KvStorage& storage = **storage_or;
  if (dtype == DType::kFp8E4M3 || dtype == DType::kFp8E5M2) {
    KvScales scales;
    scales.k.assign(6, 0.05f);
    scales.v.assign(6, 0.02f);
    scales.source = KvScaleSource::kManual;
    ASSERT_TRUE(storage.SetScales(scales).ok());
  }
  const int64_t kv_dim = spec.num_kv_heads * spec.head_dim;
  const std::vector<float> k = RandomRows(12 * kv_dim, 3, 2.0f);
  const std::vector<float> v = RandomRows(12 * kv_dim, 4, 0.5f);
  std::vector<int64_t> slots(12);
  for (int64_t t = 0; t < 12; ++t) slots[static_cast<size_t>(t)] = t;
  storage.Write(0, slots.data(), 12, k.data(), v.data());
  auto read = [&](int64_t slot) {
    std::vector<float> kb(static_cast<size_t>(kv_dim)), vb(static_cast<size_t>(kv_dim));
    storage.ReadSlot(0, slot, kb.data(), vb.data());
    return std::make_pair(kb, vb);
  };
  std::vector<std::pair<std::vector<float>, std::vector<float>>> before;
  for (int64_t t = 0; t < 12; ++t) before.push_back(read(t));
  // Head 0 compacts in place; head 1 keeps other tokens; head 2 swaps two slots.
  const std::vector<std::vector<int64_t>> from = {{5, 6, 11}, {0, 3, 9}, {2, 1}};
  const std::vector<std::vector<int64_t>> to = {{0, 1, 2}, {0, 1, 2}, {1, 2}};
  storage.MoveHeadSlots(0, from, to);
  const int64_t hd = spec.head_dim;
  for (int64_t h = 0; h < 3; ++h) {
    for (size_t i = 0; i < from[h].size(); ++i) {
      const auto got = read(to[h][i]);
      const auto& want = before[static_cast<size_t>(from[h][i])];
      for (int64_t d = 0; d < hd; ++d) {
        ASSERT_EQ(got.first[h * hd + d], want.first[h * hd + d]) << "head " << h << " i " << i;
        ASSERT_EQ(got.second[h * hd + d], want.second[h * hd + d]) << "head " << h;
      }
    }
  }
  // Slots no head wrote keep their values.
  const auto untouched = read(7);
  EXPECT_EQ(untouched.first, before[7].first);
  EXPECT_EQ(untouched.second, before[7].second);
}

TEST(KvStorageTest, Fp8CountsSaturationPerLayer) {
  auto storage = KvStorage::Create(Spec(DType::kFp8E4M3), 2);
  ASSERT_TRUE(storage.ok());
  const size_t n = 2 * 3;
  KvScales scales{std::vector<float>(n, 1.0f / 448), std::vector<float>(n, 1.0f / 448),
                  KvScaleSource::kManual, "test"};
  ASSERT_TRUE((*storage)->SetScales(scales).ok());
  std::vector<float> k(120, 0.5f), v(120, 0.5f);
  k[0] = 3.0f;   // 3 * 448 > 448: clipped
  k[5] = -1.5f;  // clipped
  v[7] = 1.0f;   // exactly max: not clipped
  const int64_t slot = 6;
  (*storage)->Write(1, &slot, 1, k.data(), v.data());
  EXPECT_EQ((*storage)->quant_stats().clipped_k[0], 0);
  EXPECT_EQ((*storage)->quant_stats().clipped_k[1], 2);
  EXPECT_EQ((*storage)->quant_stats().clipped_v[1], 0);
  std::vector<float> kb(120), vb(120);
  (*storage)->ReadSlot(1, slot, kb.data(), vb.data());
  EXPECT_FLOAT_EQ(kb[0], 1.0f);
  EXPECT_FLOAT_EQ(kb[5], -1.0f);
}

// CommitMemory(n) zeroes exactly blocks [0, n), clamped to the pool (ASan checks the bounds).
TEST(KvStorageTest, CommitMemoryOfALeadingBlockRange) {
  auto storage = KvStorage::Create(Spec(DType::kI8), 3);  // 12 slots of 4-token blocks
  ASSERT_TRUE(storage.ok());
  KvStorage& s = **storage;
  const std::vector<float> k = RandomRows(120, 5, 1.0f), v = RandomRows(120, 6, 1.0f);
  for (int64_t layer = 0; layer < 2; ++layer) {
    for (int64_t slot = 0; slot < 12; ++slot) s.Write(layer, &slot, 1, k.data(), v.data());
  }
  s.CommitMemory(-1);  // nothing
  s.CommitMemory(1);   // slots 0-3
  std::vector<float> kb(120), vb(120);
  for (int64_t layer = 0; layer < 2; ++layer) {
    s.ReadSlot(layer, 3, kb.data(), vb.data());
    EXPECT_EQ(kb, std::vector<float>(120, 0.0f)) << "layer " << layer;
    EXPECT_EQ(s.k_token_scales(layer)[3 * 3], 0.0f);
    s.ReadSlot(layer, 4, kb.data(), vb.data());  // block 1 keeps its values
    EXPECT_NE(kb, std::vector<float>(120, 0.0f)) << "layer " << layer;
  }
  s.CommitMemory(1000);  // clamped to the 3 blocks
  s.ReadSlot(1, 11, kb.data(), vb.data());
  EXPECT_EQ(vb, std::vector<float>(120, 0.0f));
}

TEST(KvStorageTest, Int8ScaleIsPerTokenAndHead) {
  auto storage = KvStorage::Create(Spec(DType::kI8), 1);
  ASSERT_TRUE(storage.ok());
  std::vector<float> k(120, 0.0f), v(120, 0.0f);
  k[0] = 127.0f;       // head 0: scale 1
  k[40 + 3] = -2.54f;  // head 1: scale 0.02
  const int64_t slot = 2;
  (*storage)->Write(0, &slot, 1, k.data(), v.data());
  EXPECT_FLOAT_EQ((*storage)->k_token_scales(0)[slot * 3 + 0], 1.0f);
  EXPECT_FLOAT_EQ((*storage)->k_token_scales(0)[slot * 3 + 1], 0.02f);
  EXPECT_FLOAT_EQ((*storage)->k_token_scales(0)[slot * 3 + 2], 0.0f);  // all-zero head
  std::vector<float> kb(120), vb(120);
  (*storage)->ReadSlot(0, slot, kb.data(), vb.data());
  EXPECT_FLOAT_EQ(kb[43], -2.54f);
  EXPECT_EQ(vb[0], 0.0f);
}

TEST(KvStorageTest, ObservesMeansAndStoresCenteredValues) {
  auto observer = KvStorage::Create(Spec(DType::kF32), 2);
  ASSERT_TRUE(observer.ok());
  (*observer)->observe_absmax(true);
  // Two tokens on layer 0: channel means are the averages, per head and channel.
  std::vector<float> k(240), v(240);
  for (int i = 0; i < 240; ++i) {
    k[i] = static_cast<float>(i % 120) + (i < 120 ? 1.0f : 3.0f);  // mean = i%120 + 2
    v[i] = (i < 120 ? -1.0f : 5.0f);                                // mean = 2, spread 3
  }
  const int64_t slots[2] = {0, 1};
  (*observer)->Write(0, slots, 2, k.data(), v.data());
  const std::vector<float> km = (*observer)->observed_mean(true);
  const std::vector<float> vm = (*observer)->observed_mean(false);
  ASSERT_EQ(km.size(), 2u * 120);
  EXPECT_FLOAT_EQ(km[0], 2.0f);
  EXPECT_FLOAT_EQ(km[119], 121.0f);
  EXPECT_FLOAT_EQ(vm[7], 2.0f);
  EXPECT_FLOAT_EQ(km[120], 0.0f);  // layer 1 never observed
  const std::vector<float> centered_absmax = (*observer)->observed_centered_absmax(false, vm);
  EXPECT_FLOAT_EQ(centered_absmax[0], 3.0f);
  EXPECT_FLOAT_EQ((*observer)->absmax_v()[0], 5.0f);

  auto storage = KvStorage::Create(Spec(DType::kI8), 2);
  ASSERT_TRUE(storage.ok());
  KvStorage::ChannelNorm norm{km, std::vector<float>(km.size(), 2.0f), vm,
                              std::vector<float>(km.size(), 0.5f)};
  ASSERT_TRUE((*storage)->SetChannelNorm(norm).ok());
  (*storage)->Write(0, slots, 2, k.data(), v.data());
  std::vector<float> kb(120), vb(120);
  (*storage)->ReadSlot(0, 1, kb.data(), vb.data());
  EXPECT_NEAR(kb[5], 0.5f, 1e-6);  // (5 + 3 - (5 + 2)) / 2
  EXPECT_NEAR(vb[5], 6.0f, 1e-5);  // (5 - 2) / 0.5
  ASSERT_NE((*storage)->value_channel_mean(0), nullptr);
  EXPECT_FLOAT_EQ((*storage)->value_channel_mean(0)[5], 2.0f);
  EXPECT_FLOAT_EQ((*storage)->key_channel_scale(1)[0], 2.0f);
  norm.k_scale[3] = 0.0f;
  EXPECT_FALSE((*storage)->SetChannelNorm(norm).ok());
  EXPECT_FALSE((*storage)->SetChannelNorm({{1.0f}, {1.0f}, {1.0f}, {1.0f}}).ok());
}

TEST(KvStorageTest, RejectsBadScalesAndSizes) {
  auto storage = KvStorage::Create(Spec(DType::kFp8E5M2), 1);
  ASSERT_TRUE(storage.ok());
  EXPECT_FALSE((*storage)->SetScales(KvScales{{1.0f}, {1.0f}, KvScaleSource::kManual, ""}).ok());  // wrong count
  EXPECT_FALSE((*storage)
                   ->SetScales(KvScales{std::vector<float>(6, 0.0f), std::vector<float>(6, 1.0f), KvScaleSource::kManual, ""})
                   .ok());
  auto f16 = KvStorage::Create(Spec(DType::kF16), 1);
  ASSERT_TRUE(f16.ok());
  EXPECT_FALSE((*f16)->SetScales(KvScales{std::vector<float>(6, 1.0f), std::vector<float>(6, 1.0f), KvScaleSource::kManual, ""}).ok());
  EXPECT_EQ(KvStorage::Create(Spec(DType::kF16), int64_t{1} << 60).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_FALSE(KvStorage::Create(Spec(DType::kF16), 0).ok());
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

// An MLA latent cache holds one plane (the latent rows), its values are the keys' pages, and
// writes, reads and slot moves work on that plane alone in every dtype.
TEST(KvStorageMlaTest, OnePlaneOfLatentRows) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI8, DType::kFp8E4M3}) {
    const KvCacheSpec spec = KvCacheSpec::MlaLatent(2, 24, 8, dtype, 4);
    auto storage = KvStorage::Create(spec, 3);
    ASSERT_TRUE(storage.ok()) << storage.status().ToString();
    KvStorage& s = **storage;
    EXPECT_FALSE(s.has_v());
    EXPECT_EQ(s.total_bytes(), 3 * spec.bytes_per_block() + spec.fixed_scale_bytes());
    EXPECT_EQ(s.v_pages(1), s.k_pages(1));
    EXPECT_EQ(s.v_token_scales(1), s.k_token_scales(1));
    if (dtype == DType::kFp8E4M3) {
      KvScales scales;
      scales.k = {4.0f / 448.0f, 4.0f / 448.0f};
      scales.v = scales.k;
      scales.source = KvScaleSource::kManual;
      ASSERT_TRUE(s.SetScales(scales).ok());
      EXPECT_EQ(s.v_head_scales(1), s.k_head_scales(1));
    }
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    std::vector<float> rows(5 * 32);
    for (float& x : rows) x = dist(rng);
    const int64_t slots[5] = {0, 3, 5, 7, 11};
    s.Write(1, slots, 5, rows.data(), nullptr);
    const float tolerance = dtype == DType::kF32 ? 0.0f : dtype == DType::kBF16 ? 0.02f : 0.15f;
    std::vector<float> k(32), v(32);
    for (int64_t t = 0; t < 5; ++t) {
      s.ReadSlot(1, slots[t], k.data(), v.data());
      for (int64_t i = 0; i < 32; ++i) {
        EXPECT_NEAR(k[i], rows[t * 32 + i], tolerance) << DTypeName(dtype);
        EXPECT_EQ(v[i], k[i]);
      }
    }
    // Token eviction's compaction moves the latent rows (and int8 scales) exactly.
    std::vector<float> before(32), after(32);
    s.ReadSlot(1, 11, before.data(), nullptr);
    s.MoveHeadSlots(1, {{11}}, {{1}});
    s.ReadSlot(1, 1, after.data(), nullptr);
    EXPECT_EQ(after, before) << DTypeName(dtype);
  }
}

}  // namespace
}  // namespace kvserve

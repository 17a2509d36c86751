// BertModel against a naive double-precision BERT written here from the formulas (the
// embeddings sum, post-LN layers, tanh GELU, bidirectional attention per sequence), on the
// synthetic `bert-tiny` preset; a batch equals its sequences alone; pooling, normalisation and
// the errors.
#include "model/bert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/synthetic.h"
#include "tensor/dtype.h"

namespace kvserve {
namespace {

std::vector<double> Row(const LoadedModel& m, const std::string& name, int64_t row) {
  const Tensor& t = m.tensors.at(name);
  const int64_t cols = t.shape.size() == 1 ? t.shape[0] : t.shape[1];
  std::vector<float> f(static_cast<size_t>(cols));
  DequantizeRow(t.dtype, static_cast<const uint8_t*>(t.data) + row * t.row_bytes(), f.data(), cols);
  return std::vector<double>(f.begin(), f.end());
}

using Matrix = std::vector<std::vector<double>>;

// y = x W^T + b for the named weight [out, in] and bias [out].
Matrix Linear(const LoadedModel& m, const std::string& w, const std::string& b, const Matrix& x) {
  const Tensor& t = m.tensors.at(w);
  const std::vector<double> bias = Row(m, b, 0);
  Matrix y(x.size(), std::vector<double>(static_cast<size_t>(t.shape[0])));
  for (int64_t o = 0; o < t.shape[0]; ++o) {
    const std::vector<double> wr = Row(m, w, o);
    for (size_t r = 0; r < x.size(); ++r) {
      double acc = bias[static_cast<size_t>(o)];
      for (size_t i = 0; i < wr.size(); ++i) acc += wr[i] * x[r][i];
      y[r][static_cast<size_t>(o)] = acc;
    }
  }
  return y;
}

void LayerNormRows(const LoadedModel& m, const std::string& prefix, double eps, Matrix* x) {
  const std::vector<double> w = Row(m, prefix + ".weight", 0), b = Row(m, prefix + ".bias", 0);
  for (auto& row : *x) {
    double mean = 0;
    for (double v : row) mean += v;
    mean /= static_cast<double>(row.size());
    double var = 0;
    for (double v : row) var += (v - mean) * (v - mean);
    var /= static_cast<double>(row.size());
    for (size_t i = 0; i < row.size(); ++i) row[i] = (row[i] - mean) / std::sqrt(var + eps) * w[i] + b[i];
  }
}

// Hidden states of one sequence.
Matrix NaiveEncode(const LoadedModel& m, const std::vector<TokenId>& tokens) {
  const ModelConfig& c = m.config;
  const auto D = static_cast<size_t>(c.hidden_dim), H = static_cast<size_t>(c.num_heads),
             hd = static_cast<size_t>(c.head_dim);
  Matrix x;
  const std::vector<double> type0 = Row(m, "token_types.weight", 0);
  for (size_t p = 0; p < tokens.size(); ++p) {
    std::vector<double> e = Row(m, "token_embd.weight", tokens[p]);
    const std::vector<double> pos = Row(m, "position_embd.weight", static_cast<int64_t>(p));
    for (size_t i = 0; i < D; ++i) e[i] += type0[i] + pos[i];
    x.push_back(e);
  }
  LayerNormRows(m, "token_embd_norm", c.norm_eps, &x);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const Matrix q = Linear(m, p + "attn_q.weight", p + "attn_q.bias", x);
    const Matrix k = Linear(m, p + "attn_k.weight", p + "attn_k.bias", x);
    const Matrix v = Linear(m, p + "attn_v.weight", p + "attn_v.bias", x);
    Matrix a(x.size(), std::vector<double>(D, 0.0));
    for (size_t h = 0; h < H; ++h) {
      for (size_t i = 0; i < x.size(); ++i) {
        std::vector<double> s(x.size());
        double mx = -1e300;
        for (size_t j = 0; j < x.size(); ++j) {
          double dot = 0;
          for (size_t d = 0; d < hd; ++d) dot += q[i][h * hd + d] * k[j][h * hd + d];
          s[j] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (double& sj : s) z += (sj = std::exp(sj - mx));
        for (size_t j = 0; j < x.size(); ++j) {
          for (size_t d = 0; d < hd; ++d) a[i][h * hd + d] += s[j] / z * v[j][h * hd + d];
        }
      }
    }
    Matrix o = Linear(m, p + "attn_output.weight", p + "attn_output.bias", a);
    for (size_t r = 0; r < x.size(); ++r) {
      for (size_t i = 0; i < D; ++i) o[r][i] += x[r][i];
    }
    LayerNormRows(m, p + "attn_output_norm", c.norm_eps, &o);
    x = o;
    Matrix u = Linear(m, p + "ffn_up.weight", p + "ffn_up.bias", x);
    for (auto& row : u) {
      for (double& t : row) t = 0.5 * t * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (t + 0.044715 * t * t * t)));
    }
    Matrix d = Linear(m, p + "ffn_down.weight", p + "ffn_down.bias", u);
    for (size_t r = 0; r < x.size(); ++r) {
      for (size_t i = 0; i < D; ++i) d[r][i] += x[r][i];
    }
    LayerNormRows(m, p + "layer_output_norm", c.norm_eps, &d);
    x = d;
  }
  return x;
}

LoadedModel TinyBert(PoolingType pooling = PoolingType::kMean) {
  SyntheticModelOptions o;
  o.preset = "bert-tiny";
  o.seed = 11;
  auto m = MakeSyntheticModel(o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  m->config.pooling = pooling;
  return std::move(m).value();
}

TEST(BertModelTest, MatchesANaiveBertAndBatchesIndependently) {
  const LoadedModel loaded = TinyBert();
  auto bert = BertModel::Create(loaded);
  ASSERT_TRUE(bert.ok()) << bert.status().ToString();
  ThreadPool pool(2);
  const std::vector<std::vector<TokenId>> seqs = {{2, 40, 41, 42, 3}, {2, 7, 3}, {2, 100, 101, 102, 103, 104, 105, 3}};
  std::vector<TokenId> all;
  std::vector<int64_t> starts = {0};
  for (const auto& s : seqs) {
    all.insert(all.end(), s.begin(), s.end());
    starts.push_back(static_cast<int64_t>(all.size()));
  }
  const int64_t D = (*bert)->dim();
  std::vector<float> hidden(all.size() * static_cast<size_t>(D));
  ASSERT_TRUE((*bert)->Encode(all, starts, &pool, hidden.data()).ok());
  for (size_t s = 0; s < seqs.size(); ++s) {
    const Matrix want = NaiveEncode(loaded, seqs[s]);
    for (size_t r = 0; r < seqs[s].size(); ++r) {
      for (int64_t i = 0; i < D; ++i) {
        const double w = want[r][static_cast<size_t>(i)];
        ASSERT_NEAR(hidden[(static_cast<size_t>(starts[s]) + r) * D + i], w, 1e-4 + 1e-4 * std::fabs(w))
            << "sequence " << s << " row " << r << " dim " << i;
      }
    }
    // Alone: the same rows (sequences of a batch never see each other).
    std::vector<float> alone(seqs[s].size() * static_cast<size_t>(D));
    const std::vector<int64_t> one = {0, static_cast<int64_t>(seqs[s].size())};
    ASSERT_TRUE((*bert)->Encode(seqs[s], one, &pool, alone.data()).ok());
    for (size_t i = 0; i < alone.size(); ++i) {
      ASSERT_NEAR(alone[i], hidden[static_cast<size_t>(starts[s]) * D + i], 1e-5f);
    }
  }
  // Bidirectional: the last token changes the first row.
  std::vector<TokenId> changed = seqs[0];
  changed[3] = 77;
  std::vector<float> a(changed.size() * D), b(changed.size() * D);
  const std::vector<int64_t> one = {0, static_cast<int64_t>(changed.size())};
  ASSERT_TRUE((*bert)->Encode(seqs[0], one, &pool, a.data()).ok());
  ASSERT_TRUE((*bert)->Encode(changed, one, &pool, b.data()).ok());
  EXPECT_NE(a[0], b[0]);
}

TEST(BertModelTest, PoolingAndNormalisation) {
  ThreadPool pool(1);
  const std::vector<TokenId> seq = {2, 10, 11, 12, 3};
  const std::vector<int64_t> one = {0, 5};
  for (PoolingType p : {PoolingType::kMean, PoolingType::kCls, PoolingType::kLast}) {
    for (bool normalize : {false, true}) {
      auto bert = BertModel::Create(TinyBert(p), BertModel::Options{std::nullopt, normalize});
      ASSERT_TRUE(bert.ok());
      const int64_t D = (*bert)->dim();
      std::vector<float> hidden(5 * D), e(D);
      ASSERT_TRUE((*bert)->Encode(seq, one, &pool, hidden.data()).ok());
      ASSERT_TRUE((*bert)->Embed(seq, one, &pool, e.data()).ok());
      std::vector<double> want(static_cast<size_t>(D), 0.0);
      for (int64_t i = 0; i < D; ++i) {
        if (p == PoolingType::kMean) {
          for (int r = 0; r < 5; ++r) want[i] += hidden[r * D + i] / 5.0;
        } else {
          want[i] = hidden[(p == PoolingType::kCls ? 0 : 4) * D + i];
        }
      }
      double norm = 0;
      for (double w : want) norm += w * w;
      norm = std::sqrt(norm);
      for (int64_t i = 0; i < D; ++i) {
        EXPECT_NEAR(e[i], normalize ? want[i] / norm : want[i], 1e-5);
      }
    }
  }
}

TEST(BertModelTest, Errors) {
  ThreadPool pool(1);
  auto bert = BertModel::Create(TinyBert());
  ASSERT_TRUE(bert.ok());
  std::vector<float> out(4096);
  const std::vector<TokenId> ok = {2, 3};
  EXPECT_FALSE((*bert)->Embed(ok, std::vector<int64_t>{0, 1}, &pool, out.data()).ok());  // bad starts
  EXPECT_FALSE((*bert)->Embed(ok, std::vector<int64_t>{0, 0, 2}, &pool, out.data()).ok());  // empty
  const std::vector<TokenId> bad = {2, 100000};
  EXPECT_FALSE((*bert)->Embed(bad, std::vector<int64_t>{0, 2}, &pool, out.data()).ok());
  const std::vector<TokenId> longer((*bert)->max_tokens() + 1, 5);
  EXPECT_FALSE((*bert)->Embed(longer, std::vector<int64_t>{0, static_cast<int64_t>(longer.size())},
                              &pool, out.data()).ok());
  LoadedModel causal = TinyBert();
  causal.config.causal = true;
  EXPECT_FALSE(BertModel::Create(std::move(causal)).ok());
  EXPECT_FALSE(BertModel::Create(TinyBert(PoolingType::kNone)).ok());
  SyntheticModelOptions llama;
  llama.preset = "tiny";
  EXPECT_FALSE(BertModel::Create(std::move(MakeSyntheticModel(llama)).value()).ok());
}

}  // namespace
}  // namespace kvserve

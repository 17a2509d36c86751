#include "tensor/quantize.h"

#include <cmath>
#include <cstring>

#include "tensor/dtype.h"

namespace kvserve {
namespace {

// Round to nearest (ties to even) for |v| < 2^22 by adding 1.5 * 2^23 and reading the mantissa;
// any other input (huge, inf, NaN) gives some int in [-2^22, 2^22) without undefined behaviour
// (a float-to-int cast would not). Callers clamp.
inline int NearestInt(float v) {
  const float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}
inline int Clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
inline int RoundClamp(float v, int lo, int hi) { return Clamp(NearestInt(v), lo, hi); }

// The fp16 bits of f, rounded away from zero where round-to-nearest would shrink |f|: a
// super-block scale d = largest sub-block scale / largest code then never forces that code past
// its limit (which matters where d is an fp16 subnormal, 2^-24 apart).
uint16_t Fp16AtLeast(float f) {
  uint16_t h = Fp32ToFp16(f);
  if (std::fabs(Fp16ToFp32(h)) < std::fabs(f) && (h & 0x7fff) < 0x7bff) ++h;
  return h;
}

// Clamps to [lo, hi] (NaN gives lo) and rounds to the nearest integer, ties to even, all in
// float (exact for |v| < 2^22, which the clamp ensures): no int conversion in the hot loops.
inline float RoundClampF(float v, float lo, float hi) {
  v = v > lo ? v : lo;
  v = v < hi ? v : hi;
  return (v + 12582912.0f) - 12582912.0f;
}

// The inner loops below run over blocks of 16 or 32 values in 4 independent lanes, so that the
// float sums are 4 short dependency chains (and the compiler may use SIMD) without reordering
// any one lane's additions.
constexpr int kLanes = 4;
inline float SumLanes(const float a[kLanes]) { return (a[0] + a[1]) + (a[2] + a[3]); }

// ---- Fitting one block or sub-block ----------------------------------------------------------

// Fits x[i] ~= scale * q[i] with integers q in [-nmax, nmax - 1], minimising
// sum w[i] (x[i] - scale q[i])^2. Candidates: iscale = -(nmax + 0.1 k) / xmax for |k| <=
// num_steps, xmax being the value of largest magnitude (so it maps to about -nmax, the side
// with one more level); each rounding gets its least-squares scale, and the best is kept.
// Writes q + nmax to L; returns the scale (0, with all q = 0, when every |x| is tiny).
float FitSymmetric(int n, int nmax, const float* x, const float* w, int num_steps, uint8_t* L) {
  float amax = 0.0f, xmax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) {
      amax = a;
      xmax = x[i];
    }
  }
  if (!(amax >= 1e-30f)) {
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nmax);
    return 0.0f;
  }
  const float qlo = static_cast<float>(-nmax), qhi = static_cast<float>(nmax - 1);
  float best_iscale = -static_cast<float>(nmax) / xmax;
  float best_scale = 1.0f / best_iscale;
  float best = -1.0f;  // sumlx^2 / suml2: the error reduction of the fit
  for (int k = -num_steps; k <= num_steps; ++k) {
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / xmax;
    float lx[kLanes] = {}, ll[kLanes] = {};
    for (int i = 0; i < n; i += kLanes) {
      for (int k2 = 0; k2 < kLanes; ++k2) {
        const float q = RoundClampF(iscale * x[i + k2], qlo, qhi);
        const float wq = w[i + k2] * q;
        lx[k2] += wq * x[i + k2];
        ll[k2] += wq * q;
      }
    }
    const float slx = SumLanes(lx), sll = SumLanes(ll);
    if (sll > 0.0f && slx * slx > best * sll) {
      best = slx * slx / sll;
      best_iscale = iscale;
      best_scale = slx / sll;
    }
  }
  float q[kQKK / 8];  // n <= 32
  float slx = 0.0f, sll = 0.0f;
  for (int i = 0; i < n; ++i) {
    q[i] = RoundClampF(best_iscale * x[i], qlo, qhi);
    slx += w[i] * x[i] * q[i];
    sll += w[i] * q[i] * q[i];
  }
  if (sll > 0.0f && std::isfinite(slx / sll)) best_scale = slx / sll;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(static_cast<int>(q[i]) + nmax);
  return best_scale;
}

// Weighted sums of one block for least squares x ~= scale * q + offset.
struct AsymSums {
  float sw = 0, sx = 0, sxx = 0;  // fixed by the data
  float sl = 0, sll = 0, sxl = 0;  // depend on the rounding
  float Error(float scale, float offset) const {
    return sxx - 2 * scale * sxl - 2 * offset * sx + scale * scale * sll +
           2 * scale * offset * sl + offset * offset * sw;
  }
  // Least-squares (scale, offset); false when the q do not determine both.
  bool Solve(bool offset_nonpositive, float* scale, float* offset) const {
    const float det = sw * sll - sl * sl;
    if (!(det > 0.0f)) return false;
    *scale = (sw * sxl - sx * sl) / det;
    *offset = (sll * sx - sl * sxl) / det;
    if (offset_nonpositive && *offset > 0.0f) {
      *offset = 0.0f;
      *scale = sxl / sll;
    }
    return true;
  }
};

// Fits x[i] ~= scale * q[i] + offset with integers q in [0, nmax] (offset <= 0 when
// `offset_nonpositive`, as the k-quants store a subtracted min), minimising
// sum w (x - scale q - offset)^2. Candidates: the plain min/max mapping, and the roundings
// iscale = (nmax + rmin + rdelta k) / (max - min), k = 0..num_steps, each with its weighted
// least-squares (scale, offset). Writes q to L; returns the scale and sets *offset.
float FitAsymmetric(int n, int nmax, const float* x, const float* w, float rmin, float rdelta,
                    int num_steps, bool offset_nonpositive, uint8_t* L, float* offset) {
  AsymSums s;
  float lo = x[0], hi = x[0];
  for (int i = 0; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    s.sw += w[i];
    s.sx += w[i] * x[i];
    s.sxx += w[i] * x[i] * x[i];
  }
  if (offset_nonpositive && lo > 0.0f) lo = 0.0f;
  if (!(hi > lo) || !std::isfinite(hi - lo)) {  // constant (or unusable) block
    for (int i = 0; i < n; ++i) L[i] = 0;
    *offset = std::isfinite(lo) ? lo : 0.0f;
    return 0.0f;
  }
  const float range = hi - lo;
  const float qhi = static_cast<float>(nmax);
  float best_iscale = qhi / range;
  float best_scale = range / qhi;
  float best_offset = lo;
  float best_err = 0.0f;
  {
    float e[kLanes] = {};
    for (int i = 0; i < n; i += kLanes) {
      for (int k2 = 0; k2 < kLanes; ++k2) {
        const float q = RoundClampF(best_iscale * (x[i + k2] - lo), 0.0f, qhi);
        const float diff = best_scale * q + lo - x[i + k2];
        e[k2] += w[i + k2] * diff * diff;
      }
    }
    best_err = SumLanes(e);
  }
  for (int k = 0; k <= num_steps; ++k) {
    const float iscale = (qhi + rmin + rdelta * static_cast<float>(k)) / range;
    float l1[kLanes] = {}, l2[kLanes] = {}, xl[kLanes] = {};
    for (int i = 0; i < n; i += kLanes) {
      for (int k2 = 0; k2 < kLanes; ++k2) {
        const float q = RoundClampF(iscale * (x[i + k2] - lo), 0.0f, qhi);
        const float wq = w[i + k2] * q;
        l1[k2] += wq;
        l2[k2] += wq * q;
        xl[k2] += wq * x[i + k2];
      }
    }
    s.sl = SumLanes(l1);
    s.sll = SumLanes(l2);
    s.sxl = SumLanes(xl);
    float scale, off;
    if (!s.Solve(offset_nonpositive, &scale, &off)) continue;
    const float err = s.Error(scale, off);
    if (err < best_err) {
      best_err = err;
      best_iscale = iscale;
      best_scale = scale;
      best_offset = off;
    }
  }
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(RoundClampF(best_iscale * (x[i] - lo), 0.0f, qhi));
  }
  *offset = best_offset;
  return best_scale;
}

// Rounds x to q in [qmin, qmax] for w = scale * q + offset (q = 0 when scale is 0 or unusable)
// and returns the weighted squared error.
float RoundAll(int n, const float* x, const float* w, float scale, float offset, int qmin,
               int qmax, int q_bias, uint8_t* L) {
  const bool usable = scale != 0.0f && std::isfinite(1.0f / scale);
  const float inv = usable ? 1.0f / scale : 0.0f;
  const float lo = static_cast<float>(qmin), hi = static_cast<float>(qmax);
  const float bias = static_cast<float>(q_bias);
  float e[kLanes] = {};
  for (int i = 0; i < n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float q = RoundClampF((x[i + k] - offset) * inv, lo, hi);  // 0 (clamped) if unusable
      L[i + k] = static_cast<uint8_t>(q + bias);
      const float diff = scale * q + offset - x[i + k];
      e[k] += w[i + k] * diff * diff;
    }
  }
  return SumLanes(e);
}

// ---- Legacy 32-value blocks ------------------------------------------------------------------

struct Ones {
  float w[kQKK];
  Ones() {
    for (float& v : w) v = 1.0f;
  }
};
const float* OnesWeights() {
  static const Ones ones;
  return ones.w;
}

// Symmetric legacy block (Q4_0: nmax 8, Q5_0: nmax 16): the best fit, its fp16 scale, and one
// least-squares refit of that scale against the final rounding. Writes q + nmax to L.
uint16_t QuantizeLegacySymmetric(const float* x, int nmax, uint8_t* L) {
  const float* ones = OnesWeights();
  const float scale = FitSymmetric(kQK, nmax, x, ones, 9, L);
  uint16_t d = Fp32ToFp16(scale);
  float err = RoundAll(kQK, x, ones, Fp16ToFp32(d), 0.0f, -nmax, nmax - 1, nmax, L);
  float slx = 0.0f, sll = 0.0f;
  for (int i = 0; i < kQK; ++i) {
    const float q = static_cast<float>(L[i] - nmax);
    slx += x[i] * q;
    sll += q * q;
  }
  if (sll > 0.0f) {
    const uint16_t d2 = Fp32ToFp16(slx / sll);
    uint8_t L2[kQK];
    const float err2 = RoundAll(kQK, x, ones, Fp16ToFp32(d2), 0.0f, -nmax, nmax - 1, nmax, L2);
    if (err2 < err) {
      d = d2;
      std::memcpy(L, L2, kQK);
    }
  }
  return d;
}

// Asymmetric legacy block (Q4_1: nmax 15, Q5_1: nmax 31), as above with a free fp16 min.
void QuantizeLegacyAsymmetric(const float* x, int nmax, float rmin, int num_steps, uint16_t* d,
                              uint16_t* m, uint8_t* L) {
  const float* ones = OnesWeights();
  float offset;
  const float scale = FitAsymmetric(kQK, nmax, x, ones, rmin, 0.1f, num_steps,
                                    /*offset_nonpositive=*/false, L, &offset);
  *d = Fp32ToFp16(scale);
  *m = Fp32ToFp16(offset);
  float err = RoundAll(kQK, x, ones, Fp16ToFp32(*d), Fp16ToFp32(*m), 0, nmax, 0, L);
  AsymSums s;
  for (int i = 0; i < kQK; ++i) {
    const float q = static_cast<float>(L[i]);
    s.sw += 1.0f;
    s.sx += x[i];
    s.sl += q;
    s.sll += q * q;
    s.sxl += x[i] * q;
  }
  float scale2, offset2;
  if (s.Solve(false, &scale2, &offset2)) {
    const uint16_t d2 = Fp32ToFp16(scale2), m2 = Fp32ToFp16(offset2);
    uint8_t L2[kQK];
    const float err2 = RoundAll(kQK, x, ones, Fp16ToFp32(d2), Fp16ToFp32(m2), 0, nmax, 0, L2);
    if (err2 < err) {
      *d = d2;
      *m = m2;
      std::memcpy(L, L2, kQK);
    }
  }
}

void PackQh(const uint8_t* L, uint8_t qh_bytes[4]) {
  uint32_t qh = 0;
  for (int j = 0; j < kQK; ++j) qh |= static_cast<uint32_t>((L[j] >> 4) & 1) << j;
  std::memcpy(qh_bytes, &qh, 4);
}
void PackNibbles32(const uint8_t* L, uint8_t qs[kQK / 2]) {
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = static_cast<uint8_t>((L[j] & 0x0f) | ((L[j + kQK / 2] & 0x0f) << 4));
  }
}

// ---- k-quant super-blocks --------------------------------------------------------------------

// The k-quants' error weights: rms of the super-block + |x| (larger values count more, small
// ones still count).
void MakeWeights(const float* x, float* w) {
  float sum_x2 = 0.0f;
  for (int i = 0; i < kQKK; ++i) sum_x2 += x[i] * x[i];
  const float rms = std::sqrt(sum_x2 / kQKK);
  for (int i = 0; i < kQKK; ++i) w[i] = rms + std::fabs(x[i]);
}

// One asymmetric k-quant super-block (Q2_K, Q4_K, Q5_K): w = d * sc * q - dmin * mn.
struct AsymKParams {
  int sub_len;    // values per sub-block (16 or 32)
  int nmax;       // largest q (3, 15, 31)
  int code_max;   // largest sc / mn (15 or 63)
  float rmin;     // candidate search of FitAsymmetric
  int num_steps;
};

struct AsymKResult {
  uint16_t d, dmin;
  uint8_t sc[16], mn[16];
  uint8_t L[kQKK];
};

// With the integer codes fixed, refits d and dmin over the whole super-block by weighted least
// squares (x ~= d * sc q - dmin * mn) and keeps them if the re-rounded block is better.
void RefitSuperScales(const float* x, const float* w, const AsymKParams& p, float total_err,
                      AsymKResult* r) {
  const int num_sub = kQKK / p.sub_len;
  const float dmin = Fp16ToFp32(r->dmin);
  float aa = 0, ab = 0, bb = 0, xa = 0, xb = 0;
  for (int i = 0; i < kQKK; ++i) {
    const int j = i / p.sub_len;
    const float a = static_cast<float>(r->sc[j]) * static_cast<float>(r->L[i]);
    const float b = -static_cast<float>(r->mn[j]);
    aa += w[i] * a * a;
    ab += w[i] * a * b;
    bb += w[i] * b * b;
    xa += w[i] * x[i] * a;
    xb += w[i] * x[i] * b;
  }
  const float det = aa * bb - ab * ab;
  float d2, dmin2;
  if (det > 0.0f) {
    d2 = (xa * bb - xb * ab) / det;
    dmin2 = (aa * xb - ab * xa) / det;
  } else if (aa > 0.0f && bb == 0.0f) {
    d2 = xa / aa;
    dmin2 = dmin;
  } else {
    return;
  }
  if (!(d2 >= 0.0f && dmin2 >= 0.0f)) return;
  const uint16_t hd = Fp32ToFp16(d2), hdmin = Fp32ToFp16(dmin2);
  const float dq = Fp16ToFp32(hd), dminq = Fp16ToFp32(hdmin);
  uint8_t L2[kQKK];
  float err2 = 0.0f;
  for (int j = 0; j < num_sub; ++j) {
    const int o = j * p.sub_len;
    err2 += RoundAll(p.sub_len, x + o, w + o, dq * static_cast<float>(r->sc[j]),
                     -dminq * static_cast<float>(r->mn[j]), 0, p.nmax, 0, L2 + o);
  }
  if (!(err2 < total_err)) return;
  r->d = hd;
  r->dmin = hdmin;
  std::memcpy(r->L, L2, kQKK);
}

void QuantizeAsymK(const float* x, const AsymKParams& p, AsymKResult* r) {
  float w[kQKK];
  MakeWeights(x, w);
  const int num_sub = kQKK / p.sub_len;
  float scales[16], mins[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < num_sub; ++j) {
    const int o = j * p.sub_len;
    float offset;
    scales[j] = FitAsymmetric(p.sub_len, p.nmax, x + o, w + o, p.rmin, 0.1f, p.num_steps,
                              /*offset_nonpositive=*/true, r->L + o, &offset);
    mins[j] = -offset;
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float code_max = static_cast<float>(p.code_max);
  r->d = Fp16AtLeast(max_scale / code_max);
  r->dmin = Fp16AtLeast(max_min / code_max);
  const float d = Fp16ToFp32(r->d), dmin = Fp16ToFp32(r->dmin);
  const float inv_d = d > 0.0f ? 1.0f / d : 0.0f;
  const float inv_dmin = dmin > 0.0f ? 1.0f / dmin : 0.0f;
  float total_err = 0.0f;
  for (int j = 0; j < num_sub; ++j) {
    const int o = j * p.sub_len;
    const float* xs = x + o;
    const float* ws = w + o;
    uint8_t* Ls = r->L + o;
    int sc = RoundClamp(scales[j] * inv_d, 0, p.code_max);
    int mn = RoundClamp(mins[j] * inv_dmin, 0, p.code_max);
    float err = RoundAll(p.sub_len, xs, ws, d * static_cast<float>(sc),
                         -dmin * static_cast<float>(mn), 0, p.nmax, 0, Ls);
    // Refit the integer scale and min against the stored d, dmin for the rounding just made.
    for (int iter = 0; iter < 2; ++iter) {
      AsymSums s;
      for (int i = 0; i < p.sub_len; ++i) {
        const float q = static_cast<float>(Ls[i]);
        s.sw += ws[i];
        s.sx += ws[i] * xs[i];
        s.sl += ws[i] * q;
        s.sll += ws[i] * q * q;
        s.sxl += ws[i] * xs[i] * q;
      }
      float scale, offset;
      if (!s.Solve(/*offset_nonpositive=*/true, &scale, &offset)) break;
      const int sc2 = RoundClamp(scale * inv_d, 0, p.code_max);
      const int mn2 = RoundClamp(-offset * inv_dmin, 0, p.code_max);
      if (sc2 == sc && mn2 == mn) break;
      uint8_t L2[32];
      const float err2 = RoundAll(p.sub_len, xs, ws, d * static_cast<float>(sc2),
                                  -dmin * static_cast<float>(mn2), 0, p.nmax, 0, L2);
      if (!(err2 < err)) break;
      err = err2;
      sc = sc2;
      mn = mn2;
      std::memcpy(Ls, L2, p.sub_len);
    }
    r->sc[j] = static_cast<uint8_t>(sc);
    r->mn[j] = static_cast<uint8_t>(mn);
    total_err += err;
  }
  RefitSuperScales(x, w, p, total_err, r);
}

// One symmetric k-quant super-block of 16 sub-blocks of 16 (Q3_K: q in [-4, 3], scale codes in
// [-32, 31]; Q6_K: q in [-32, 31], codes in [-128, 127]): w = d * sc * q. L gets q + nmax.
struct SymKResult {
  uint16_t d;
  int sc[16];
  uint8_t L[kQKK];
};

void QuantizeSymK(const float* x, int nmax, int code_neg, SymKResult* r) {
  constexpr int kSub = 16;
  float w[kQKK];
  MakeWeights(x, w);
  float scales[16];
  float amax = 0.0f, max_scale = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = FitSymmetric(kSub, nmax, x + kSub * j, w + kSub * j, 9, r->L + kSub * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  // The scale of largest magnitude maps to code -code_neg (the side with one more level).
  r->d = Fp16AtLeast(amax > 0.0f ? -max_scale / static_cast<float>(code_neg) : 0.0f);
  const float d = Fp16ToFp32(r->d);
  const bool usable = d != 0.0f && std::isfinite(1.0f / d);
  const float inv_d = usable ? 1.0f / d : 0.0f;
  for (int j = 0; j < 16; ++j) {
    const float* xs = x + kSub * j;
    const float* ws = w + kSub * j;
    uint8_t* Ls = r->L + kSub * j;
    int sc = RoundClamp(scales[j] * inv_d, -code_neg, code_neg - 1);
    float err = RoundAll(kSub, xs, ws, d * static_cast<float>(sc), 0.0f, -nmax, nmax - 1, nmax,
                         Ls);
    for (int iter = 0; iter < 2; ++iter) {
      float slx = 0.0f, sll = 0.0f;
      for (int i = 0; i < kSub; ++i) {
        const float q = static_cast<float>(Ls[i] - nmax);
        slx += ws[i] * xs[i] * q;
        sll += ws[i] * q * q;
      }
      if (!(sll > 0.0f)) break;
      const int sc2 = RoundClamp(slx / sll * inv_d, -code_neg, code_neg - 1);
      if (sc2 == sc) break;
      uint8_t L2[kSub];
      const float err2 = RoundAll(kSub, xs, ws, d * static_cast<float>(sc2), 0.0f, -nmax,
                                  nmax - 1, nmax, L2);
      if (!(err2 < err)) break;
      err = err2;
      sc = sc2;
      std::memcpy(Ls, L2, kSub);
    }
    r->sc[j] = sc;
  }
}

// The 2-bit fields of Q2_K / Q3_K: value 128 h + 32 s + l in bits 2s of qs[32 h + l].
void Pack2Bit(const uint8_t* L, uint8_t qs[kQKK / 4]) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* v = L + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>((v[0] & 3) | ((v[32] & 3) << 2) |
                                            ((v[64] & 3) << 4) | ((v[96] & 3) << 6));
    }
  }
}

// Q4_K / Q5_K nibbles: value 64 p + l low nibble of qs[32 p + l], value 64 p + 32 + l high.
void PackNibblesK(const uint8_t* L, uint8_t qs[kQKK / 2]) {
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      qs[32 * p + l] =
          static_cast<uint8_t>((L[64 * p + l] & 0x0f) | ((L[64 * p + 32 + l] & 0x0f) << 4));
    }
  }
}

}  // namespace

void PackScalesQ3K(const uint8_t scales[16], uint8_t packed[kKScaleBytes]) {
  std::memset(packed, 0, kKScaleBytes);
  for (int i = 0; i < 16; ++i) {
    const uint8_t low = scales[i] & 0x0f, high = (scales[i] >> 4) & 3;
    if (i < 8) {
      packed[i] |= low;
    } else {
      packed[i - 8] |= static_cast<uint8_t>(low << 4);
    }
    packed[8 + i % 4] |= static_cast<uint8_t>(high << (2 * (i / 4)));
  }
}

void PackScaleMinK4(const uint8_t scales[8], const uint8_t mins[8],
                    uint8_t packed[kKScaleBytes]) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>((scales[j] & 63) | ((scales[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>((mins[j] & 63) | ((mins[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((mins[j + 4] & 0x0f) << 4));
  }
}

void QuantizeQ4_0(const float* x, BlockQ4_0* y, int64_t num_blocks) {
  uint8_t L[kQK];
  for (int64_t b = 0; b < num_blocks; ++b, x += kQK) {
    y[b].d = QuantizeLegacySymmetric(x, 8, L);
    PackNibbles32(L, y[b].qs);
  }
}

void QuantizeQ5_0(const float* x, BlockQ5_0* y, int64_t num_blocks) {
  uint8_t L[kQK];
  for (int64_t b = 0; b < num_blocks; ++b, x += kQK) {
    y[b].d = QuantizeLegacySymmetric(x, 16, L);
    PackNibbles32(L, y[b].qs);
    PackQh(L, y[b].qh);
  }
}

void QuantizeQ4_1(const float* x, BlockQ4_1* y, int64_t num_blocks) {
  uint8_t L[kQK];
  for (int64_t b = 0; b < num_blocks; ++b, x += kQK) {
    QuantizeLegacyAsymmetric(x, 15, -1.0f, 20, &y[b].d, &y[b].m, L);
    PackNibbles32(L, y[b].qs);
  }
}

void QuantizeQ5_1(const float* x, BlockQ5_1* y, int64_t num_blocks) {
  uint8_t L[kQK];
  for (int64_t b = 0; b < num_blocks; ++b, x += kQK) {
    QuantizeLegacyAsymmetric(x, 31, -0.5f, 15, &y[b].d, &y[b].m, L);
    PackNibbles32(L, y[b].qs);
    PackQh(L, y[b].qh);
  }
}

void QuantizeQ2_K(const float* x, BlockQ2_K* y, int64_t num_blocks) {
  constexpr AsymKParams kParams{16, 3, 15, -0.5f, 15};
  AsymKResult r;
  for (int64_t b = 0; b < num_blocks; ++b, x += kQKK) {
    QuantizeAsymK(x, kParams, &r);
    y[b].d = r.d;
    y[b].dmin = r.dmin;
    for (int j = 0; j < 16; ++j) y[b].scales[j] = static_cast<uint8_t>(r.sc[j] | (r.mn[j] << 4));
    Pack2Bit(r.L, y[b].qs);
  }
}

void QuantizeQ4_K(const float* x, BlockQ4_K* y, int64_t num_blocks) {
  constexpr AsymKParams kParams{32, 15, 63, -1.0f, 20};
  AsymKResult r;
  for (int64_t b = 0; b < num_blocks; ++b, x += kQKK) {
    QuantizeAsymK(x, kParams, &r);
    y[b].d = r.d;
    y[b].dmin = r.dmin;
    PackScaleMinK4(r.sc, r.mn, y[b].scales);
    PackNibblesK(r.L, y[b].qs);
  }
}

void QuantizeQ5_K(const float* x, BlockQ5_K* y, int64_t num_blocks) {
  constexpr AsymKParams kParams{32, 31, 63, -0.5f, 15};
  AsymKResult r;
  for (int64_t b = 0; b < num_blocks; ++b, x += kQKK) {
    QuantizeAsymK(x, kParams, &r);
    y[b].d = r.d;
    y[b].dmin = r.dmin;
    PackScaleMinK4(r.sc, r.mn, y[b].scales);
    PackNibblesK(r.L, y[b].qs);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int v = 0; v < kQKK; ++v) {
      y[b].qh[v % 32] |= static_cast<uint8_t>(((r.L[v] >> 4) & 1) << (v / 32));
    }
  }
}

void QuantizeQ3_K(const float* x, BlockQ3_K* y, int64_t num_blocks) {
  SymKResult r;
  for (int64_t b = 0; b < num_blocks; ++b, x += kQKK) {
    QuantizeSymK(x, /*nmax=*/4, /*code_neg=*/32, &r);
    y[b].d = r.d;
    uint8_t codes[16];
    for (int j = 0; j < 16; ++j) codes[j] = static_cast<uint8_t>(r.sc[j] + 32);
    PackScalesQ3K(codes, y[b].scales);
    Pack2Bit(r.L, y[b].qs);
    std::memset(y[b].hmask, 0, sizeof(y[b].hmask));
    for (int v = 0; v < kQKK; ++v) {
      y[b].hmask[v % 32] |= static_cast<uint8_t>(((r.L[v] >> 2) & 1) << (v / 32));
    }
  }
}

void QuantizeQ6_K(const float* x, BlockQ6_K* y, int64_t num_blocks) {
  SymKResult r;
  for (int64_t b = 0; b < num_blocks; ++b, x += kQKK) {
    QuantizeSymK(x, /*nmax=*/32, /*code_neg=*/128, &r);
    y[b].d = r.d;
    for (int j = 0; j < 16; ++j) y[b].scales[j] = static_cast<int8_t>(r.sc[j]);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* L = r.L + 128 * h;
      uint8_t* ql = y[b].ql + 64 * h;
      uint8_t* qh = y[b].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((L[l] & 0x0f) | ((L[64 + l] & 0x0f) << 4));
        ql[32 + l] = static_cast<uint8_t>((L[32 + l] & 0x0f) | ((L[96 + l] & 0x0f) << 4));
        qh[l] = static_cast<uint8_t>(((L[l] >> 4) & 3) | (((L[32 + l] >> 4) & 3) << 2) |
                                     (((L[64 + l] >> 4) & 3) << 4) |
                                     (((L[96 + l] >> 4) & 3) << 6));
      }
    }
  }
}

}  // namespace kvserve

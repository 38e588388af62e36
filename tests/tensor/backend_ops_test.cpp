// The op tests of the tensor backends (after ggml's test-backend-ops): every
// kernel of src/tensor, forward and backward, on every backend this process
// has -- the CPU context always, a CUDA context when Gpu::count() > 0 (the
// cuda instances skip otherwise) -- against a scalar reference written here
// in double precision from the same float inputs. Each case is written once
// for all backends (struct Backend moves the data). Shapes come from a
// fixed-seed generator and include odd sizes and counts that do not divide
// the CPU's grains, the GPU's blocks or the SIMD lanes; every case gets fresh
// random inputs. Outputs that an op overwrites are poisoned with NaN first (an
// element left unwritten fails); outputs it accumulates into start random
// (a kernel that overwrites fails).
//
// The bounds. u = 2^-24 (float's unit roundoff) and gamma(n) = n·u / (1 − n·u):
// a sum or dot product of n terms, rounded in any order, with or without FMA,
// is within gamma(n) of the magnitude sum Σ|terms| (Higham, Accuracy and
// Stability, 3.1). The backend's reduction order is unknown, so every bound is
// of that form, with the magnitude sums computed next to the reference value.
// Transcendentals (simd's exp: 1e-7 relative; CUDA's expf, tanhf, logf: 2 ulp)
// count kTranscendental of their result, plus the rounding of their argument
// carried through (exp(x(1 + δ)) is off by |x|·δ relative). Each derivation
// sits next to its reference. A first-order bound is doubled (kSlack) for the
// second-order terms it leaves out, and kTiny absorbs subnormal noise;
// exact results (a copy, a max, a zero) get bound 0. The checker is shown to
// reject broken results in BackendChecks.* (on the CPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "tensor/adamw.h"
#include "tensor/attention.h"
#include "tensor/buffer.h"
#include "tensor/context.h"
#include "tensor/cross_entropy.h"
#include "tensor/fill.h"
#include "tensor/gelu.h"
#include "tensor/gpu.h"
#include "tensor/layernorm.h"
#include "tensor/matmul.h"
#include "tensor/residual.h"
#include "tensor/rmsnorm.h"
#include "tensor/rope.h"
#include "tensor/swiglu.h"

namespace ntp::tensor {
namespace {

// ---- The rounding model ------------------------------------------------------

constexpr double kUnit = 0x1p-24;
double gamma(std::int64_t n) {
  const double nu = static_cast<double>(n) * kUnit;
  return nu / (1.0 - nu);
}
// One evaluation of exp, tanh or log, relative to its result.
constexpr double kTranscendental = 4.0 * kUnit;
constexpr double kSlack = 2.0;
constexpr double kTiny = 0x1p-126;  // FLT_MIN
const float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kLayerNormEps = static_cast<double>(1e-5f);  // tensor/layernorm.cpp

// ---- Shapes and inputs -------------------------------------------------------

// Sizes of a dimension: 1, odd, one SIMD lane block and one past it.
constexpr std::int64_t kDims[] = {1, 3, 17, 64, 65};
// Row counts: one, odd, one past the CPU's 16-row and 32-row blocks.
constexpr std::int64_t kRows[] = {1, 5, 33};

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : gen_(seed) {}
  std::vector<float> normal(std::int64_t n, double spread = 1.0, double mean = 0.0) {
    std::normal_distribution<double> d(mean, spread);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = static_cast<float>(d(gen_));
    return v;
  }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen_); }
  std::int64_t below(std::int64_t n) { return std::uniform_int_distribution<std::int64_t>(0, n - 1)(gen_); }
  template <typename T, std::size_t N>
  T pick(const T (&from)[N]) {
    return from[below(static_cast<std::int64_t>(N))];
  }

 private:
  std::mt19937_64 gen_;
};

// Rows of x = offset + scale·N(0, 1), the scale per row 0.003, 1 or 4: the
// small rows have a variance near the norms' eps, so a wrong eps shows.
std::vector<float> norm_rows(Rng& rng, std::int64_t n, std::int64_t dim) {
  std::vector<float> x;
  for (std::int64_t i = 0; i < n; ++i) {
    const double scale = rng.pick({0.003, 1.0, 4.0});
    const std::vector<float> row = rng.normal(dim, scale, scale * rng.uniform(-2.0, 2.0));
    x.insert(x.end(), row.begin(), row.end());
  }
  return x;
}

std::vector<float> nans(std::int64_t n) { return std::vector<float>(static_cast<std::size_t>(n), kNaN); }

// "m 5, k_out 17, ...": the shape part of a failure's text.
class Text {
 public:
  template <typename T>
  Text& operator()(std::string_view key, const T& v) {
    if (!first_) out_ << ", ";
    first_ = false;
    out_ << key << ' ' << v;
    return *this;
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
  bool first_ = true;
};

// ---- The checker -------------------------------------------------------------

// The reference of one output: each element's value (NaN until the reference
// sets it, so an element the reference forgot fails too) and how far a
// backend's result may be from it.
struct Want {
  explicit Want(std::size_t n = 0) : value(n, std::numeric_limits<double>::quiet_NaN()), bound(n, 0.0) {}
  // `first_order`: the derived bound, before kSlack and kTiny.
  void set(std::size_t i, double v, double first_order) {
    value[i] = v;
    bound[i] = kSlack * first_order + kTiny;
  }
  void exact(std::size_t i, double v) {
    value[i] = v;
    bound[i] = 0.0;
  }
  std::vector<double> value, bound;
};

struct Where {
  std::string op, backend, shape;
};

// "" when every element of `got` is within its bound of the reference (NaN
// never is); otherwise the first element outside, named with op, backend,
// shape, output and index (row and column when `cols` is given), and how many
// elements are outside.
std::string check(const Where& where, std::string_view output, const std::vector<float>& got, const Want& want,
                  std::int64_t cols = 0) {
  const std::string head = where.op + " on " + where.backend + " (" + where.shape + "): " + std::string(output);
  if (got.size() != want.value.size())
    return head + " has " + std::to_string(got.size()) + " elements, want " + std::to_string(want.value.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(static_cast<double>(got[i]) - want.value[i]);
    if (diff <= want.bound[i]) continue;
    if (bad++ == 0) first = i;
  }
  if (bad == 0) return "";
  std::string at = "[" + std::to_string(first) + "]";
  if (cols > 0) {
    const auto c = static_cast<std::size_t>(cols);
    at += " (row " + std::to_string(first / c) + ", col " + std::to_string(first % c) + ")";
  }
  char text[256];
  std::snprintf(text, sizeof text, ": got %.9g, want %.9g, bound %.3g (|diff| %.3g); %zu of %zu elements out of bounds",
                static_cast<double>(got[first]), want.value[first], want.bound[first],
                std::abs(static_cast<double>(got[first]) - want.value[first]), bad, got.size());
  return head + at + text;
}

// ---- The backends ------------------------------------------------------------

// A context and how its kernels' data move: host memory for the CPU, device
// memory (tensor::Buffer on the context's Gpu, synchronous copies) for CUDA.
struct Backend {
  std::string name;
  Context* ctx = nullptr;

  Gpu* gpu() const { return ctx->gpu(); }
  Buffer put(const std::vector<float>& host) const {
    Buffer b(host.size(), gpu());
    copy_in(b.data(), host.data(), host.size() * sizeof(float));
    return b;
  }
  // int64 columns (the cross-entropy's target_col), two floats' room each.
  Buffer put(const std::vector<std::int64_t>& host) const {
    Buffer b(2 * host.size(), gpu());
    copy_in(b.data(), host.data(), host.size() * sizeof(std::int64_t));
    return b;
  }
  std::vector<float> get(const Buffer& b) const {
    std::vector<float> host(b.size());
    if (host.empty()) return host;
    if (gpu() != nullptr) gpu()->download(host.data(), b.data(), host.size() * sizeof(float));
    else std::memcpy(host.data(), b.data(), host.size() * sizeof(float));
    return host;
  }

 private:
  void copy_in(void* dst, const void* src, std::size_t bytes) const {
    if (bytes == 0) return;
    if (gpu() != nullptr) gpu()->upload(dst, src, bytes);
    else std::memcpy(dst, src, bytes);
  }
};

const std::int64_t* as_cols(const Buffer& b) { return reinterpret_cast<const std::int64_t*>(b.data()); }

// ---- gemm --------------------------------------------------------------------

// c[m, k_out] = alpha · op(a) · op(b) + beta · c with leading dimensions that
// may exceed the rows (pad columns): a's and b's pad columns hold NaN (never
// read), c's hold finite values (never written).
struct GemmCase {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, k_out = 0, inner = 0, lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
  std::vector<float> a, b, c;  // c: the old values, NaN where beta is 0

  double a_at(std::int64_t i, std::int64_t p) const { return trans_a ? a[p * lda + i] : a[i * lda + p]; }
  double b_at(std::int64_t p, std::int64_t j) const { return trans_b ? b[j * ldb + p] : b[p * ldb + j]; }
  std::string shape() const {
    return Text()("m", m)("k_out", k_out)("inner", inner)("trans_a", trans_a)("trans_b", trans_b)("lda", lda)(
               "ldb", ldb)("ldc", ldc)("alpha", alpha)("beta", beta)
        .str();
  }
};

// A row-major [rows, ld] matrix whose columns from `used` on are `pad`.
std::vector<float> padded(Rng& rng, std::int64_t rows, std::int64_t used, std::int64_t ld, float pad) {
  std::vector<float> x = rng.normal(rows * ld);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = used; j < ld; ++j) x[i * ld + j] = pad;
  return x;
}

GemmCase gemm_case(Rng& rng, bool trans_a, bool trans_b, std::int64_t m, std::int64_t k_out, std::int64_t inner,
                   std::int64_t pad, float beta) {
  GemmCase c;
  c.trans_a = trans_a;
  c.trans_b = trans_b;
  c.m = m;
  c.k_out = k_out;
  c.inner = inner;
  c.lda = (trans_a ? m : inner) + pad;
  c.ldb = (trans_b ? inner : k_out) + pad;
  c.ldc = k_out + pad;
  c.alpha = rng.pick({1.0f, 0.5f, -1.25f});
  c.beta = beta;
  c.a = padded(rng, trans_a ? inner : m, trans_a ? m : inner, c.lda, kNaN);
  c.b = padded(rng, trans_b ? k_out : inner, trans_b ? inner : k_out, c.ldb, kNaN);
  c.c = padded(rng, m, k_out, c.ldc, 1234.5f);
  if (beta == 0.0f)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < k_out; ++j) c.c[i * c.ldc + j] = kNaN;
  return c;
}

// Each element is a dot product of length inner, scaled, plus beta·c: inner
// products and inner − 1 additions, the scaling by alpha and the addition of
// beta·c (itself one rounding) are inner + 2 roundings, so
// |err| <= gamma(inner + 2) · (|alpha| Σ|a b| + |beta c|) in any order.
Want gemm_reference(const GemmCase& c) {
  Want want(c.c.size());
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t j = 0; j < c.ldc; ++j) {
      const std::size_t e = i * c.ldc + j;
      if (j >= c.k_out) {  // pad column: untouched
        want.exact(e, c.c[e]);
        continue;
      }
      double sum = 0.0, mag = 0.0;
      for (std::int64_t p = 0; p < c.inner; ++p) {
        const double prod = c.a_at(i, p) * c.b_at(p, j);
        sum += prod;
        mag += std::abs(prod);
      }
      const double old = c.beta == 0.0f ? 0.0 : static_cast<double>(c.beta) * c.c[e];
      want.set(e, c.alpha * sum + old, gamma(c.inner + 2) * (std::abs(c.alpha) * mag + std::abs(old)));
    }
  }
  return want;
}

std::vector<float> run_gemm(const Backend& be, const GemmCase& c) {
  const Buffer a = be.put(c.a), b = be.put(c.b);
  Buffer out = be.put(c.c);
  gemm(*be.ctx, c.trans_a, c.trans_b, c.m, c.k_out, c.inner, c.alpha, a.data(), c.lda, b.data(), c.ldb, c.beta,
       out.data(), c.ldc);
  return be.get(out);
}

// ---- matmul_forward, matmul_backward, bias_backward --------------------------

struct LinearCase {
  std::int64_t n = 0, in = 0, out = 0;
  WeightLayout layout = WeightLayout::kOutIn;
  bool bias = false;
  BackwardInto into;
  bool want_dinp = true, want_dweight = true, want_dbias = true;  // false: passed as null
  std::vector<float> inp, weight, b, dout;
  std::vector<float> dinp0, dweight0, dbias0;  // old values: random for kAdd, NaN for kOverwrite

  // W as the math has it: [out, in].
  double w_at(std::int64_t o, std::int64_t j) const {
    return layout == WeightLayout::kOutIn ? weight[o * in + j] : weight[j * out + o];
  }
  std::size_t dw_index(std::int64_t o, std::int64_t j) const {
    return static_cast<std::size_t>(layout == WeightLayout::kOutIn ? o * in + j : j * out + o);
  }
  std::string shape() const {
    return Text()("n", n)("in", in)("out", out)("layout", layout == WeightLayout::kOutIn ? "out_in" : "in_out")(
               "bias", bias)("dinp", !want_dinp ? "null" : into.dinp == Into::kAdd ? "add" : "overwrite")(
               "dweight", !want_dweight ? "null" : into.dweight == Into::kAdd ? "add" : "overwrite")(
               "dbias", want_dbias ? "add" : "null")
        .str();
  }
};

LinearCase linear_case(Rng& rng, std::int64_t n, std::int64_t in, std::int64_t out, WeightLayout layout) {
  LinearCase c;
  c.n = n;
  c.in = in;
  c.out = out;
  c.layout = layout;
  c.inp = rng.normal(n * in);
  c.weight = rng.normal(in * out);
  c.b = rng.normal(out);
  c.dout = rng.normal(n * out);
  c.dinp0 = rng.normal(n * in);
  c.dweight0 = rng.normal(in * out);
  c.dbias0 = rng.normal(out);
  return c;
}

// The old values of the backward's outputs as `into` says: NaN to be overwritten.
void apply_into(LinearCase& c, BackwardInto into) {
  c.into = into;
  if (into.dinp == Into::kOverwrite) c.dinp0 = nans(c.n * c.in);
  if (into.dweight == Into::kOverwrite) c.dweight0 = nans(c.in * c.out);
}

// out[i, o] = Σ_j inp[i, j] W[o, j] + bias[o]: in products, in − 1 additions
// and the bias's addition, so |err| <= gamma(in + 1) (Σ|x w| + |bias|).
Want matmul_forward_reference(const LinearCase& c) {
  Want want(static_cast<std::size_t>(c.n * c.out));
  for (std::int64_t i = 0; i < c.n; ++i) {
    for (std::int64_t o = 0; o < c.out; ++o) {
      double sum = c.bias ? c.b[o] : 0.0, mag = std::abs(sum);
      for (std::int64_t j = 0; j < c.in; ++j) {
        const double prod = static_cast<double>(c.inp[i * c.in + j]) * c.w_at(o, j);
        sum += prod;
        mag += std::abs(prod);
      }
      want.set(i * c.out + o, sum, gamma(c.in + 1) * mag);
    }
  }
  return want;
}

std::vector<float> run_matmul_forward(const Backend& be, const LinearCase& c) {
  const Buffer inp = be.put(c.inp), weight = be.put(c.weight), b = be.put(c.b);
  Buffer out = be.put(nans(c.n * c.out));
  matmul_forward(*be.ctx, out.data(), inp.data(), weight.data(), c.bias ? b.data() : nullptr, c.n, c.in, c.out,
                 c.layout);
  return be.get(out);
}

// The value `old` (NaN: overwritten, 0 is added) plus a sum, and its bound:
// a sum of `terms` products (one rounding each) added onto old is within
// gamma(terms + 1) (Σ|products| + |old|).
void set_sum(Want& want, std::size_t e, double old, double sum, double mag, std::int64_t terms) {
  const double base = std::isnan(old) ? 0.0 : old;
  want.set(e, base + sum, gamma(terms + 1) * (mag + std::abs(base)));
}

struct LinearBackwardWant {
  Want dinp, dweight, dbias;
};

// dinp[i, j] (+)= Σ_o dout[i, o] W[o, j]; dweight[o, j] (+)= Σ_i dout[i, o]
// inp[i, j] (stored in the weight's layout); dbias[o] += Σ_i dout[i, o].
LinearBackwardWant matmul_backward_reference(const LinearCase& c) {
  LinearBackwardWant w{Want(c.dinp0.size()), Want(c.dweight0.size()), Want(c.dbias0.size())};
  for (std::int64_t i = 0; i < c.n; ++i) {
    for (std::int64_t j = 0; j < c.in; ++j) {
      double sum = 0.0, mag = 0.0;
      for (std::int64_t o = 0; o < c.out; ++o) {
        const double prod = static_cast<double>(c.dout[i * c.out + o]) * c.w_at(o, j);
        sum += prod;
        mag += std::abs(prod);
      }
      set_sum(w.dinp, i * c.in + j, c.dinp0[i * c.in + j], sum, mag, c.out);
    }
  }
  for (std::int64_t o = 0; o < c.out; ++o) {
    for (std::int64_t j = 0; j < c.in; ++j) {
      double sum = 0.0, mag = 0.0;
      for (std::int64_t i = 0; i < c.n; ++i) {
        const double prod = static_cast<double>(c.dout[i * c.out + o]) * c.inp[i * c.in + j];
        sum += prod;
        mag += std::abs(prod);
      }
      const std::size_t e = c.dw_index(o, j);
      set_sum(w.dweight, e, c.dweight0[e], sum, mag, c.n);
    }
    double sum = 0.0, mag = 0.0;
    for (std::int64_t i = 0; i < c.n; ++i) {
      sum += c.dout[i * c.out + o];
      mag += std::abs(static_cast<double>(c.dout[i * c.out + o]));
    }
    set_sum(w.dbias, o, c.dbias0[o], sum, mag, c.n);
  }
  return w;
}

struct LinearBackwardGot {
  std::vector<float> dinp, dweight, dbias;
};

LinearBackwardGot run_matmul_backward(const Backend& be, const LinearCase& c) {
  const Buffer dout = be.put(c.dout), inp = be.put(c.inp), weight = be.put(c.weight);
  Buffer dinp = be.put(c.dinp0), dweight = be.put(c.dweight0), dbias = be.put(c.dbias0);
  matmul_backward(*be.ctx, c.want_dinp ? dinp.data() : nullptr, c.want_dweight ? dweight.data() : nullptr,
                  c.want_dbias ? dbias.data() : nullptr, dout.data(), inp.data(), weight.data(), c.n, c.in, c.out,
                  c.layout, c.into);
  return {be.get(dinp), be.get(dweight), be.get(dbias)};
}

// ---- layernorm, rmsnorm ------------------------------------------------------

struct NormCase {
  std::int64_t n = 0, dim = 0;
  float eps = 1e-5f;  // rmsnorm's argument (layernorm's is fixed)
  std::vector<float> inp, weight, bias, dout, dinp0, dweight0, dbias0;
  std::vector<float> mean, rstd;  // the backward's inputs: the double forward's, rounded

  std::string shape() const { return Text()("n", n)("dim", dim)("eps", eps).str(); }
};

NormCase norm_case(Rng& rng, std::int64_t n, std::int64_t dim) {
  NormCase c;
  c.n = n;
  c.dim = dim;
  c.inp = norm_rows(rng, n, dim);
  c.weight = rng.normal(dim, 0.5, 1.0);
  c.bias = rng.normal(dim);
  c.dout = rng.normal(n * dim);
  c.dinp0 = rng.normal(n * dim);
  c.dweight0 = rng.normal(dim);
  c.dbias0 = rng.normal(dim);
  return c;
}

// One row's statistics in double and the bounds of the forward's rounding
// (two-pass, as tensor/layernorm.cpp):
//   mean:  d − 1 additions and a division: δm <= gamma(d + 1) Σ|x| / d.
//   var:   Σ(x − m̂)²/d; an error δm in the mean adds δm² (the cross term
//          vanishes), and the d subtractions, squares, additions and the
//          division are d + 3 roundings of nonnegative terms:
//          δvar <= gamma(d + 3) (var + δm²) + δm².
//   rstd:  s = 1/sqrt(var + eps): the addition (u), sqrt (halves the relative
//          error, adds u) and the division (u), or rsqrtf's 2 ulp:
//          ρ_s = ½ (δvar + u (var + eps)) / (var + eps) + 3u, relative.
struct RowStats {
  double mean = 0.0, var = 0.0, rstd = 0.0;
  double mean_err = 0.0, rstd_rel = 0.0;
};

RowStats layernorm_row_stats(const float* x, std::int64_t d, double eps) {
  RowStats r;
  double abs_sum = 0.0;
  for (std::int64_t j = 0; j < d; ++j) {
    r.mean += x[j];
    abs_sum += std::abs(static_cast<double>(x[j]));
  }
  r.mean /= static_cast<double>(d);
  for (std::int64_t j = 0; j < d; ++j) r.var += (x[j] - r.mean) * (x[j] - r.mean);
  r.var /= static_cast<double>(d);
  r.rstd = 1.0 / std::sqrt(r.var + eps);
  r.mean_err = gamma(d + 1) * abs_sum / static_cast<double>(d);
  const double var_err = gamma(d + 3) * (r.var + r.mean_err * r.mean_err) + r.mean_err * r.mean_err;
  r.rstd_rel = 0.5 * (var_err + kUnit * (r.var + eps)) / (r.var + eps) + 3.0 * kUnit;
  return r;
}

struct LayerNormForwardWant {
  Want out, mean, rstd;
};

// y_j = (x_j − m) s w_j + b_j. With a_j = |x_j − m| s |w_j|: the error of m
// moves y by |w_j| s δm; (x_j − m), the two products and s's error give
// a_j (ρ_s + 3u); the bias's addition u (a_j + |b_j|).
LayerNormForwardWant layernorm_forward_reference(const NormCase& c, double eps = kLayerNormEps) {
  LayerNormForwardWant w{Want(c.inp.size()), Want(static_cast<std::size_t>(c.n)), Want(static_cast<std::size_t>(c.n))};
  for (std::int64_t i = 0; i < c.n; ++i) {
    const float* x = c.inp.data() + i * c.dim;
    const RowStats r = layernorm_row_stats(x, c.dim, eps);
    for (std::int64_t j = 0; j < c.dim; ++j) {
      const double a = std::abs(x[j] - r.mean) * r.rstd * std::abs(static_cast<double>(c.weight[j]));
      const double y = (x[j] - r.mean) * r.rstd * c.weight[j] + c.bias[j];
      w.out.set(i * c.dim + j, y,
                std::abs(static_cast<double>(c.weight[j])) * r.rstd * r.mean_err + a * (r.rstd_rel + 3.0 * kUnit) +
                    kUnit * (a + std::abs(static_cast<double>(c.bias[j]))));
    }
    w.mean.set(i, r.mean, r.mean_err);
    w.rstd.set(i, r.rstd, r.rstd * r.rstd_rel);
  }
  return w;
}

struct LayerNormForwardGot {
  std::vector<float> out, mean, rstd;
};

LayerNormForwardGot run_layernorm_forward(const Backend& be, const NormCase& c) {
  const Buffer inp = be.put(c.inp), weight = be.put(c.weight), bias = be.put(c.bias);
  Buffer out = be.put(nans(c.n * c.dim)), mean = be.put(nans(c.n)), rstd = be.put(nans(c.n));
  layernorm_forward(*be.ctx, out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), c.n, c.dim);
  return {be.get(out), be.get(mean), be.get(rstd)};
}

// The backward's mean and rstd inputs: the double forward's, rounded.
void set_layernorm_stats(NormCase& c) {
  c.mean.clear();
  c.rstd.clear();
  for (std::int64_t i = 0; i < c.n; ++i) {
    const RowStats r = layernorm_row_stats(c.inp.data() + i * c.dim, c.dim, kLayerNormEps);
    c.mean.push_back(static_cast<float>(r.mean));
    c.rstd.push_back(static_cast<float>(r.rstd));
  }
}

struct NormBackwardWant {
  Want dinp, dweight, dbias;
};

// From the given mean m and rstd r (exact inputs), with xhat_j = (x_j − m) r,
// g_j = w_j dy_j, ḡ = Σg/d, ḡx = Σ g xhat / d:
//   dx_j += (g_j − ḡ − xhat_j ḡx) r, dweight_j += Σ_i xhat dy, dbias_j += Σ_i dy.
// Rounding: δxhat_j <= 3u (|x_j| + |m|) r (x − m then ·r, or x·r − m·r);
// δḡ <= gamma(d + 2) Σ|g| / d; δḡx <= (Σ|g| δxhat + gamma(d + 2) Σ|g xhat|) / d;
// the bracket t_j: δt <= δḡ + |xhat| δḡx + |ḡx| δxhat + 4u (|g| + |ḡ| + |xhat ḡx|)
// (g's product, the product xhat ḡx and two subtractions); then ·r and the
// accumulation: r (δt + u|t|) + u (|old| + r|t|). The parameter gradients are
// sums of n terms onto the old value: gamma(n + 2) of their magnitude sums,
// plus δxhat |dy| per term for dweight.
NormBackwardWant layernorm_backward_reference(const NormCase& c) {
  const std::int64_t d = c.dim;
  NormBackwardWant w{Want(c.inp.size()), Want(static_cast<std::size_t>(d)), Want(static_cast<std::size_t>(d))};
  std::vector<double> dw(d), dw_mag(d), dw_err(d), db(d), db_mag(d);
  for (std::int64_t i = 0; i < c.n; ++i) {
    const float* x = c.inp.data() + i * d;
    const float* dy = c.dout.data() + i * d;
    const double m = c.mean[i], r = c.rstd[i];
    std::vector<double> xhat(d), xhat_err(d), g(d);
    double g_sum = 0.0, g_mag = 0.0, gx_sum = 0.0, gx_mag = 0.0, gx_err = 0.0;
    for (std::int64_t j = 0; j < d; ++j) {
      xhat[j] = (x[j] - m) * r;
      xhat_err[j] = 3.0 * kUnit * (std::abs(static_cast<double>(x[j])) + std::abs(m)) * r;
      g[j] = static_cast<double>(c.weight[j]) * dy[j];
      g_sum += g[j];
      g_mag += std::abs(g[j]);
      gx_sum += g[j] * xhat[j];
      gx_mag += std::abs(g[j] * xhat[j]);
      gx_err += std::abs(g[j]) * xhat_err[j];
      dw[j] += xhat[j] * dy[j];
      dw_mag[j] += std::abs(xhat[j] * dy[j]);
      dw_err[j] += xhat_err[j] * std::abs(static_cast<double>(dy[j]));
      db[j] += dy[j];
      db_mag[j] += std::abs(static_cast<double>(dy[j]));
    }
    const double dd = static_cast<double>(d);
    const double g_mean = g_sum / dd, g_mean_err = gamma(d + 2) * g_mag / dd;
    const double gx_mean = gx_sum / dd, gx_mean_err = (gx_err + gamma(d + 2) * gx_mag) / dd;
    for (std::int64_t j = 0; j < d; ++j) {
      const double t = g[j] - g_mean - xhat[j] * gx_mean;
      const double t_err = g_mean_err + std::abs(xhat[j]) * gx_mean_err + std::abs(gx_mean) * xhat_err[j] +
                           4.0 * kUnit * (std::abs(g[j]) + std::abs(g_mean) + std::abs(xhat[j] * gx_mean));
      const double old = c.dinp0[i * d + j];
      w.dinp.set(i * d + j, old + t * r, r * (t_err + kUnit * std::abs(t)) + kUnit * (std::abs(old) + r * std::abs(t)));
    }
  }
  for (std::int64_t j = 0; j < d; ++j) {
    w.dweight.set(j, c.dweight0[j] + dw[j],
                  dw_err[j] + gamma(c.n + 2) * (dw_mag[j] + std::abs(static_cast<double>(c.dweight0[j]))));
    w.dbias.set(j, c.dbias0[j] + db[j], gamma(c.n + 2) * (db_mag[j] + std::abs(static_cast<double>(c.dbias0[j]))));
  }
  return w;
}

struct NormBackwardGot {
  std::vector<float> dinp, dweight, dbias;
};

NormBackwardGot run_layernorm_backward(const Backend& be, const NormCase& c) {
  const Buffer dout = be.put(c.dout), inp = be.put(c.inp), weight = be.put(c.weight), mean = be.put(c.mean),
               rstd = be.put(c.rstd);
  Buffer dinp = be.put(c.dinp0), dweight = be.put(c.dweight0), dbias = be.put(c.dbias0);
  layernorm_backward(*be.ctx, dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                     mean.data(), rstd.data(), c.n, c.dim);
  return {be.get(dinp), be.get(dweight), be.get(dbias)};
}

// RMSNorm row: ms = Σx²/d (d squares, d − 1 additions, a division, all of
// nonnegative terms: δms <= gamma(d + 2) ms), s = 1/sqrt(ms + eps) as the
// layernorm's: ρ_s = ½ (δms + u (ms + eps)) / (ms + eps) + 3u.
struct RmsStats {
  double rstd = 0.0, rstd_rel = 0.0;
};

RmsStats rmsnorm_row_stats(const float* x, std::int64_t d, double eps) {
  double ms = 0.0;
  for (std::int64_t j = 0; j < d; ++j) ms += static_cast<double>(x[j]) * x[j];
  ms /= static_cast<double>(d);
  return {1.0 / std::sqrt(ms + eps), 0.5 * (gamma(d + 2) * ms + kUnit * (ms + eps)) / (ms + eps) + 3.0 * kUnit};
}

struct RmsForwardWant {
  Want out, rstd;
};

// y_j = x_j s w_j: relative ρ_s + 2u (two products).
RmsForwardWant rmsnorm_forward_reference(const NormCase& c) {
  RmsForwardWant w{Want(c.inp.size()), Want(static_cast<std::size_t>(c.n))};
  for (std::int64_t i = 0; i < c.n; ++i) {
    const float* x = c.inp.data() + i * c.dim;
    const RmsStats r = rmsnorm_row_stats(x, c.dim, static_cast<double>(c.eps));
    for (std::int64_t j = 0; j < c.dim; ++j) {
      const double y = x[j] * r.rstd * c.weight[j];
      w.out.set(i * c.dim + j, y, std::abs(y) * (r.rstd_rel + 2.0 * kUnit));
    }
    w.rstd.set(i, r.rstd, r.rstd * r.rstd_rel);
  }
  return w;
}

struct RmsForwardGot {
  std::vector<float> out, rstd;
};

RmsForwardGot run_rmsnorm_forward(const Backend& be, const NormCase& c) {
  const Buffer inp = be.put(c.inp), weight = be.put(c.weight);
  Buffer out = be.put(nans(c.n * c.dim)), rstd = be.put(nans(c.n));
  rmsnorm_forward(*be.ctx, out.data(), rstd.data(), inp.data(), weight.data(), c.n, c.dim, c.eps);
  return {be.get(out), be.get(rstd)};
}

void set_rmsnorm_stats(NormCase& c) {
  c.rstd.clear();
  for (std::int64_t i = 0; i < c.n; ++i)
    c.rstd.push_back(static_cast<float>(rmsnorm_row_stats(c.inp.data() + i * c.dim, c.dim, c.eps).rstd));
}

// From the given rstd s (exact input): mm = Σ w dy x s / d (three products per
// term, d − 1 additions, a division: δmm <= gamma(d + 4) Σ|w dy x| s / d),
// dx_j += (w_j dy_j − x_j s mm) s: the bracket t has
// δt <= |x| s δmm + 4u (|w dy| + |x s mm|), then ·s and the accumulation:
// s (δt + u|t|) + u (|old| + s|t|). dweight_j += Σ_i x s dy: gamma(n + 3) of
// the magnitude sum with the old value.
NormBackwardWant rmsnorm_backward_reference(const NormCase& c) {
  const std::int64_t d = c.dim;
  NormBackwardWant w{Want(c.inp.size()), Want(static_cast<std::size_t>(d)), Want()};
  std::vector<double> dw(d), dw_mag(d);
  for (std::int64_t i = 0; i < c.n; ++i) {
    const float* x = c.inp.data() + i * d;
    const float* dy = c.dout.data() + i * d;
    const double s = c.rstd[i], dd = static_cast<double>(d);
    double sum = 0.0, mag = 0.0;
    for (std::int64_t j = 0; j < d; ++j) {
      const double term = static_cast<double>(c.weight[j]) * dy[j] * x[j] * s;
      sum += term;
      mag += std::abs(term);
      dw[j] += x[j] * s * dy[j];
      dw_mag[j] += std::abs(x[j] * s * dy[j]);
    }
    const double mm = sum / dd, mm_err = gamma(d + 4) * mag / dd;
    for (std::int64_t j = 0; j < d; ++j) {
      const double wdy = static_cast<double>(c.weight[j]) * dy[j], xsm = x[j] * s * mm;
      const double t = wdy - xsm;
      const double t_err = std::abs(static_cast<double>(x[j])) * s * mm_err + 4.0 * kUnit * (std::abs(wdy) + std::abs(xsm));
      const double old = c.dinp0[i * d + j];
      w.dinp.set(i * d + j, old + t * s, s * (t_err + kUnit * std::abs(t)) + kUnit * (std::abs(old) + s * std::abs(t)));
    }
  }
  for (std::int64_t j = 0; j < d; ++j)
    w.dweight.set(j, c.dweight0[j] + dw[j], gamma(c.n + 3) * (dw_mag[j] + std::abs(static_cast<double>(c.dweight0[j]))));
  return w;
}

NormBackwardGot run_rmsnorm_backward(const Backend& be, const NormCase& c) {
  const Buffer dout = be.put(c.dout), inp = be.put(c.inp), weight = be.put(c.weight), rstd = be.put(c.rstd);
  Buffer dinp = be.put(c.dinp0), dweight = be.put(c.dweight0);
  rmsnorm_backward(*be.ctx, dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), rstd.data(), c.n,
                   c.dim);
  return {be.get(dinp), be.get(dweight), {}};
}

// ---- gelu, swiglu, residual, zero --------------------------------------------

// Element counts: one, odd, past the CPU's grains (gelu 16384, swiglu 8192,
// zero 65536) and the GPU's 256-thread blocks.
constexpr std::int64_t kCounts[] = {1, 17, 65, 1000, 9001, 20001};

// GELU (tanh form): z = k (x + 0.044715 x³), k = sqrt(2/π), t = tanh(z),
// y = ½ x (1 + t). The computed t is off by at most
//   δt = kTanh + 4u |z| (1 − t²)
// absolutely: kTanh = 10u for the evaluation (the CPU's 1 − 2/(exp(2z) + 1)
// rounds a quotient of magnitude <= 2 with relative error <= 1.7u + 2u, 8u
// absolute; CUDA's tanhf 2 ulp), and the argument's four roundings (relative
// 4u) move t by |z| 4u t'(z). 1 + t cancels for negative x, so the bound is
// absolute in x: |δy| <= ½ |x| δt + 2u |y|.
constexpr double kTanh = 10.0 * kUnit;
constexpr double kGeluCubic = 0.044715;
const double kGeluScale = std::sqrt(2.0 / std::numbers::pi);

struct GeluPoint {
  double z, t, dt;
};

GeluPoint gelu_point(double x) {
  const double z = kGeluScale * (x + kGeluCubic * x * x * x);
  const double t = std::tanh(z);
  return {z, t, kTanh + 4.0 * kUnit * std::abs(z) * (1.0 - t * t)};
}

Want gelu_forward_reference(const std::vector<float>& inp) {
  Want want(inp.size());
  for (std::size_t i = 0; i < inp.size(); ++i) {
    const double x = inp[i];
    const GeluPoint p = gelu_point(x);
    const double y = 0.5 * x * (1.0 + p.t);
    want.set(i, y, 0.5 * std::abs(x) * p.dt + 2.0 * kUnit * std::abs(y));
  }
  return want;
}

// d *= local, local = ½ (1 + t) + A' (1 − t²) with A' = ½ x k (1 + 3·0.044715 x²)
// (|A'| = A). 1 − t² cancels as |t| → 1 (its error 2|t| δt + u), so with
// the roundings of the terms (6u of their magnitudes):
//   δlocal <= (½ + 2A) δt + 6u (½ (1 + |t|) + A),  |δd| <= |d| δlocal + u |result|.
Want gelu_backward_reference(const std::vector<float>& inp, const std::vector<float>& d) {
  Want want(inp.size());
  for (std::size_t i = 0; i < inp.size(); ++i) {
    const double x = inp[i];
    const GeluPoint p = gelu_point(x);
    const double a = 0.5 * x * kGeluScale * (1.0 + 3.0 * kGeluCubic * x * x);
    const double local = 0.5 * (1.0 + p.t) + a * (1.0 - p.t * p.t);
    const double local_err = (0.5 + 2.0 * std::abs(a)) * p.dt + 6.0 * kUnit * (0.5 * (1.0 + std::abs(p.t)) + std::abs(a));
    const double r = d[i] * local;
    want.set(i, r, std::abs(static_cast<double>(d[i])) * local_err + kUnit * std::abs(r));
  }
  return want;
}

// σ(g) = 1 / (1 + exp(−g)): the exp's kTranscendental (its argument is
// exact), the addition and the division: relative ρ_σ = kTranscendental + 2u.
constexpr double kSigmoidRel = kTranscendental + 2.0 * kUnit;
double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// out = g σ(g) u: two products, relative ρ_σ + 2u.
Want swiglu_forward_reference(const std::vector<float>& gate_up) {
  Want want(gate_up.size() / 2);
  for (std::size_t i = 0; i < gate_up.size() / 2; ++i) {
    const double g = gate_up[2 * i], u = gate_up[2 * i + 1];
    const double y = g * sigmoid(g) * u;
    want.set(i, y, std::abs(y) * (kSigmoidRel + 2.0 * kUnit));
  }
  return want;
}

// dg += dout u σ (1 + g (1 − σ)), du += dout g σ. 1 − σ: δ <= σ ρ_σ + u (1 − σ);
// T = 1 + g (1 − σ) may cancel: δT <= |g| δ(1 − σ) + u |g (1 − σ)| + u (1 + |g| (1 − σ));
// P = dout u σ: relative ρ_σ + 2u; dg: |P| (δT + |T| (ρ_σ + 3u)) + u (|old| + |P T|).
// du: |dout g σ| (ρ_σ + 2u) + u (|old| + |dout g σ|).
Want swiglu_backward_reference(const std::vector<float>& gate_up, const std::vector<float>& dout,
                               const std::vector<float>& dgate_up0) {
  Want want(gate_up.size());
  for (std::size_t i = 0; i < dout.size(); ++i) {
    const double g = gate_up[2 * i], u = gate_up[2 * i + 1], dy = dout[i];
    const double s = sigmoid(g);
    const double one_minus = 1.0 - s, one_minus_err = s * kSigmoidRel + kUnit * one_minus;
    const double t = 1.0 + g * one_minus;
    const double t_err =
        std::abs(g) * one_minus_err + kUnit * std::abs(g * one_minus) + kUnit * (1.0 + std::abs(g) * one_minus);
    const double p = dy * u * s;
    const double old_g = dgate_up0[2 * i], old_u = dgate_up0[2 * i + 1];
    want.set(2 * i, old_g + p * t,
             std::abs(p) * (t_err + std::abs(t) * (kSigmoidRel + 3.0 * kUnit)) + kUnit * (std::abs(old_g) + std::abs(p * t)));
    const double q = dy * g * s;
    want.set(2 * i + 1, old_u + q, std::abs(q) * (kSigmoidRel + 2.0 * kUnit) + kUnit * (std::abs(old_u) + std::abs(q)));
  }
  return want;
}

// ---- rope --------------------------------------------------------------------

// q/k/v offsets of one (batch, query head) slice, in the layout of tensor/attention.h.
struct Heads {
  const AttentionShape& s;
  std::int64_t b, h;
  std::size_t group(std::int64_t t) const {
    return static_cast<std::size_t>((b * s.seq + t) * s.qkv_row() + (h / s.group) * (s.group + 2) * s.head_dim);
  }
  std::size_t q(std::int64_t t, std::int64_t i) const { return group(t) + (h % s.group) * s.head_dim + i; }
  std::size_t k(std::int64_t t, std::int64_t i) const { return group(t) + s.group * s.head_dim + i; }
  std::size_t v(std::int64_t t, std::int64_t i) const { return group(t) + (s.group + 1) * s.head_dim + i; }
  std::size_t out(std::int64_t t, std::int64_t i) const {
    return static_cast<std::size_t>((b * s.seq + t) * s.heads * s.head_dim + h * s.head_dim + i);
  }
  std::size_t att(std::int64_t t, std::int64_t j) const {
    return static_cast<std::size_t>(((b * s.heads + h) * s.seq + t) * s.seq + j);
  }
};

std::string attention_shape_text(const AttentionShape& s) {
  return Text()("batch", s.batch)("seq", s.seq)("heads", s.heads)("head_dim", s.head_dim)("group", s.group).str();
}

// The rotation of each (2j, 2j+1) pair of every query and key head by sign ·
// angle(t, j), from the given float table: two products and one addition per
// element, |err| <= gamma(2) (|x0 c| + |x1 s|); the value heads are untouched.
Want rope_reference(const std::vector<float>& qkv, const AttentionShape& s, const RopeTable& table, double sign) {
  Want want(qkv.size());
  const std::int64_t hd = s.head_dim, pairs = hd / 2;
  for (std::int64_t row = 0; row < s.batch * s.seq; ++row) {
    const std::int64_t t = row % s.seq;
    for (std::int64_t g = 0; g < s.groups(); ++g) {
      const std::size_t base = row * s.qkv_row() + g * (s.group + 2) * hd;
      for (std::int64_t h = 0; h < s.group + 2; ++h) {
        for (std::int64_t j = 0; j < pairs; ++j) {
          const std::size_t e0 = base + h * hd + 2 * j, e1 = e0 + 1;
          if (h == s.group + 1) {  // the value head
            want.exact(e0, qkv[e0]);
            want.exact(e1, qkv[e1]);
            continue;
          }
          const double c = table.cos[t * pairs + j], sn = sign * table.sin[t * pairs + j];
          const double x0 = qkv[e0], x1 = qkv[e1];
          const double mag = std::abs(x0 * c) + std::abs(x1 * sn) + std::abs(x0 * sn) + std::abs(x1 * c);
          want.set(e0, x0 * c - x1 * sn, gamma(2) * mag);
          want.set(e1, x0 * sn + x1 * c, gamma(2) * mag);
        }
      }
    }
  }
  return want;
}

// ---- attention ---------------------------------------------------------------

struct AttentionCase {
  AttentionShape s;
  std::vector<float> qkv, dout, dqkv0;
};

AttentionCase attention_case(Rng& rng, const AttentionShape& s) {
  const std::int64_t rows = s.batch * s.seq;
  // Spread 1.5: scores of a few units, peaked rows next to flat ones.
  return {s, rng.normal(rows * s.qkv_row(), 1.5), rng.normal(rows * s.heads * s.head_dim),
          rng.normal(rows * s.qkv_row())};
}

struct AttentionForwardWant {
  Want out, att;
};

// Per row t of one head (n = t + 1 keys), first order:
//   scores   s_j = scale (q·k_j): a dot of length hd, the product with scale
//            and scale's own rounding (1/sqrtf(hd): 2u):
//            δs_j <= gamma(hd + 3) scale Σ|q k_j|.
//   exps     e_j = exp(s_j − max): relative ρ_j = δs_j + u |s_j − max| +
//            kTranscendental (a common error of max cancels in the softmax).
//   softmax  p_j = e_j / Σe: |δp_j| <= p_j (ρ_j + Σ_m p_m ρ_m + gamma(n + 3))
//            (the sum, the reciprocal or division, the product, the store).
//   out      Σ_j p_j v_j: |δout| <= Σ_j |δp_j| |v_j| + gamma(T) Σ_j p_j |v_j|.
// Above the diagonal att is 0 exactly.
AttentionForwardWant attention_forward_reference(const AttentionCase& c) {
  const AttentionShape& s = c.s;
  const std::int64_t T = s.seq, hd = s.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto& x = c.qkv;
  AttentionForwardWant w{Want(static_cast<std::size_t>(s.batch * T * s.heads * hd)),
                         Want(static_cast<std::size_t>(s.batch * s.heads * T * T))};
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const Heads at{s, b, h};
      for (std::int64_t t = 0; t < T; ++t) {
        const auto n = static_cast<std::size_t>(t + 1);
        std::vector<double> score(n), rho(n), p(n), p_err(n);
        double top = -INFINITY;
        for (std::size_t j = 0; j < n; ++j) {
          double dot = 0.0, mag = 0.0;
          for (std::int64_t i = 0; i < hd; ++i) {
            const double prod = static_cast<double>(x[at.q(t, i)]) * x[at.k(static_cast<std::int64_t>(j), i)];
            dot += prod;
            mag += std::abs(prod);
          }
          score[j] = scale * dot;
          rho[j] = gamma(hd + 3) * scale * mag;
          top = std::max(top, score[j]);
        }
        double denom = 0.0, mean_rho = 0.0;
        for (std::size_t j = 0; j < n; ++j) denom += p[j] = std::exp(score[j] - top);
        for (std::size_t j = 0; j < n; ++j) {
          p[j] /= denom;
          rho[j] += kUnit * std::abs(score[j] - top) + kTranscendental;
          mean_rho += p[j] * rho[j];
        }
        for (std::size_t j = 0; j < n; ++j) {
          p_err[j] = p[j] * (rho[j] + mean_rho + gamma(t + 4));
          w.att.set(at.att(t, static_cast<std::int64_t>(j)), p[j], p_err[j]);
        }
        for (std::int64_t j = t + 1; j < T; ++j) w.att.exact(at.att(t, j), 0.0);
        for (std::int64_t i = 0; i < hd; ++i) {
          double sum = 0.0, err = 0.0, mag = 0.0;
          for (std::size_t j = 0; j < n; ++j) {
            const double v = x[at.v(static_cast<std::int64_t>(j), i)];
            sum += p[j] * v;
            err += p_err[j] * std::abs(v);
            mag += p[j] * std::abs(v);
          }
          w.out.set(at.out(t, i), sum, err + gamma(T) * mag);
        }
      }
    }
  }
  return w;
}

// From the given probabilities P (exact inputs, zero above the diagonal), per
// row t of one head:
//   dP_j = dOut_t · v_j (length hd):      δdP_j <= gamma(hd) Σ|dOut v_j|
//   w = Σ_j P_j dP_j (t + 1 terms):       δw <= Σ P δdP + gamma(t + 2) Σ P |dP|
//   dS_j = scale P_j (dP_j − w):          δdS_j <= scale P_j (δdP_j + δw + 5u (|dP_j| + |w|))
//                                         (subtraction, two products, scale's 2u)
//   dQ_t += Σ_j dS_j K_j (T terms):        Σ δdS |K| + gamma(T + 1) (Σ|dS K| + |old|)
//   dK_j += Σ_{h in group, t} dS_tj Q_t,   dV_j += Σ_{h, t} P_tj dOut_t (group·T terms):
//                                         Σ δdS |Q| + gamma(group T + 1) (magnitudes + |old|)
Want attention_backward_reference(const AttentionCase& c, const std::vector<float>& att) {
  const AttentionShape& s = c.s;
  const std::int64_t T = s.seq, hd = s.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto& x = c.qkv;
  const auto& dy = c.dout;
  std::vector<double> sum(x.size(), 0.0), err(x.size(), 0.0), mag(x.size(), 0.0);
  std::vector<std::int64_t> terms(x.size(), 0);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const Heads at{s, b, h};
      for (std::int64_t t = 0; t < T; ++t) {
        const auto n = static_cast<std::size_t>(t + 1);
        std::vector<double> dp(n), dp_err(n), ds(n), ds_err(n);
        double w = 0.0, w_err = 0.0, w_mag = 0.0;
        for (std::size_t j = 0; j < n; ++j) {
          const auto key = static_cast<std::int64_t>(j);
          double dot = 0.0, m = 0.0;
          for (std::int64_t i = 0; i < hd; ++i) {
            const double prod = static_cast<double>(dy[at.out(t, i)]) * x[at.v(key, i)];
            dot += prod;
            m += std::abs(prod);
          }
          const double pj = att[at.att(t, key)];
          dp[j] = dot;
          dp_err[j] = gamma(hd) * m;
          w += pj * dp[j];
          w_err += pj * dp_err[j];
          w_mag += pj * std::abs(dp[j]);
        }
        w_err += gamma(t + 2) * w_mag;
        for (std::size_t j = 0; j < n; ++j) {
          const double pj = att[at.att(t, static_cast<std::int64_t>(j))];
          ds[j] = scale * pj * (dp[j] - w);
          ds_err[j] = scale * pj * (dp_err[j] + w_err + 5.0 * kUnit * (std::abs(dp[j]) + std::abs(w)));
        }
        for (std::size_t j = 0; j < n; ++j) {
          const auto key = static_cast<std::int64_t>(j);
          const double pj = att[at.att(t, key)];
          for (std::int64_t i = 0; i < hd; ++i) {
            const std::size_t q = at.q(t, i), k = at.k(key, i), v = at.v(key, i);
            const double kv = x[k], qv = x[q], g = dy[at.out(t, i)];
            sum[q] += ds[j] * kv;  // dQ_t
            err[q] += ds_err[j] * std::abs(kv);
            mag[q] += std::abs(ds[j] * kv);
            sum[k] += ds[j] * qv;  // dK_j
            err[k] += ds_err[j] * std::abs(qv);
            mag[k] += std::abs(ds[j] * qv);
            sum[v] += pj * g;  // dV_j
            mag[v] += std::abs(pj * g);
          }
        }
      }
    }
  }
  Want want(x.size());
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const Heads at{s, b, h};
      for (std::int64_t t = 0; t < T; ++t) {
        for (std::int64_t i = 0; i < hd; ++i) {
          const std::size_t q = at.q(t, i), k = at.k(t, i), v = at.v(t, i);
          for (const auto& [e, n] : {std::pair{q, T}, std::pair{k, s.group * T}, std::pair{v, s.group * T}}) {
            const double old = c.dqkv0[e];
            want.set(e, old + sum[e], err[e] + gamma(n + 1) * (mag[e] + std::abs(old)));
          }
        }
      }
    }
  }
  return want;
}

struct AttentionForwardGot {
  std::vector<float> out, att;
};

AttentionForwardGot run_attention_forward(const Backend& be, const AttentionCase& c) {
  const AttentionShape& s = c.s;
  const Buffer qkv = be.put(c.qkv);
  Buffer out = be.put(nans(s.batch * s.seq * s.heads * s.head_dim)),
         att = be.put(nans(s.batch * s.heads * s.seq * s.seq));
  attention_forward(*be.ctx, out.data(), att.data(), qkv.data(), s);
  return {be.get(out), be.get(att)};
}

std::vector<float> run_attention_backward(const Backend& be, const AttentionCase& c, const std::vector<float>& att) {
  const Buffer dout = be.put(c.dout), qkv = be.put(c.qkv), p = be.put(att);
  Buffer dqkv = be.put(c.dqkv0);
  attention_backward(*be.ctx, dqkv.data(), dout.data(), qkv.data(), p.data(), c.s);
  return be.get(dqkv);
}

// The probabilities the backward reads: the reference's, rounded.
std::vector<float> rounded(const Want& want) {
  std::vector<float> x(want.value.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(want.value[i]);
  return x;
}

// ---- cross-entropy -----------------------------------------------------------

constexpr float kPaddingLogit = 1e30f;  // on padding columns: would dominate a max or a sum that read it

struct LogitCase {
  LogitShape shape;
  float dloss_scale = 1.0f;
  std::vector<float> logits;         // [rows, cols]
  std::vector<std::int64_t> target;  // column on this rank, or -1
  std::vector<float> row_max;        // local_sums' input: the group's max, >= this rank's

  std::string shape_text() const {
    return Text()("rows", shape.rows)("cols", shape.cols)("valid", shape.valid)("dloss_scale", dloss_scale).str();
  }
  double logit(std::int64_t i, std::int64_t j) const { return logits[i * shape.cols + j]; }
};

LogitCase logit_case(Rng& rng, std::int64_t rows, std::int64_t valid, std::int64_t pad) {
  LogitCase c;
  c.shape = {rows, valid + pad, valid};
  c.dloss_scale = rng.pick({1.0f, 0.25f, 1.0f / 33.0f});
  c.logits = rng.normal(rows * c.shape.cols, 3.0);
  for (std::int64_t i = 0; i < rows; ++i) {
    const float offset = rng.pick({0.0f, 0.0f, 25.0f, -40.0f});
    float top = -INFINITY;
    for (std::int64_t j = 0; j < c.shape.cols; ++j) {
      float& l = c.logits[i * c.shape.cols + j];
      l = j < valid ? l + offset : kPaddingLogit;
      if (j < valid) top = std::max(top, l);
    }
    c.target.push_back(rng.below(4) == 0 ? -1 : rng.below(valid));
    c.row_max.push_back(rng.below(2) == 0 ? top : top + static_cast<float>(rng.uniform(0.0, 2.0)));
  }
  return c;
}

// The valid columns of each row of a [rows, cols] array, [rows, valid].
std::vector<float> valid_columns(const std::vector<float>& x, const LogitShape& s) {
  std::vector<float> out;
  for (std::int64_t i = 0; i < s.rows; ++i)
    out.insert(out.end(), x.begin() + i * s.cols, x.begin() + i * s.cols + s.valid);
  return out;
}

// row_max[i] = max of the valid columns: exact.
Want local_max_reference(const LogitCase& c) {
  Want want(static_cast<std::size_t>(c.shape.rows));
  for (std::int64_t i = 0; i < c.shape.rows; ++i) {
    double top = -INFINITY;
    for (std::int64_t j = 0; j < c.shape.valid; ++j) top = std::max(top, c.logit(i, j));
    want.exact(i, top);
  }
  return want;
}

// With M the given max: e_j = exp(l_j − M), relative kTranscendental plus the
// rounding of the argument, u |l_j − M|; S = Σ e_j (valid − 1 additions):
// δS <= Σ δe_j + gamma(valid) S. The target's logit is copied (exact, 0 for -1).
struct SumsWant {
  Want sums, exps;
};

SumsWant local_sums_reference(const LogitCase& c) {
  const LogitShape& s = c.shape;
  SumsWant w{Want(static_cast<std::size_t>(2 * s.rows)), Want(static_cast<std::size_t>(s.rows * s.valid))};
  for (std::int64_t i = 0; i < s.rows; ++i) {
    const double m = c.row_max[i];
    double sum = 0.0, err = 0.0;
    for (std::int64_t j = 0; j < s.valid; ++j) {
      const double e = std::exp(c.logit(i, j) - m);
      const double e_err = e * (kTranscendental + kUnit * std::abs(c.logit(i, j) - m));
      w.exps.set(i * s.valid + j, e, e_err);
      sum += e;
      err += e_err;
    }
    w.sums.set(i, sum, err + gamma(s.valid) * sum);
    w.sums.exact(s.rows + i, c.target[i] >= 0 ? c.logit(i, c.target[i]) : 0.0);
  }
  return w;
}

// finish's inputs: the exps (the double ones, rounded; NaN on padding, which
// must become 0), S and the group's target logit (any value when the target
// is on another rank).
struct FinishInputs {
  std::vector<float> exps, sums;
};

FinishInputs finish_inputs(Rng& rng, const LogitCase& c) {
  const LogitShape& s = c.shape;
  const SumsWant w = local_sums_reference(c);
  FinishInputs in{nans(s.rows * s.cols), std::vector<float>(static_cast<std::size_t>(2 * s.rows))};
  for (std::int64_t i = 0; i < s.rows; ++i) {
    for (std::int64_t j = 0; j < s.valid; ++j) in.exps[i * s.cols + j] = static_cast<float>(w.exps.value[i * s.valid + j]);
    in.sums[i] = static_cast<float>(w.sums.value[i]);
    in.sums[s.rows + i] = c.target[i] >= 0 ? static_cast<float>(c.logit(i, c.target[i]))
                                           : static_cast<float>(rng.normal(1, 3.0)[0]);
  }
  return in;
}

struct LossWant {
  Want losses, dlogits;
};

// losses[i] = log S + M − target logit: log's kTranscendental of |log S| and
// two additions, gamma(2) (|log S| + |M| + |tl|), plus S's own relative error
// s_rel (0 when S is an exact input). dlogits: q_j = e_j / S · scale (1/S,
// two products: 3u, plus e_j's and S's errors e_rel_j + s_rel), minus scale
// at the target (u (|q| + |scale|)); padding columns exactly 0.
void set_loss_row(LossWant& w, const LogitShape& s, std::int64_t i, double sum, double sum_rel, double m, double tl,
                  std::int64_t target, float dloss_scale, const std::vector<double>& e, const std::vector<double>& e_rel) {
  const double log_sum = std::log(sum);
  w.losses.set(i, log_sum + m - tl,
               sum_rel + kTranscendental * std::abs(log_sum) + gamma(2) * (std::abs(log_sum) + std::abs(m) + std::abs(tl)));
  const double sc = dloss_scale;
  for (std::int64_t j = 0; j < s.cols; ++j) {
    const std::size_t at = i * s.cols + j;
    if (j >= s.valid) {
      w.dlogits.exact(at, 0.0);
      continue;
    }
    const double q = e[j] / sum * sc;
    const double q_err = std::abs(q) * (3.0 * kUnit + e_rel[j] + sum_rel);
    if (j == target) w.dlogits.set(at, q - sc, q_err + kUnit * (std::abs(q) + std::abs(sc)));
    else w.dlogits.set(at, q, q_err);
  }
}

LossWant finish_reference(const LogitCase& c, const FinishInputs& in) {
  const LogitShape& s = c.shape;
  LossWant w{Want(static_cast<std::size_t>(s.rows)), Want(static_cast<std::size_t>(s.rows * s.cols))};
  for (std::int64_t i = 0; i < s.rows; ++i) {
    std::vector<double> e(s.valid), e_rel(s.valid, 0.0);
    for (std::int64_t j = 0; j < s.valid; ++j) e[j] = in.exps[i * s.cols + j];
    set_loss_row(w, s, i, in.sums[i], 0.0, c.row_max[i], in.sums[s.rows + i], c.target[i], c.dloss_scale, e, e_rel);
  }
  return w;
}

// The fused form from the raw logits: M the valid columns' max (exact), then
// as local_sums and finish with S's relative error δS / S carried.
LossWant local_reference(const LogitCase& c) {
  const LogitShape& s = c.shape;
  const Want max = local_max_reference(c);
  LossWant w{Want(static_cast<std::size_t>(s.rows)), Want(static_cast<std::size_t>(s.rows * s.cols))};
  for (std::int64_t i = 0; i < s.rows; ++i) {
    const double m = max.value[i];
    std::vector<double> e(s.valid), e_rel(s.valid);
    double sum = 0.0, err = 0.0;
    for (std::int64_t j = 0; j < s.valid; ++j) {
      e[j] = std::exp(c.logit(i, j) - m);
      e_rel[j] = kTranscendental + kUnit * std::abs(c.logit(i, j) - m);
      sum += e[j];
      err += e[j] * e_rel[j];
    }
    const double sum_rel = (err + gamma(s.valid) * sum) / sum;
    const double tl = c.target[i] >= 0 ? c.logit(i, c.target[i]) : 0.0;
    set_loss_row(w, s, i, sum, sum_rel, m, tl, c.target[i], c.dloss_scale, e, e_rel);
  }
  return w;
}

// ---- adamw -------------------------------------------------------------------

struct AdamWCase {
  std::int64_t count = 0;
  AdamWStep step;
  std::vector<float> param, grad, m, v;
  std::string shape() const {
    return Text()("count", count)("lr", step.lr)("beta1", step.beta1)("beta2", step.beta2)("eps", step.eps)(
               "weight_decay", step.weight_decay)("grad_scale", step.grad_scale)("step", step.step)
        .str();
  }
};

AdamWCase adamw_case(Rng& rng, std::int64_t count) {
  AdamWCase c;
  c.count = count;
  c.step.lr = rng.pick({1e-3f, 0.1f});
  c.step.beta1 = 0.9f;
  c.step.beta2 = rng.pick({0.95f, 0.999f});
  c.step.eps = 1e-8f;
  c.step.weight_decay = rng.pick({0.0f, 0.1f});
  c.step.grad_scale = rng.pick({1.0f, 0.37f});
  c.step.step = rng.pick<std::int64_t>({1, 2, 10, 1000});
  c.param = rng.normal(count);
  c.grad = rng.normal(count, rng.pick({1e-3, 1.0}));
  c.m = rng.normal(count, 0.1);
  c.v = rng.normal(count, 0.01);
  for (float& x : c.v) x = std::abs(x);
  return c;
}

struct AdamWWant {
  Want param, m, v;
};

// The bias correction c = 1 / (1 − β^t): β^t is rounded to float (u β^t,
// relative u β^t / (1 − β^t) of the difference), then the subtraction and the
// division: ρ_c = u β^t / (1 − β^t) + 3u. Per element (g = grad · scale, u):
//   m' = β1 m + (1 − β1) g:          δm' <= gamma(4) (β1 |m| + (1 − β1) |g|)
//   v' = β2 v + (1 − β2) g²:         δv' <= gamma(5) v'  (nonnegative terms)
//   m̂ = m' c1:                       δm̂ <= c1 δm' + |m̂| (ρ_c1 + u)
//   q = sqrt(v' c2), D = q + eps:    δD <= q (½ (gamma(5) + ρ_c2 + u) + u) + u D
//   r = m̂ / D:                       δr <= δm̂ / D + |r| δD / D + u |r|
//   U = r + wd p:                    δU <= δr + 2u (|r| + |wd p|)
//   p' = p − lr U:                   δp' <= lr δU + 2u lr |U| + u |p|
AdamWWant adamw_reference(const AdamWCase& c) {
  const AdamWStep& s = c.step;
  const double b1 = s.beta1, b2 = s.beta2, lr = s.lr, eps = s.eps, wd = s.weight_decay, gs = s.grad_scale;
  const auto t = static_cast<double>(s.step);
  const double p1 = std::pow(b1, t), p2 = std::pow(b2, t);
  const double c1 = 1.0 / (1.0 - p1), c2 = 1.0 / (1.0 - p2);
  const double rho_c1 = kUnit * p1 / (1.0 - p1) + 3.0 * kUnit, rho_c2 = kUnit * p2 / (1.0 - p2) + 3.0 * kUnit;
  const auto n = static_cast<std::size_t>(c.count);
  AdamWWant w{Want(n), Want(n), Want(n)};
  for (std::size_t i = 0; i < n; ++i) {
    const double g = c.grad[i] * gs, p = c.param[i];
    const double m = b1 * c.m[i] + (1.0 - b1) * g;
    const double m_err = gamma(4) * (b1 * std::abs(static_cast<double>(c.m[i])) + (1.0 - b1) * std::abs(g));
    const double v = b2 * c.v[i] + (1.0 - b2) * g * g;
    const double v_err = gamma(5) * v;
    const double mh = m * c1, mh_err = c1 * m_err + std::abs(mh) * (rho_c1 + kUnit);
    const double q = std::sqrt(v * c2), d = q + eps;
    const double d_err = q * (0.5 * (gamma(5) + rho_c2 + kUnit) + kUnit) + kUnit * d;
    const double r = mh / d, r_err = mh_err / d + std::abs(r) * d_err / d + kUnit * std::abs(r);
    const double u = r + wd * p, u_err = r_err + 2.0 * kUnit * (std::abs(r) + std::abs(wd * p));
    const double p_new = p - lr * u;
    w.param.set(i, p_new, lr * u_err + 2.0 * kUnit * lr * std::abs(u) + kUnit * std::abs(p));
    w.m.set(i, m, m_err);
    w.v.set(i, v, v_err);
  }
  return w;
}

// ---- The test suite over the backends ------------------------------------------

// One instance per device kind: the CPU context always runs, the CUDA one
// skips where no GPU is visible (or the build has no CUDA).
class BackendOps : public ::testing::TestWithParam<Device> {
 public:
  static void SetUpTestSuite() {
    cpu_ = std::make_unique<Context>(ThreadSetup{.threads = 3});
    if (Gpu::count() > 0) cuda_ = std::make_unique<Context>(ThreadSetup{.threads = 2, .cuda = true});
  }
  static void TearDownTestSuite() {
    cuda_.reset();
    cpu_.reset();
  }

 protected:
  void SetUp() override {
    Context* ctx = GetParam() == Device::kCpu ? cpu_.get() : cuda_.get();
    if (ctx == nullptr) GTEST_SKIP() << "no CUDA device visible (Gpu::count() == 0)";
    be_.name = std::string(device_name(GetParam()));
    be_.ctx = ctx;
  }
  const Backend& be() const { return be_; }
  Where where(std::string op, std::string shape) const { return {std::move(op), be_.name, std::move(shape)}; }

 private:
  static inline std::unique_ptr<Context> cpu_, cuda_;
  Backend be_;
};

INSTANTIATE_TEST_SUITE_P(Backend, BackendOps, ::testing::Values(Device::kCpu, Device::kCuda),
                         [](const ::testing::TestParamInfo<Device>& param) { return std::string(device_name(param.param)); });

TEST_P(BackendOps, Gemm) {
  Rng rng(101);
  for (const bool trans_a : {false, true}) {
    for (const bool trans_b : {false, true}) {
      for (const std::int64_t m : kDims) {
        const GemmCase c = gemm_case(rng, trans_a, trans_b, m, rng.pick(kDims), rng.pick(kDims), rng.pick({0, 0, 3}),
                                     rng.pick({0.0f, 1.0f, 0.5f}));
        EXPECT_EQ(check(where("gemm", c.shape()), "c", run_gemm(be(), c), gemm_reference(c), c.ldc), "");
      }
    }
  }
}

// A rank may hold no units of a kind: empty extents write nothing, and an
// empty inner dimension leaves beta · c (0 for beta 0, whatever c held).
TEST_P(BackendOps, GemmAndMatmulWithEmptyExtents) {
  Rng rng(102);
  for (const auto& [m, k_out, inner, beta] : {std::tuple{0, 3, 5, 0.0f}, std::tuple{4, 0, 5, 1.0f},
                                              std::tuple{5, 3, 0, 0.0f}, std::tuple{5, 3, 0, 0.5f}}) {
    const GemmCase c = gemm_case(rng, false, false, m, k_out, inner, 0, beta);
    EXPECT_EQ(check(where("gemm", c.shape()), "c", run_gemm(be(), c), gemm_reference(c), c.ldc), "");
  }
  for (const bool bias : {false, true}) {
    LinearCase c = linear_case(rng, 5, 0, 3, WeightLayout::kOutIn);
    c.bias = bias;
    EXPECT_EQ(check(where("matmul_forward", c.shape()), "out", run_matmul_forward(be(), c), matmul_forward_reference(c)),
              "");
  }
  for (const auto& [n, in] : {std::pair{0, 3}, std::pair{4, 0}}) {
    LinearCase c = linear_case(rng, n, in, 3, WeightLayout::kInOut);
    apply_into(c, {Into::kOverwrite, Into::kOverwrite});
    const LinearBackwardGot got = run_matmul_backward(be(), c);
    const LinearBackwardWant want = matmul_backward_reference(c);
    EXPECT_EQ(check(where("matmul_backward", c.shape()), "dinp", got.dinp, want.dinp), "");
    EXPECT_EQ(check(where("matmul_backward", c.shape()), "dweight", got.dweight, want.dweight), "");
    EXPECT_EQ(check(where("matmul_backward", c.shape()), "dbias", got.dbias, want.dbias), "");
  }
}

TEST_P(BackendOps, MatmulForward) {
  Rng rng(103);
  for (const WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    for (const bool bias : {false, true}) {
      for (const std::int64_t n : kRows) {
        LinearCase c = linear_case(rng, n, rng.pick(kDims), rng.pick(kDims), layout);
        c.bias = bias;
        EXPECT_EQ(check(where("matmul_forward", c.shape()), "out", run_matmul_forward(be(), c),
                        matmul_forward_reference(c), c.out),
                  "");
      }
    }
  }
}

TEST_P(BackendOps, MatmulBackward) {
  Rng rng(104);
  int variant = 0;
  for (const WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    for (const Into dinp_into : {Into::kAdd, Into::kOverwrite}) {
      for (const Into dweight_into : {Into::kAdd, Into::kOverwrite}) {
        for (int rep = 0; rep < 2; ++rep, ++variant) {
          LinearCase c = linear_case(rng, rng.pick(kRows), rng.pick(kDims), rng.pick(kDims), layout);
          apply_into(c, {dinp_into, dweight_into});
          // Every fourth case skips dinp, dweight or dbias (null), in turn.
          c.want_dinp = variant % 4 != 1;
          c.want_dweight = variant % 4 != 2;
          c.want_dbias = variant % 4 != 3;
          const LinearBackwardGot got = run_matmul_backward(be(), c);
          const LinearBackwardWant want = matmul_backward_reference(c);
          const Where at = where("matmul_backward", c.shape());
          if (c.want_dinp) {
            EXPECT_EQ(check(at, "dinp", got.dinp, want.dinp, c.in), "");
          }
          if (c.want_dweight) {
            EXPECT_EQ(check(at, "dweight", got.dweight, want.dweight), "");
          }
          if (c.want_dbias) {
            EXPECT_EQ(check(at, "dbias", got.dbias, want.dbias), "");
          }
        }
      }
    }
  }
}

TEST_P(BackendOps, BiasBackward) {
  Rng rng(105);
  for (const std::int64_t n : kRows) {
    for (const std::int64_t dim : {rng.pick(kDims), std::int64_t{1000}}) {  // 1000: past the CPU's 64-column grain
      LinearCase c = linear_case(rng, n, 1, dim, WeightLayout::kOutIn);
      const Buffer dout = be().put(c.dout);
      Buffer dbias = be().put(c.dbias0);
      bias_backward(*be().ctx, dbias.data(), dout.data(), n, dim);
      EXPECT_EQ(check(where("bias_backward", Text()("n", n)("dim", dim).str()), "dbias", be().get(dbias),
                      matmul_backward_reference(c).dbias),
                "");
    }
  }
}

TEST_P(BackendOps, LayerNormForward) {
  Rng rng(106);
  for (const std::int64_t dim : kDims) {
    const NormCase c = norm_case(rng, rng.pick(kRows), dim);
    const LayerNormForwardGot got = run_layernorm_forward(be(), c);
    const LayerNormForwardWant want = layernorm_forward_reference(c);
    const Where at = where("layernorm_forward", c.shape());
    EXPECT_EQ(check(at, "out", got.out, want.out, c.dim), "");
    EXPECT_EQ(check(at, "mean", got.mean, want.mean), "");
    EXPECT_EQ(check(at, "rstd", got.rstd, want.rstd), "");
  }
}

TEST_P(BackendOps, LayerNormBackward) {
  Rng rng(107);
  for (const std::int64_t dim : kDims) {
    NormCase c = norm_case(rng, rng.pick(kRows), dim);
    set_layernorm_stats(c);
    const NormBackwardGot got = run_layernorm_backward(be(), c);
    const NormBackwardWant want = layernorm_backward_reference(c);
    const Where at = where("layernorm_backward", c.shape());
    EXPECT_EQ(check(at, "dinp", got.dinp, want.dinp, c.dim), "");
    EXPECT_EQ(check(at, "dweight", got.dweight, want.dweight), "");
    EXPECT_EQ(check(at, "dbias", got.dbias, want.dbias), "");
  }
}

TEST_P(BackendOps, RmsNormForward) {
  Rng rng(108);
  for (const std::int64_t dim : kDims) {
    NormCase c = norm_case(rng, rng.pick(kRows), dim);
    c.eps = rng.pick({1e-5f, 1e-6f});
    const RmsForwardGot got = run_rmsnorm_forward(be(), c);
    const RmsForwardWant want = rmsnorm_forward_reference(c);
    const Where at = where("rmsnorm_forward", c.shape());
    EXPECT_EQ(check(at, "out", got.out, want.out, c.dim), "");
    EXPECT_EQ(check(at, "rstd", got.rstd, want.rstd), "");
  }
}

TEST_P(BackendOps, RmsNormBackward) {
  Rng rng(109);
  for (const std::int64_t dim : kDims) {
    NormCase c = norm_case(rng, rng.pick(kRows), dim);
    c.eps = rng.pick({1e-5f, 1e-6f});
    set_rmsnorm_stats(c);
    const NormBackwardGot got = run_rmsnorm_backward(be(), c);
    const NormBackwardWant want = rmsnorm_backward_reference(c);
    const Where at = where("rmsnorm_backward", c.shape());
    EXPECT_EQ(check(at, "dinp", got.dinp, want.dinp, c.dim), "");
    EXPECT_EQ(check(at, "dweight", got.dweight, want.dweight), "");
  }
}

TEST_P(BackendOps, GeluForwardAndBackward) {
  Rng rng(110);
  for (const std::int64_t count : kCounts) {
    const std::vector<float> inp = rng.normal(count, 3.0), d = rng.normal(count);
    const Where at = where("gelu", Text()("count", count).str());
    const Buffer x = be().put(inp);
    Buffer out = be().put(nans(count));
    gelu_forward(*be().ctx, out.data(), x.data(), count);
    EXPECT_EQ(check(at, "forward out", be().get(out), gelu_forward_reference(inp)), "");
    Buffer grad = be().put(d);  // in place
    gelu_backward(*be().ctx, grad.data(), x.data(), count);
    EXPECT_EQ(check(at, "backward d", be().get(grad), gelu_backward_reference(inp, d)), "");
  }
}

TEST_P(BackendOps, SwigluForwardAndBackward) {
  Rng rng(111);
  for (const std::int64_t count : kCounts) {
    const std::vector<float> gate_up = rng.normal(2 * count, 3.0), dout = rng.normal(count),
                             dgate_up0 = rng.normal(2 * count);
    const Where at = where("swiglu", Text()("count", count).str());
    const Buffer gu = be().put(gate_up), dy = be().put(dout);
    Buffer out = be().put(nans(count)), dgu = be().put(dgate_up0);
    swiglu_forward(*be().ctx, out.data(), gu.data(), count);
    EXPECT_EQ(check(at, "forward out", be().get(out), swiglu_forward_reference(gate_up)), "");
    swiglu_backward(*be().ctx, dgu.data(), gu.data(), dy.data(), count);
    EXPECT_EQ(check(at, "backward dgate_up", be().get(dgu), swiglu_backward_reference(gate_up, dout, dgate_up0), 2), "");
  }
}

// out = residual + x (+ bias[col]): one or two additions, gamma(2) of the magnitudes.
TEST_P(BackendOps, ResidualForward) {
  Rng rng(112);
  for (const bool with_bias : {false, true}) {
    for (const std::int64_t n : kRows) {
      const std::int64_t dim = rng.pick(kDims);
      const std::vector<float> residual = rng.normal(n * dim), x = rng.normal(n * dim), bias = rng.normal(dim);
      const Buffer r = be().put(residual), xb = be().put(x), b = be().put(bias);
      Buffer out = be().put(nans(n * dim));
      residual_forward(*be().ctx, out.data(), r.data(), xb.data(), with_bias ? b.data() : nullptr, n, dim);
      Want want(residual.size());
      for (std::int64_t i = 0; i < n * dim; ++i) {
        const double add = with_bias ? bias[i % dim] : 0.0;
        want.set(i, residual[i] + static_cast<double>(x[i]) + add,
                 gamma(2) * (std::abs(static_cast<double>(residual[i])) + std::abs(static_cast<double>(x[i])) + std::abs(add)));
      }
      EXPECT_EQ(check(where("residual_forward", Text()("n", n)("dim", dim)("bias", with_bias).str()), "out",
                      be().get(out), want, dim),
                "");
    }
  }
}

TEST_P(BackendOps, Zero) {
  for (const std::int64_t count : {std::int64_t{1}, std::int64_t{17}, std::int64_t{65}, std::int64_t{70001}}) {
    Buffer x = be().put(nans(count));
    zero(*be().ctx, x.data(), count);
    Want want(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < want.value.size(); ++i) want.exact(i, 0.0);
    EXPECT_EQ(check(where("zero", Text()("count", count).str()), "x", be().get(x), want), "");
  }
}

TEST_P(BackendOps, RopeForwardAndBackward) {
  Rng rng(113);
  for (const std::int64_t seq : {1, 5, 17}) {
    for (const std::int64_t group : {1, 2}) {
      const AttentionShape s{rng.pick<std::int64_t>({1, 2}), seq, group * rng.pick<std::int64_t>({1, 3}),
                             rng.pick<std::int64_t>({2, 8, 64}), group};
      const RopeTable table = rope_table(seq + 3, s.head_dim, 10000.0f);  // covers more positions than used
      const std::vector<float> qkv = rng.normal(s.batch * s.seq * s.qkv_row());
      const Where at = where("rope", attention_shape_text(s));
      Buffer x = be().put(qkv);
      rope_forward(*be().ctx, x.data(), s, table);
      EXPECT_EQ(check(at, "forward qkv", be().get(x), rope_reference(qkv, s, table, 1.0), s.qkv_row()), "");
      Buffer d = be().put(qkv);
      rope_backward(*be().ctx, d.data(), s, table);
      EXPECT_EQ(check(at, "backward dqkv", be().get(d), rope_reference(qkv, s, table, -1.0), s.qkv_row()), "");
    }
  }
}

// Sequences of one position, odd ones, and past the CPU's GEMM path threshold
// (16) and its 32-row blocks.
void expect_attention(const Backend& be, Rng& rng, std::int64_t group) {
  for (const std::int64_t seq : {1, 5, 17, 33, 40}) {
    const AttentionShape s{rng.pick<std::int64_t>({1, 2}), seq, group * rng.pick<std::int64_t>({1, 2}),
                           rng.pick<std::int64_t>({3, 16, 64}), group};
    const AttentionCase c = attention_case(rng, s);
    const Where at{"attention", be.name, attention_shape_text(s)};
    const AttentionForwardGot got = run_attention_forward(be, c);
    const AttentionForwardWant want = attention_forward_reference(c);
    EXPECT_EQ(check(at, "forward out", got.out, want.out, s.heads * s.head_dim), "");
    EXPECT_EQ(check(at, "forward att", got.att, want.att, s.seq), "");
    const std::vector<float> att = rounded(want.att);
    EXPECT_EQ(check(at, "backward dqkv", run_attention_backward(be, c, att), attention_backward_reference(c, att),
                    s.qkv_row()),
              "");
  }
}

TEST_P(BackendOps, AttentionGpt2Heads) {
  Rng rng(114);
  expect_attention(be(), rng, 1);
}

TEST_P(BackendOps, AttentionGroupedQuery) {
  Rng rng(115);
  expect_attention(be(), rng, 2);
}

// Vocabulary shards: valid columns of every size, with and without padding.
constexpr std::int64_t kValid[] = {1, 3, 17, 64, 65, 1001};

TEST_P(BackendOps, CrossEntropyLocalMaxAndSums) {
  Rng rng(116);
  for (const std::int64_t valid : kValid) {
    const LogitCase c = logit_case(rng, rng.pick(kRows), valid, rng.pick({0, 1, 7}));
    const LogitShape& s = c.shape;
    const Where at = where("crossentropy", c.shape_text());
    Buffer logits = be().put(c.logits), row_max = be().put(nans(s.rows));
    crossentropy_local_max(*be().ctx, row_max.data(), logits.data(), s);
    EXPECT_EQ(check(at, "local_max row_max", be().get(row_max), local_max_reference(c)), "");
    const Buffer target = be().put(c.target), group_max = be().put(c.row_max);
    Buffer sums = be().put(nans(2 * s.rows));
    crossentropy_local_sums(*be().ctx, sums.data(), logits.data(), as_cols(target), group_max.data(), s);
    const SumsWant want = local_sums_reference(c);
    EXPECT_EQ(check(at, "local_sums sums", be().get(sums), want.sums), "");
    // The padding columns are left for finish (which zeroes them).
    EXPECT_EQ(check(at, "local_sums exps (valid columns)", valid_columns(be().get(logits), s), want.exps, s.valid), "");
  }
}

TEST_P(BackendOps, CrossEntropyFinish) {
  Rng rng(117);
  for (const std::int64_t valid : kValid) {
    const LogitCase c = logit_case(rng, rng.pick(kRows), valid, rng.pick({0, 1, 7}));
    const LogitShape& s = c.shape;
    const FinishInputs in = finish_inputs(rng, c);
    const Buffer target = be().put(c.target), row_max = be().put(c.row_max), sums = be().put(in.sums);
    Buffer logits = be().put(in.exps), losses = be().put(nans(s.rows));
    crossentropy_finish(*be().ctx, losses.data(), logits.data(), as_cols(target), row_max.data(), sums.data(),
                        c.dloss_scale, s);
    const LossWant want = finish_reference(c, in);
    const Where at = where("crossentropy_finish", c.shape_text());
    EXPECT_EQ(check(at, "losses", be().get(losses), want.losses), "");
    EXPECT_EQ(check(at, "dlogits", be().get(logits), want.dlogits, s.cols), "");
  }
}

TEST_P(BackendOps, CrossEntropyLocal) {
  Rng rng(118);
  for (const std::int64_t valid : kValid) {
    const LogitCase c = logit_case(rng, rng.pick(kRows), valid, rng.pick({0, 1, 7}));
    const LogitShape& s = c.shape;
    const Buffer target = be().put(c.target);
    Buffer logits = be().put(c.logits), losses = be().put(nans(s.rows)), scratch = be().put(nans(2 * s.rows));
    crossentropy_local(*be().ctx, losses.data(), logits.data(), as_cols(target), scratch.data(), c.dloss_scale, s);
    const LossWant want = local_reference(c);
    const Where at = where("crossentropy_local", c.shape_text());
    EXPECT_EQ(check(at, "losses", be().get(losses), want.losses), "");
    EXPECT_EQ(check(at, "dlogits", be().get(logits), want.dlogits, s.cols), "");
  }
}

TEST_P(BackendOps, AdamW) {
  Rng rng(119);
  for (const std::int64_t count : {1, 17, 65, 1000, 40001}) {  // 40001: past the CPU's 32768 grain
    const AdamWCase c = adamw_case(rng, count);
    Buffer param = be().put(c.param), m = be().put(c.m), v = be().put(c.v);
    const Buffer grad = be().put(c.grad);
    adamw_update(*be().ctx, param.data(), grad.data(), m.data(), v.data(), c.count, c.step);
    const AdamWWant want = adamw_reference(c);
    const Where at = where("adamw_update", c.shape());
    EXPECT_EQ(check(at, "param", be().get(param), want.param), "");
    EXPECT_EQ(check(at, "m", be().get(m), want.m), "");
    EXPECT_EQ(check(at, "v", be().get(v), want.v), "");
  }
}

// ---- The checker rejects broken results (on the CPU) --------------------------

Backend cpu_backend(Context& ctx) { return {"cpu", &ctx}; }

// A gemm whose result passes, for the broken variants below.
struct PassingGemm {
  GemmCase c;
  std::vector<float> got;
  Want want;
};

PassingGemm passing_gemm(Context& ctx, bool trans_a, std::int64_t m, std::int64_t k_out) {
  Rng rng(201);
  PassingGemm g{gemm_case(rng, trans_a, false, m, k_out, 17, 0, 0.5f), {}, Want()};
  g.got = run_gemm(cpu_backend(ctx), g.c);
  g.want = gemm_reference(g.c);
  return g;
}

TEST(BackendChecks, RejectsOneElementOffByTwiceItsBound) {
  Context ctx(ThreadSetup{.threads = 2});
  PassingGemm g = passing_gemm(ctx, false, 5, 17);
  const Where at{"gemm", "cpu", g.c.shape()};
  ASSERT_EQ(check(at, "c", g.got, g.want), "");
  const std::size_t e = 23;
  ASSERT_GT(g.want.bound[e], 0.0);
  const double away = g.got[e] >= g.want.value[e] ? 1.0 : -1.0;
  g.got[e] = static_cast<float>(g.got[e] + away * 2.0 * g.want.bound[e]);
  const std::string failure = check(at, "c", g.got, g.want, g.c.ldc);
  EXPECT_NE(failure.find("gemm on cpu (m 5, k_out 17, inner 17"), std::string::npos) << failure;
  EXPECT_NE(failure.find("c[23] (row 1, col 6): got"), std::string::npos) << failure;
  EXPECT_NE(failure.find("bound"), std::string::npos) << failure;
  EXPECT_NE(failure.find("1 of 85 elements"), std::string::npos) << failure;
}

TEST(BackendChecks, RejectsAnUnwrittenElement) {
  Context ctx(ThreadSetup{.threads = 2});
  PassingGemm g = passing_gemm(ctx, false, 5, 17);
  g.got[84] = kNaN;  // what a kernel leaves when it skips the last element of a NaN-poisoned output
  const std::string failure = check({"gemm", "cpu", g.c.shape()}, "c", g.got, g.want);
  EXPECT_NE(failure.find("c[84]: got nan"), std::string::npos) << failure;
  // And a whole output never written.
  Rng rng(202);
  const LinearCase c = linear_case(rng, 5, 3, 17, WeightLayout::kOutIn);
  EXPECT_NE(check({"matmul_forward", "cpu", c.shape()}, "out", nans(c.n * c.out), matmul_forward_reference(c)), "");
}

TEST(BackendChecks, RejectsATransposedGemm) {
  Context ctx(ThreadSetup{.threads = 2});
  const PassingGemm g = passing_gemm(ctx, true, 17, 17);  // square: a transposed result has the right size
  const Where at{"gemm", "cpu", g.c.shape()};
  ASSERT_EQ(check(at, "c", g.got, g.want), "");
  std::vector<float> transposed(g.got.size());
  for (std::int64_t i = 0; i < 17; ++i)
    for (std::int64_t j = 0; j < 17; ++j) transposed[i * 17 + j] = g.got[j * 17 + i];
  EXPECT_NE(check(at, "c", transposed, g.want), "");
  // The same data multiplied without the transpose of a.
  GemmCase untransposed = g.c;
  untransposed.trans_a = false;
  EXPECT_NE(check(at, "c", run_gemm(cpu_backend(ctx), untransposed), g.want), "");
}

// A float layernorm with the given eps, as a kernel with a wrong constant would compute it.
std::vector<float> layernorm_with_eps(const NormCase& c, float eps) {
  std::vector<float> out(c.inp.size());
  for (std::int64_t i = 0; i < c.n; ++i) {
    const float* x = c.inp.data() + i * c.dim;
    float mean = 0.0f, var = 0.0f;
    for (std::int64_t j = 0; j < c.dim; ++j) mean += x[j];
    mean /= static_cast<float>(c.dim);
    for (std::int64_t j = 0; j < c.dim; ++j) var += (x[j] - mean) * (x[j] - mean);
    var /= static_cast<float>(c.dim);
    const float s = 1.0f / std::sqrt(var + eps);
    for (std::int64_t j = 0; j < c.dim; ++j) out[i * c.dim + j] = (x[j] - mean) * s * c.weight[j] + c.bias[j];
  }
  return out;
}

TEST(BackendChecks, RejectsALayerNormWithTheWrongEps) {
  Rng rng(203);
  for (const std::int64_t dim : {3, 64, 65}) {
    const NormCase c = norm_case(rng, 5, dim);
    const Want want = layernorm_forward_reference(c).out;
    const Where at{"layernorm_forward", "cpu", c.shape()};
    EXPECT_EQ(check(at, "out", layernorm_with_eps(c, 1e-5f), want), "");  // the right eps passes
    EXPECT_NE(check(at, "out", layernorm_with_eps(c, 1e-6f), want), "");
    EXPECT_NE(check(at, "out", layernorm_with_eps(c, 1e-4f), want), "");
  }
  // The reference's own eps is what the kernel uses: the CPU op fails a reference made with another.
  Context ctx(ThreadSetup{.threads = 2});
  const NormCase c = norm_case(rng, 5, 65);
  const LayerNormForwardGot got = run_layernorm_forward(cpu_backend(ctx), c);
  EXPECT_NE(check({"layernorm_forward", "cpu", c.shape()}, "out", got.out, layernorm_forward_reference(c, 1e-6).out), "");
}

// A backward that overwrote instead of accumulating (or the reverse) fails.
TEST(BackendChecks, RejectsOverwriteForAccumulate) {
  Context ctx(ThreadSetup{.threads = 2});
  Rng rng(204);
  LinearCase c = linear_case(rng, 5, 17, 3, WeightLayout::kInOut);
  apply_into(c, {Into::kAdd, Into::kAdd});
  const LinearBackwardWant want = matmul_backward_reference(c);
  LinearCase overwriting = c;
  overwriting.into = {Into::kOverwrite, Into::kOverwrite};
  const LinearBackwardGot got = run_matmul_backward(cpu_backend(ctx), overwriting);
  const Where at{"matmul_backward", "cpu", c.shape()};
  EXPECT_NE(check(at, "dinp", got.dinp, want.dinp), "");
  EXPECT_NE(check(at, "dweight", got.dweight, want.dweight), "");
  // dbias always accumulates: the same call passes there.
  EXPECT_EQ(check(at, "dbias", got.dbias, want.dbias), "");
}

// Exact elements (cross-entropy's padding columns, attention's masked
// triangle) reject any nonzero value, however small.
TEST(BackendChecks, RejectsANonzeroPaddingColumnOrMaskedProbability) {
  Context ctx(ThreadSetup{.threads = 2});
  Rng rng(205);
  const LogitCase c = logit_case(rng, 5, 17, 7);
  const Buffer target = cpu_backend(ctx).put(c.target);
  std::vector<float> logits = c.logits, losses(5), scratch(10);
  crossentropy_local(ctx, losses.data(), logits.data(), as_cols(target), scratch.data(), c.dloss_scale, c.shape);
  const LossWant want = local_reference(c);
  const Where at{"crossentropy_local", "cpu", c.shape_text()};
  ASSERT_EQ(check(at, "dlogits", logits, want.dlogits, c.shape.cols), "");
  logits[2 * 24 + 20] = 1e-30f;  // row 2, padding column 20
  EXPECT_NE(check(at, "dlogits", logits, want.dlogits, c.shape.cols).find("(row 2, col 20): got 1e-30"),
            std::string::npos);

  const AttentionCase a = attention_case(rng, {1, 5, 2, 16, 1});
  AttentionForwardGot got = run_attention_forward(cpu_backend(ctx), a);
  const AttentionForwardWant att_want = attention_forward_reference(a);
  const Where att_at{"attention", "cpu", attention_shape_text(a.s)};
  ASSERT_EQ(check(att_at, "forward att", got.att, att_want.att), "");
  got.att[1 * 25 + 0 * 5 + 3] = 1e-30f;  // head 1, row 0, key 3: above the diagonal
  EXPECT_NE(check(att_at, "forward att", got.att, att_want.att), "");
}

TEST(BackendChecks, RejectsAResultOfTheWrongSize) {
  Want want(3);
  for (std::size_t i = 0; i < 3; ++i) want.exact(i, 0.0);
  EXPECT_EQ(check({"zero", "cpu", "count 3"}, "x", {0.0f, 0.0f}, want), "zero on cpu (count 3): x has 2 elements, want 3");
}

}  // namespace
}  // namespace ntp::tensor

#include "train/grad_norm.h"

#include <cmath>
#include <limits>
#include <vector>

#include "tensor/adamw.h"

namespace ntp::train {
namespace {

constexpr std::int64_t kReplicatedChunk = 4096;
// Above this squared norm per rank (a norm of about 2.7e8, a diverged run)
// the fixed-point sum could overflow once 72 ranks' parts are added: the norm
// is then reported as non-finite.
constexpr double kMaxRankSquares = 0x1p56;

// Adds one piece; the double `approx` watches the range.
void add_piece(double squares, NormPart& part, double& approx) {
  if (!std::isfinite(squares)) {
    part.overflow = true;
    return;
  }
  approx += squares;
  if (approx >= kMaxRankSquares) {
    part.overflow = true;
    return;
  }
  part.fixed += static_cast<Fixed128>(std::ldexp(squares, 64));
}

}  // namespace

void NormPart::add(const NormPart& other) {
  fixed += other.fixed;
  overflow = overflow || other.overflow;
}

void NormPart::write(std::int64_t* out) const {
  out[0] = static_cast<std::int64_t>(static_cast<std::uint64_t>(fixed));
  out[1] = static_cast<std::int64_t>(static_cast<std::uint64_t>(fixed >> 64));
  out[2] = overflow ? 1 : 0;
}

NormPart NormPart::read(const std::int64_t* in) {
  NormPart p;
  p.fixed = (static_cast<Fixed128>(static_cast<std::uint64_t>(in[1])) << 64) |
            static_cast<std::uint64_t>(in[0]);
  p.overflow = in[2] != 0;
  return p;
}

double NormPart::norm() const {
  if (overflow) return std::numeric_limits<double>::infinity();
  const double high = std::ldexp(static_cast<double>(static_cast<std::uint64_t>(fixed >> 64)), 0);
  const double low = std::ldexp(static_cast<double>(static_cast<std::uint64_t>(fixed)), -64);
  return std::sqrt(high + low);
}

NormPart grad_norm_part(const model::ParameterLayout& layout, std::span<const float> grads_span,
                        bool count_replicated, tensor::Context& ctx) {
  const float* grads = grads_span.data();
  NormPart total;
  double approx = 0;
  std::vector<double> squares;
  for (const model::TensorSpec& spec : layout.tensors()) {
    const bool replicated = spec.kind == model::UnitKind::kReplicated;
    if ((replicated && !count_replicated) || layout.is_tied_copy(spec)) continue;  // a tied copy: the first stage's
    const std::int64_t piece = replicated ? kReplicatedChunk : spec.unit_size;
    // Each piece is summed serially (the pool reads several at once), and
    // the fixed-point parts add exactly: the thread schedule cannot change
    // the result.
    squares.resize(static_cast<std::size_t>((spec.count + piece - 1) / piece));
    tensor::sum_squares_pieces(ctx, grads + spec.offset, spec.count, piece, squares.data());
    for (double s : squares) add_piece(s, total, approx);
  }
  if (approx >= kMaxRankSquares) total.overflow = true;
  return total;
}

}  // namespace ntp::train

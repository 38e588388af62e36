// SVG line charts (see svg.h).
#include "sim/svg.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace ntp::sim {
namespace {

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#8c564b", "#e377c2", "#17becf"};

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  double step = 0;  // between ticks, once nice() rounded the range to it
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about 5 ticks.
double tick_step(double span) {
  const double raw = span / 5.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1.0 : norm < 3.5 ? 2.0 : norm < 7.5 ? 5.0 : 10.0) * mag;
}

Range nice(Range r) {
  if (r.empty()) return {0.0, 1.0, 0.2};
  if (r.hi - r.lo < 1e-12) {
    // A flat line: a band around it, from zero when it is not negative (a
    // time or a count that never changed gets no negative axis).
    const double pad = std::max(std::abs(r.hi) * 0.05, 1e-3);
    r.lo = r.lo >= 0 ? 0.0 : r.lo - pad;
    r.hi += pad;
  }
  // The ticks keep this step: taken again from the rounded range it could
  // be coarser (0..1800 by 200 asks for 500s) and leave the top unlabelled.
  const double step = tick_step(r.hi - r.lo);
  return {std::floor(r.lo / step) * step, std::ceil(r.hi / step) * step, step};
}

// The ticks of a nice() range, each computed (not summed) so the last is hi.
std::vector<double> ticks(const Range& r) {
  std::vector<double> out;
  const auto n = static_cast<int>(std::llround((r.hi - r.lo) / r.step));
  for (int i = 0; i <= n; ++i) out.push_back(r.lo + i * r.step);
  return out;
}

std::string number(double v) {
  std::ostringstream os;
  os.precision(6);
  os << (std::abs(v) < 1e-12 ? 0.0 : v);
  return os.str();
}

class Plot {
 public:
  Plot(const Chart& c, Range x, Range y, Range y2)
      : c_(c), x_(x), y_(y), y2_(y2), left_(72), right_(c.width - (y2.empty() ? 24 : 72)),
        top_(40), bottom_(c.height - 92) {}

  double px(double v) const { return left_ + (v - x_.lo) / (x_.hi - x_.lo) * (right_ - left_); }
  double py(double v, bool right_axis) const {
    const Range& r = right_axis ? y2_ : y_;
    return bottom_ - (v - r.lo) / (r.hi - r.lo) * (bottom_ - top_);
  }

  void axes(std::ostringstream& os) const {
    os << "<rect x='" << left_ << "' y='" << top_ << "' width='" << right_ - left_
       << "' height='" << bottom_ - top_ << "' fill='none' stroke='#444'/>\n";
    for (const double v : ticks(x_)) {
      os << "<line x1='" << px(v) << "' y1='" << bottom_ << "' x2='" << px(v) << "' y2='" << top_
         << "' stroke='#ddd'/>\n<text x='" << px(v) << "' y='" << bottom_ + 16
         << "' text-anchor='middle'>" << number(v) << "</text>\n";
    }
    y_ticks(os, y_, false);
    if (!y2_.empty()) y_ticks(os, y2_, true);
    os << "<text x='" << (left_ + right_) / 2 << "' y='" << bottom_ + 36
       << "' text-anchor='middle'>" << escape_xml(c_.x_label) << "</text>\n";
    os << "<text transform='translate(16," << (top_ + bottom_) / 2
       << ") rotate(-90)' text-anchor='middle'>" << escape_xml(c_.y_label) << "</text>\n";
    if (!y2_.empty()) {
      os << "<text transform='translate(" << c_.width - 12 << "," << (top_ + bottom_) / 2
         << ") rotate(90)' text-anchor='middle'>" << escape_xml(c_.y2_label) << "</text>\n";
    }
    os << "<text x='" << c_.width / 2 << "' y='24' text-anchor='middle' font-size='15'>"
       << escape_xml(c_.title) << "</text>\n";
  }

  void y_ticks(std::ostringstream& os, const Range& r, bool right_axis) const {
    for (const double v : ticks(r)) {
      const double y = py(v, right_axis);
      if (!right_axis) {
        os << "<line x1='" << left_ << "' y1='" << y << "' x2='" << right_ << "' y2='" << y
           << "' stroke='#ddd'/>\n<text x='" << left_ - 6 << "' y='" << y + 4
           << "' text-anchor='end'>" << number(v) << "</text>\n";
      } else {
        os << "<text x='" << right_ + 6 << "' y='" << y + 4 << "' text-anchor='start'>"
           << number(v) << "</text>\n";
      }
    }
  }

  void series(std::ostringstream& os, const Series& s, const char* color) const {
    os << "<polyline fill='none' stroke='" << color << "' stroke-width='1.8'"
       << (s.right_axis ? " stroke-dasharray='5,3'" : "") << " points='";
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (s.steps && i > 0) os << px(s.x[i]) << "," << py(s.y[i - 1], s.right_axis) + s.offset_px << " ";
      os << px(s.x[i]) << "," << py(s.y[i], s.right_axis) + s.offset_px << " ";
    }
    os << "'/>\n";
    if (!s.markers) return;
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      os << "<circle cx='" << px(s.x[i]) << "' cy='" << py(s.y[i], s.right_axis) + s.offset_px
         << "' r='3' fill='" << color << "'/>\n";
    }
  }

  void legend(std::ostringstream& os) const {
    const double row = 18;
    for (std::size_t i = 0; i < c_.series.size(); ++i) {
      const double x = left_ + static_cast<double>(i % 4) * (right_ - left_) / 4;
      const double y = bottom_ + 56 + static_cast<double>(i / 4) * row;
      os << "<line x1='" << x << "' y1='" << y - 4 << "' x2='" << x + 22 << "' y2='" << y - 4
         << "' stroke='" << kColors[i % 8] << "' stroke-width='3'/>\n<text x='" << x + 28
         << "' y='" << y << "'>" << escape_xml(c_.series[i].name) << "</text>\n";
    }
  }

 private:
  const Chart& c_;
  Range x_, y_, y2_;
  double left_, right_, top_, bottom_;
};

}  // namespace

std::string escape_xml(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_svg(const Chart& chart) {
  Range x, y, y2;
  for (const Series& s : chart.series) {
    if (s.x.size() != s.y.size()) {
      throw std::invalid_argument("svg: series '" + s.name + "' has x and y of different lengths");
    }
    for (const double v : s.x) x.add(v);
    for (const double v : s.y) (s.right_axis ? y2 : y).add(v);
  }
  const Plot plot(chart, nice(x), nice(y), y2.empty() ? Range{} : nice(y2));
  std::ostringstream os;
  os << "<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' width='"
     << chart.width << "' height='" << chart.height << "' viewBox='0 0 " << chart.width << " "
     << chart.height << "' font-family='sans-serif' font-size='12'>\n"
     << "<rect width='100%' height='100%' fill='white'/>\n";
  plot.axes(os);
  for (std::size_t i = 0; i < chart.series.size(); ++i) plot.series(os, chart.series[i], kColors[i % 8]);
  plot.legend(os);
  os << "</svg>\n";
  return os.str();
}

}  // namespace ntp::sim

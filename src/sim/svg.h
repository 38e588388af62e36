#pragma once
// A small SVG line-chart writer for the simulator's reports: axes with
// rounded ticks, one polyline per series (optionally as steps), a legend.
// Output is a self-contained SVG 1.1 document.
#include <string>
#include <vector>

namespace ntp::sim {

struct Series {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;
  bool steps = false;     // draw as a step function (value holds until the next x)
  bool markers = false;   // draw a dot at each point
  bool right_axis = false;  // plot against the right-hand y axis
  // Drawn this many pixels lower: lines of equal values (the TP of two
  // healthy replicas) side by side instead of one hiding the other.
  double offset_px = 0;
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::string y2_label;   // right axis label (when a series uses it)
  std::vector<Series> series;
  double width = 760;
  double height = 440;
};

// Renders the chart; throws std::invalid_argument when a series' x and y
// lengths differ. Every axis ends on a labelled tick.
std::string render_svg(const Chart& chart);

// `s` with the characters XML gives meaning to (< > & ") as entities: text
// of a chart, or of the page around it.
std::string escape_xml(const std::string& s);

}  // namespace ntp::sim

#pragma once
// A small SVG line-chart writer for the what-if sweeps: one or more panels side by side, each with
// its own y axis, sharing the x values; one polyline per series, a legend, tick labels at the data
// points. No dependencies; the output opens in any browser.

#include <string>
#include <vector>

namespace cpt::core {

struct ChartSeries {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;  // REQUIRES: y.size() == x.size()
};

struct ChartPanel {
  std::string y_label;
  std::vector<ChartSeries> series;
};

// REQUIRES: at least one panel; x values finite. Series with no points are skipped.
std::string line_chart_svg(const std::string& title, const std::string& x_label, const std::vector<ChartPanel>& panels);

}  // namespace cpt::core

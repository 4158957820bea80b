#include "core/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/check.h"

namespace cpt::core {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  if (std::fabs(v) >= 1000 || v == std::floor(v)) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  }
  return buf;
}

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"};
constexpr double kPanelWidth = 360, kPanelHeight = 260, kLeft = 60, kRight = 15, kTop = 52, kBottom = 50;

const char* color_of(std::size_t series) {
  return kColors[series % (sizeof kColors / sizeof *kColors)];
}

// The x axis every panel shares: log scale when the values span more than a factor of 8 and are
// positive.
struct XScale {
  bool log = false;
  double x0 = 0, x1 = 1;  // the mapped range
  [[nodiscard]] double map(double x) const { return log ? std::log(x) : x; }
};

XScale shared_x_scale(const std::vector<ChartPanel>& panels) {
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
  for (const auto& p : panels) {
    for (const auto& se : p.series) {
      CPT_CHECK(se.x.size() == se.y.size(), "series ", se.name, " has ", se.x.size(), " x and ", se.y.size(), " y");
      for (double x : se.x) {
        xmin = std::min(xmin, x);
        xmax = std::max(xmax, x);
      }
    }
  }
  if (!std::isfinite(xmin)) xmin = 0, xmax = 1;
  XScale scale;
  scale.log = xmin > 0 && xmax / xmin > 8;
  scale.x0 = scale.map(xmin);
  scale.x1 = std::max(scale.map(xmax), scale.x0 + 1e-12);
  return scale;
}

// One legend for all panels (the series are the same in each), under the title.
void write_legend(std::ostringstream& s, const ChartPanel& panel) {
  double lx = 20;
  for (std::size_t si = 0; si < panel.series.size(); ++si) {
    const auto& name = panel.series[si].name;
    s << "<rect x=\"" << lx << "\" y=\"27\" width=\"14\" height=\"4\" fill=\"" << color_of(si) << "\"/>\n";
    s << "<text x=\"" << lx + 18 << "\" y=\"33\">" << escape(name) << "</text>\n";
    lx += 30 + 6.5 * static_cast<double>(name.size());
  }
}

// Panel `index`: its frame, y ticks from 0 (or below) to its largest value, the shared x ticks and
// label, its y label, and each series as a line with its points.
void write_panel(std::ostringstream& s, const ChartPanel& p, std::size_t index, const XScale& scale,
                 const std::string& x_label) {
  const double ox = kPanelWidth * static_cast<double>(index);
  double ymin = std::numeric_limits<double>::infinity(), ymax = -ymin;
  for (const auto& se : p.series) {
    for (double y : se.y) {
      ymin = std::min(ymin, y);
      ymax = std::max(ymax, y);
    }
  }
  if (!std::isfinite(ymin)) ymin = 0, ymax = 1;
  ymin = std::min(0.0, ymin);
  if (ymax <= ymin) ymax = ymin + 1;
  const double pw = kPanelWidth - kLeft - kRight, ph = kPanelHeight - kTop - kBottom + 40;
  auto px = [&](double x) { return ox + kLeft + (scale.map(x) - scale.x0) / (scale.x1 - scale.x0) * pw; };
  auto py = [&](double y) { return kTop + ph - (y - ymin) / (ymax - ymin) * ph; };
  s << "<g>\n<rect x=\"" << ox + kLeft << "\" y=\"" << kTop << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#999\"/>\n";
  for (int t = 0; t <= 4; ++t) {
    const double y = ymin + (ymax - ymin) * t / 4;
    s << "<text x=\"" << ox + kLeft - 4 << "\" y=\"" << py(y) + 4 << "\" text-anchor=\"end\">" << num(y) << "</text>\n";
  }
  std::vector<double> ticks;
  for (const auto& se : p.series) ticks.insert(ticks.end(), se.x.begin(), se.x.end());
  std::sort(ticks.begin(), ticks.end());
  ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());
  for (double x : ticks) {
    s << "<text x=\"" << px(x) << "\" y=\"" << kTop + ph + 14 << "\" text-anchor=\"middle\">" << num(x) << "</text>\n";
  }
  s << "<text x=\"" << ox + kLeft + pw / 2 << "\" y=\"" << kTop + ph + 30 << "\" text-anchor=\"middle\">"
    << escape(x_label) << (scale.log ? " (log)" : "") << "</text>\n";
  s << "<text x=\"" << ox + 14 << "\" y=\"" << kTop + ph / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 "
    << ox + 14 << " " << kTop + ph / 2 << ")\">" << escape(p.y_label) << "</text>\n";
  for (std::size_t si = 0; si < p.series.size(); ++si) {
    const auto& se = p.series[si];
    if (se.x.empty()) continue;
    s << "<polyline fill=\"none\" stroke=\"" << color_of(si) << "\" stroke-width=\"2\" points=\"";
    for (std::size_t i = 0; i < se.x.size(); ++i) s << (i ? " " : "") << px(se.x[i]) << "," << py(se.y[i]);
    s << "\"/>\n";
    for (std::size_t i = 0; i < se.x.size(); ++i) {
      s << "<circle cx=\"" << px(se.x[i]) << "\" cy=\"" << py(se.y[i]) << "\" r=\"3\" fill=\"" << color_of(si)
        << "\"/>\n";
    }
  }
  s << "</g>\n";
}

}  // namespace

std::string line_chart_svg(const std::string& title, const std::string& x_label,
                           const std::vector<ChartPanel>& panels) {
  CPT_CHECK(!panels.empty(), "a chart needs a panel");
  const double width = kPanelWidth * static_cast<double>(panels.size());
  const double height = kPanelHeight + 40;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s << "<text x=\"" << width / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">" << escape(title)
    << "</text>\n";
  write_legend(s, panels.front());
  const XScale scale = shared_x_scale(panels);
  for (std::size_t i = 0; i < panels.size(); ++i) write_panel(s, panels[i], i, scale, x_label);
  s << "</svg>\n";
  return s.str();
}

}  // namespace cpt::core

// Plain SVG charts (see svg_chart.h).
#include "plot/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/str_format.h"

namespace kvserve::plot {
namespace {

constexpr double kPanelWidth = 520;
constexpr double kPanelHeight = 380;
constexpr double kTitleHeight = 36;
constexpr double kLeft = 70, kRight = 20, kTop = 40, kBottom = 90;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

// Text for SVG: HtmlEscape, without the control characters XML 1.0 does not allow.
std::string Escape(const std::string& s) {
  std::string kept;
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x20 || c == '\n' || c == '\t') kept += c;
  }
  return HtmlEscape(kept);
}

std::string Number(double v) {
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-3)) return StrFormat("%.2g", v);
  if (a >= 100 || v == std::floor(v)) return StrFormat("%.0f", v);
  if (a >= 10) return StrFormat("%.1f", v);
  return StrFormat("%.2f", v);
}

// About five round ticks covering [lo, hi].
std::vector<double> LinearTicks(double lo, double hi) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(t);
  return ticks;
}

struct Frame {
  double x0, y0, width, height;  // the plot area
  double xmin, xmax, ymin, ymax;
  bool log_x = false;
  double X(double x) const {
    const double a = log_x ? std::log2(x) : x;
    const double lo = log_x ? std::log2(xmin) : xmin, hi = log_x ? std::log2(xmax) : xmax;
    return x0 + (hi > lo ? (a - lo) / (hi - lo) : 0.5) * width;
  }
  double Y(double y) const {
    return y0 + height - (ymax > ymin ? (y - ymin) / (ymax - ymin) : 0.5) * height;
  }
};

bool Usable(const std::pair<double, double>& p, bool log_x) {
  return std::isfinite(p.first) && std::isfinite(p.second) && (!log_x || p.first > 0);
}

void Axes(std::string* out, const Frame& f, const std::string& x_label, const std::string& y_label,
          const std::vector<double>& x_ticks, const std::vector<double>& y_ticks) {
  *out += StrFormat(
      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n",
      f.x0, f.y0, f.width, f.height);
  for (double t : y_ticks) {
    const double y = f.Y(t);
    *out += StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                      f.x0, y, f.x0 + f.width, y);
    *out += StrFormat("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n",
                      f.x0 - 6, y + 4, Escape(Number(t)).c_str());
  }
  for (double t : x_ticks) {
    const double x = f.X(t);
    *out += StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                      x, f.y0, x, f.y0 + f.height);
    *out += StrFormat("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n",
                      x, f.y0 + f.height + 16, Escape(Number(t)).c_str());
  }
  *out += StrFormat("<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n",
                    f.x0 + f.width / 2, f.y0 + f.height + 36, Escape(x_label).c_str());
  *out += StrFormat(
      "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
      f.x0 - 50, f.y0 + f.height / 2, f.x0 - 50, f.y0 + f.height / 2, Escape(y_label).c_str());
}

void Line(std::string* out, const LineChart& c, double left, double top) {
  Frame f{left + kLeft, top + kTop, kPanelWidth - kLeft - kRight, kPanelHeight - kTop - kBottom,
          std::numeric_limits<double>::max(), std::numeric_limits<double>::lowest(),
          std::numeric_limits<double>::max(), std::numeric_limits<double>::lowest(), c.log_x};
  for (const Series& s : c.series) {
    for (const auto& p : s.points) {
      if (!Usable(p, c.log_x)) continue;
      f.xmin = std::min(f.xmin, p.first);
      f.xmax = std::max(f.xmax, p.first);
      f.ymin = std::min(f.ymin, p.second);
      f.ymax = std::max(f.ymax, p.second);
    }
  }
  if (f.xmin > f.xmax) f.xmin = 1, f.xmax = 2, f.ymin = 0, f.ymax = 1;  // no data
  f.ymin = std::min(f.ymin, 0.0);
  const std::vector<double> y_ticks = LinearTicks(f.ymin, f.ymax);
  f.ymax = std::max(f.ymax, y_ticks.back());
  std::vector<double> x_ticks;
  if (c.log_x) {
    const int lo = static_cast<int>(std::floor(std::log2(f.xmin)));
    const int hi = static_cast<int>(std::ceil(std::log2(f.xmax)));
    const int step = std::max(1, (hi - lo + 6) / 7);
    for (int e = lo; e <= hi; e += step) {
      const double t = std::ldexp(1.0, e);
      if (t >= f.xmin && t <= f.xmax) x_ticks.push_back(t);
    }
  } else {
    x_ticks = LinearTicks(f.xmin, f.xmax);
    std::erase_if(x_ticks, [&](double t) { return t < f.xmin || t > f.xmax; });
  }
  *out += StrFormat("<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" text-anchor=\"middle\">%s</text>\n",
                    left + kPanelWidth / 2, top + 22, Escape(c.title).c_str());
  Axes(out, f, c.x_label, c.y_label, x_ticks, y_ticks);
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    const char* color = kColors[i % std::size(kColors)];
    std::string pts;
    for (const auto& p : s.points) {
      if (!Usable(p, c.log_x)) continue;
      pts += StrFormat("%.1f,%.1f ", f.X(p.first), f.Y(p.second));
    }
    *out += StrFormat("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"%s\"/>\n",
                      color, s.dashed ? " stroke-dasharray=\"6 4\"" : "", pts.c_str());
    const double ly = f.y0 + 14 + 16 * static_cast<double>(i);
    *out += StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                      "stroke-width=\"2\"%s/>\n",
                      f.x0 + 10, ly - 4, f.x0 + 30, ly - 4, color,
                      s.dashed ? " stroke-dasharray=\"6 4\"" : "");
    *out += StrFormat("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n", f.x0 + 36, ly,
                      Escape(s.name).c_str());
  }
}

void Bars(std::string* out, const BarChart& c, double left, double top) {
  Frame f{left + kLeft, top + kTop, kPanelWidth - kLeft - kRight, kPanelHeight - kTop - kBottom,
          0, 1, 0, 0, false};
  for (const Bar& b : c.bars) {
    if (std::isfinite(b.value)) f.ymax = std::max(f.ymax, b.value);
  }
  if (!(f.ymax > 0)) f.ymax = 1;
  const std::vector<double> y_ticks = LinearTicks(0, f.ymax * 1.1);
  f.ymax = y_ticks.back();
  *out += StrFormat("<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" text-anchor=\"middle\">%s</text>\n",
                    left + kPanelWidth / 2, top + 22, Escape(c.title).c_str());
  Axes(out, f, "", c.y_label, {}, y_ticks);
  const double n = static_cast<double>(std::max<size_t>(1, c.bars.size()));
  const double slot = f.width / n;
  for (size_t i = 0; i < c.bars.size(); ++i) {
    const Bar& b = c.bars[i];
    const double v = std::isfinite(b.value) ? std::max(0.0, b.value) : 0.0;
    const double x = f.x0 + slot * static_cast<double>(i) + slot * 0.15;
    const double y = f.Y(v);
    *out += StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
                      x, y, slot * 0.7, f.y0 + f.height - y, kColors[0]);
    if (!b.annotation.empty()) {
      *out += StrFormat("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n",
                        x + slot * 0.35, y - 4, Escape(b.annotation).c_str());
    }
    const double lx = x + slot * 0.35, ly = f.y0 + f.height + 14;
    *out += StrFormat(
        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\" "
        "transform=\"rotate(-30 %.1f %.1f)\">%s</text>\n",
        lx, ly, lx, ly, Escape(b.label).c_str());
  }
}

}  // namespace

std::string RenderSvg(const std::string& title, const std::vector<Panel>& panels) {
  const double width = kPanelWidth * static_cast<double>(std::max<size_t>(1, panels.size()));
  const double height = kPanelHeight + kTitleHeight;
  std::string out = StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.1f\" y=\"24\" font-size=\"16\" text-anchor=\"middle\">%s</text>\n",
      width, height, width, height, width / 2, Escape(title).c_str());
  for (size_t i = 0; i < panels.size(); ++i) {
    const double left = kPanelWidth * static_cast<double>(i);
    if (panels[i].is_bar) {
      Bars(&out, panels[i].bar, left, kTitleHeight);
    } else {
      Line(&out, panels[i].line, left, kTitleHeight);
    }
  }
  out += "</svg>\n";
  return out;
}

std::vector<std::pair<double, double>> CdfPoints(std::vector<double> values) {
  std::erase_if(values, [](double v) { return !std::isfinite(v); });
  std::sort(values.begin(), values.end());
  std::vector<std::pair<double, double>> points;
  const double n = static_cast<double>(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    points.emplace_back(values[i], static_cast<double>(i + 1) / n);
  }
  return points;
}

}  // namespace kvserve::plot

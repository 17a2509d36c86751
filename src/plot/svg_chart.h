// Plain SVG charts for the reports that are pictures (`kvserve sim --plot`, `kvserve plan
// --stack --plot`): line charts (linear or log2 x axis; a dashed series for a reference line)
// and bar charts, several panels side by side in one file a browser opens. No scripts, no
// external fonts or styles; every text is XML-escaped.
//
// Plain value types and pure functions; no state.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kvserve::plot {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite points are skipped
  bool dashed = false;
};

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;  // log2 x axis (x must be > 0; others are skipped)
  std::vector<Series> series;
};

struct Bar {
  std::string label;
  double value = 0.0;
  std::string annotation;  // drawn above the bar ("2.8x")
};

struct BarChart {
  std::string title;
  std::string y_label;
  std::vector<Bar> bars;
};

// One panel: a line chart or a bar chart.
struct Panel {
  LineChart line;
  BarChart bar;
  bool is_bar = false;
};

// The panels left to right in one SVG document, under `title`.
std::string RenderSvg(const std::string& title, const std::vector<Panel>& panels);

// The empirical distribution of `values` as CDF points (value, fraction <= value), sorted.
std::vector<std::pair<double, double>> CdfPoints(std::vector<double> values);

}  // namespace kvserve::plot

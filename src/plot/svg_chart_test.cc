// The SVG charts parse as XML (tinyxml2), carry one polyline per series and one rect per bar,
// escape their text, and survive empty and non-finite data.
#include "plot/svg_chart.h"

#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>
#include <tinyxml2.h>

namespace kvserve::plot {
namespace {

// Parses `svg`; counts elements named `name` anywhere below the root.
int Count(const tinyxml2::XMLElement* e, const std::string& name) {
  int n = name == e->Name();
  for (const tinyxml2::XMLElement* c = e->FirstChildElement(); c; c = c->NextSiblingElement()) {
    n += Count(c, name);
  }
  return n;
}

struct Parsed {
  tinyxml2::XMLDocument doc;
  const tinyxml2::XMLElement* root = nullptr;
};

void Parse(const std::string& svg, Parsed* p) {
  ASSERT_EQ(p->doc.Parse(svg.c_str()), tinyxml2::XML_SUCCESS) << p->doc.ErrorStr() << "\n" << svg;
  p->root = p->doc.RootElement();
  ASSERT_NE(p->root, nullptr);
  EXPECT_STREQ(p->root->Name(), "svg");
  EXPECT_STREQ(p->root->Attribute("xmlns"), "http://www.w3.org/2000/svg");
}

bool HasText(const tinyxml2::XMLElement* e, const std::string& text) {
  if (std::string(e->Name()) == "text" && e->GetText() && text == e->GetText()) return true;
  for (const tinyxml2::XMLElement* c = e->FirstChildElement(); c; c = c->NextSiblingElement()) {
    if (HasText(c, text)) return true;
  }
  return false;
}

TEST(SvgChart, LinesAndBarsParse) {
  Panel hit;
  hit.line = {"Hit rate vs capacity", "capacity (blocks)", "hit rate (%)", true,
              {{"bounded", {{1000, 10}, {2000, 20}, {8000, 35}}, false},
               {"never evicts", {{1000, 40}, {8000, 40}}, true}}};
  Panel cost;
  cost.is_bar = true;
  cost.bar = {"Cost stack", "$ per million output tokens",
              {{"contiguous", 5.7, "1.0x"}, {"+ paged", 2.0, "2.8x"}, {"+ fp8 <KV> & co", 1.1, "5.0x"}}};
  Parsed p;
  Parse(RenderSvg("A & B", {hit, cost}), &p);
  EXPECT_EQ(Count(p.root, "polyline"), 2);
  EXPECT_EQ(Count(p.root, "rect"), 1 + 1 + 1 + 3);  // background, 2 frames, 3 bars
  EXPECT_TRUE(HasText(p.root, "A & B"));
  EXPECT_TRUE(HasText(p.root, "+ fp8 <KV> & co"));  // escaped in the file, intact once parsed
  EXPECT_TRUE(HasText(p.root, "never evicts"));
  EXPECT_TRUE(HasText(p.root, "2.8x"));
  EXPECT_TRUE(HasText(p.root, "1024"));  // a log2 tick
}

TEST(SvgChart, EmptyAndNonFiniteDataStillParse) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Panel line;
  line.line = {"t", "x", "y", true, {{"s", {{0, 1}, {-1, 2}, {nan, 3}, {4, nan}}, false}, {"e", {}, false}}};
  Panel bars;
  bars.is_bar = true;
  bars.bar = {"b", "y", {{"nan", nan, ""}, {"neg", -3, ""}}};
  Parsed p;
  Parse(RenderSvg("", {line, bars}), &p);
  Parsed q;
  Parse(RenderSvg("nothing", {}), &q);
}

TEST(SvgChart, CdfPointsAreSortedFractions) {
  const auto cdf = CdfPoints({3, 1, std::nan(""), 2, 2});
  ASSERT_EQ(cdf.size(), 4u);
  EXPECT_EQ(cdf[0], (std::pair<double, double>{1, 0.25}));
  EXPECT_EQ(cdf[3], (std::pair<double, double>{3, 1.0}));
  EXPECT_TRUE(CdfPoints({}).empty());
}

}  // namespace
}  // namespace kvserve::plot

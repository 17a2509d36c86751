// Test helper: parses an SVG document with tinyxml2 and counts its elements by name. Header
// only; tests that include it link PkgConfig::TINYXML2.
#pragma once

#include <string>
#include <vector>

#include <tinyxml2.h>

namespace kvserve::plot::testing {

// Elements named `name` in `svg` (which must parse as XML), -1 if it does not parse.
inline int CountSvgElements(const std::string& svg, const std::string& name) {
  tinyxml2::XMLDocument doc;
  if (doc.Parse(svg.c_str()) != tinyxml2::XML_SUCCESS || doc.RootElement() == nullptr) return -1;
  int n = 0;
  std::vector<const tinyxml2::XMLElement*> stack = {doc.RootElement()};
  while (!stack.empty()) {
    const tinyxml2::XMLElement* e = stack.back();
    stack.pop_back();
    n += name == e->Name();
    for (const auto* c = e->FirstChildElement(); c; c = c->NextSiblingElement()) stack.push_back(c);
  }
  return n;
}

}  // namespace kvserve::plot::testing

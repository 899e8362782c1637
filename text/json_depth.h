// Nesting depth of parsed JSON, measured without recursion. nlohmann::json
// parses and destroys without recursion, but copies, dumps and compares
// recursively, and so does the template engine's conversion to its values:
// a request body of a few hundred KB of "[[[[..." overflows the stack of
// whatever walks it. Code that takes JSON from clients checks the depth
// first and refuses what is deeper than it can walk.
#ifndef SPAR_TEXT_JSON_DEPTH_H_
#define SPAR_TEXT_JSON_DEPTH_H_

#include <utility>
#include <vector>

namespace spar {

// Containers count one level each: a scalar is depth 0, [] and {} are 1,
// [[1]] is 2. Stops counting once `limit` is exceeded (returns limit + 1),
// so the cost is bounded by the part of the document it had to look at.
template <typename Json>
int JsonDepth(const Json& root, int limit) {
  if (!root.is_structured()) return 0;
  int deepest = 1;
  std::vector<std::pair<const Json*, int>> stack = {{&root, 1}};
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    if (depth > deepest) deepest = depth;
    if (deepest > limit) return limit + 1;
    for (const auto& child : *node) {
      if (child.is_structured()) stack.emplace_back(&child, depth + 1);
    }
  }
  return deepest;
}

}  // namespace spar

#endif  // SPAR_TEXT_JSON_DEPTH_H_

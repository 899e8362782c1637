#include "grammar/byte_dfa.h"

#include <deque>
#include <map>
#include <utility>

namespace spar::grammar {

int32_t ByteDfa::AddState(bool is_final) {
  std::array<int32_t, 256> row;
  row.fill(kDead);
  next.push_back(row);
  final.push_back(is_final);
  return size() - 1;
}

bool ByteDfa::Accepts(absl::string_view bytes) const {
  int32_t s = start;
  for (unsigned char c : bytes) {
    if (s == kDead) return false;
    s = next[s][c];
  }
  return s != kDead && final[s];
}

ByteDfa Trim(const ByteDfa& dfa) {
  const int32_t n = dfa.size();
  // Co-reachable: states from which a final state can be reached.
  std::vector<std::vector<int32_t>> preds(n);
  for (int32_t s = 0; s < n; ++s) {
    for (int32_t t : dfa.next[s]) {
      if (t != ByteDfa::kDead) preds[t].push_back(s);
    }
  }
  std::vector<bool> live(n, false);
  std::deque<int32_t> work;
  for (int32_t s = 0; s < n; ++s) {
    if (dfa.final[s]) {
      live[s] = true;
      work.push_back(s);
    }
  }
  while (!work.empty()) {
    const int32_t s = work.front();
    work.pop_front();
    for (int32_t p : preds[s]) {
      if (!live[p]) {
        live[p] = true;
        work.push_back(p);
      }
    }
  }
  ByteDfa out;
  std::vector<int32_t> id(n, ByteDfa::kDead);
  id[dfa.start] = out.AddState(dfa.final[dfa.start]);
  work.push_back(dfa.start);
  while (!work.empty()) {
    const int32_t s = work.front();
    work.pop_front();
    for (int b = 0; b < 256; ++b) {
      const int32_t t = dfa.next[s][b];
      if (t == ByteDfa::kDead || !live[t]) continue;
      if (id[t] == ByteDfa::kDead) {
        id[t] = out.AddState(dfa.final[t]);
        work.push_back(t);
      }
      out.next[id[s]][b] = id[t];
    }
  }
  return out;
}

ByteDfa Intersect(const ByteDfa& a, const ByteDfa& b) {
  ByteDfa out;
  std::map<std::pair<int32_t, int32_t>, int32_t> ids;
  std::deque<std::pair<int32_t, int32_t>> work;
  auto id_of = [&](int32_t x, int32_t y) {
    auto [it, fresh] = ids.emplace(std::make_pair(x, y), 0);
    if (fresh) {
      it->second = out.AddState(a.final[x] && b.final[y]);
      work.emplace_back(x, y);
    }
    return it->second;
  };
  out.start = id_of(a.start, b.start);
  while (!work.empty()) {
    const auto [x, y] = work.front();
    work.pop_front();
    const int32_t s = ids.at({x, y});
    for (int c = 0; c < 256; ++c) {
      const int32_t tx = a.next[x][c], ty = b.next[y][c];
      if (tx == ByteDfa::kDead || ty == ByteDfa::kDead) continue;
      const int32_t t = id_of(tx, ty);
      out.next[s][c] = t;
    }
  }
  return Trim(out);
}

ByteDfa Utf8Text(absl::string_view excluded_ascii) {
  ByteDfa d;
  enum : int32_t { kBoundary, kCont1, kCont2, kCont3, kAfterE0, kAfterED, kAfterF0, kAfterF4 };
  d.AddState(true);
  for (int i = 1; i <= kAfterF4; ++i) d.AddState(false);
  auto range = [&](int32_t from, int lo, int hi, int32_t to) {
    for (int c = lo; c <= hi; ++c) d.next[from][c] = to;
  };
  range(kBoundary, 0x00, 0x7F, kBoundary);
  for (unsigned char c : excluded_ascii) d.next[kBoundary][c] = ByteDfa::kDead;
  range(kBoundary, 0xC2, 0xDF, kCont1);
  range(kBoundary, 0xE0, 0xE0, kAfterE0);
  range(kBoundary, 0xE1, 0xEC, kCont2);
  range(kBoundary, 0xED, 0xED, kAfterED);
  range(kBoundary, 0xEE, 0xEF, kCont2);
  range(kBoundary, 0xF0, 0xF0, kAfterF0);
  range(kBoundary, 0xF1, 0xF3, kCont3);
  range(kBoundary, 0xF4, 0xF4, kAfterF4);
  range(kCont1, 0x80, 0xBF, kBoundary);
  range(kCont2, 0x80, 0xBF, kCont1);
  range(kCont3, 0x80, 0xBF, kCont2);
  range(kAfterE0, 0xA0, 0xBF, kCont1);
  range(kAfterED, 0x80, 0x9F, kCont1);
  range(kAfterF0, 0x90, 0xBF, kCont2);
  range(kAfterF4, 0x80, 0x8F, kCont2);
  return d;
}

namespace {

// Aho-Corasick over `patterns`: state = trie node, with complete goto
// transitions; hit[s] = index of the pattern that ends at s (its own or a
// suffix's), -1 for none.
struct PatternAutomaton {
  std::vector<std::array<int32_t, 256>> go;
  std::vector<int32_t> hit;

  explicit PatternAutomaton(const std::vector<std::string>& patterns) {
    std::vector<int32_t> fail;
    auto add = [&] {
      std::array<int32_t, 256> row;
      row.fill(-1);
      go.push_back(row);
      hit.push_back(-1);
      fail.push_back(0);
      return static_cast<int32_t>(go.size() - 1);
    };
    add();
    for (size_t p = 0; p < patterns.size(); ++p) {
      int32_t s = 0;
      for (unsigned char c : patterns[p]) {
        if (go[s][c] < 0) {
          const int32_t t = add();
          go[s][c] = t;
        }
        s = go[s][c];
      }
      if (hit[s] < 0) hit[s] = static_cast<int32_t>(p);
    }
    std::deque<int32_t> work;
    for (int c = 0; c < 256; ++c) {
      if (go[0][c] < 0) {
        go[0][c] = 0;
      } else {
        work.push_back(go[0][c]);
      }
    }
    while (!work.empty()) {
      const int32_t s = work.front();
      work.pop_front();
      if (hit[s] < 0) hit[s] = hit[fail[s]];
      for (int c = 0; c < 256; ++c) {
        const int32_t t = go[s][c];
        if (t < 0) {
          go[s][c] = go[fail[s]][c];
        } else {
          fail[t] = s == 0 ? 0 : go[fail[s]][c];
          work.push_back(t);
        }
      }
    }
  }
};

}  // namespace

ByteDfa TextUntil(absl::string_view terminator, const std::vector<std::string>& forbidden) {
  std::vector<std::string> patterns = {std::string(terminator)};
  patterns.insert(patterns.end(), forbidden.begin(), forbidden.end());
  const PatternAutomaton ac(patterns);
  ByteDfa text;
  const int32_t n = static_cast<int32_t>(ac.go.size());
  for (int32_t s = 0; s < n; ++s) text.AddState(false);
  const int32_t done = text.AddState(true);
  for (int32_t s = 0; s < n; ++s) {
    if (ac.hit[s] >= 0) continue;  // never entered: see below
    for (int c = 0; c < 256; ++c) {
      const int32_t t = ac.go[s][c];
      if (ac.hit[t] == 0) {
        text.next[s][c] = done;  // the terminator completed first
      } else if (ac.hit[t] < 0) {
        text.next[s][c] = t;
      }
    }
  }
  // Valid UTF-8 all along; the terminator is text too, so it ends on a
  // character boundary when it is itself well-formed.
  ByteDfa utf8 = Utf8Text();
  return Intersect(text, utf8);
}

ByteDfa WithoutSubstrings(const std::vector<std::string>& patterns) {
  const PatternAutomaton ac(patterns);
  ByteDfa d;
  const int32_t n = static_cast<int32_t>(ac.go.size());
  for (int32_t s = 0; s < n; ++s) d.AddState(ac.hit[s] < 0);
  for (int32_t s = 0; s < n; ++s) {
    if (ac.hit[s] >= 0) continue;
    for (int c = 0; c < 256; ++c) {
      const int32_t t = ac.go[s][c];
      if (ac.hit[t] < 0) d.next[s][c] = t;
    }
  }
  return Trim(d);
}

}  // namespace spar::grammar

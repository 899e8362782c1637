// Reading a daemon's /metrics in multi-process tests (cpp-httplib).
#ifndef SPAR_TESTS_SERVICES_METRICS_SCRAPE_H_
#define SPAR_TESTS_SERVICES_METRICS_SCRAPE_H_

#include <httplib.h>

#include <cmath>
#include <sstream>
#include <string>

namespace spar::testing {

// The value of the first sample of `name` (any labels) on the /metrics of
// 127.0.0.1:`port`; NaN when absent or unreachable.
inline double ScrapeMetric(int port, const std::string& name) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(5, 0);
  auto res = client.Get("/metrics");
  if (!res || res->status != 200) return std::nan("");
  std::istringstream lines(res->body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return std::nan("");
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_SERVICES_METRICS_SCRAPE_H_

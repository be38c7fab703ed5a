// Prometheus' text exposition format, and the few metric kinds /metrics
// needs. Names follow Prometheus' conventions: graft_<what>_total for
// counters, _seconds and _bytes for units, histograms as _bucket/_sum/_count.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace graft::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Latencies in seconds, in cumulative buckets.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double seconds);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf last
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), +Inf last
  double sum_ = 0;
  uint64_t count_ = 0;
};

// An exposition under construction: families of samples, each family's
// HELP and TYPE once, samples in the order added.
class PromText {
 public:
  void counter(const std::string& name, const std::string& help, double value, const Labels& labels = {});
  void gauge(const std::string& name, const std::string& help, double value, const Labels& labels = {});
  void histogram(const std::string& name, const std::string& help, const Histogram::Snapshot& h,
                 const Labels& labels = {});
  std::string str() const;

 private:
  struct Family {
    std::string help, type;
    std::vector<std::string> samples;
  };
  Family& family(const std::string& name, const std::string& help, const std::string& type);
  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
};

// Label values escaped as the format asks (backslash, quote, newline).
std::string escape_label(const std::string& value);

}  // namespace graft::server

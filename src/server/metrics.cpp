#include "server/metrics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace graft::server {

namespace {

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::abs(v) < 1e15) return fmt::format("{:.0f}", v);
  return fmt::format("{}", v);
}

std::string label_text(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    out += fmt::format("{}{}=\"{}\"", i ? "," : "", labels[i].first, escape_label(labels[i].second));
  }
  return out + "}";
}

}  // namespace

std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::observe(double seconds) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin());
  std::lock_guard lock(mutex_);
  counts_[i]++;
  sum_ += seconds;
  count_++;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard lock(mutex_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

PromText::Family& PromText::family(const std::string& name, const std::string& help,
                                   const std::string& type) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    order_.push_back(name);
    it = families_.emplace(name, Family{help, type, {}}).first;
  }
  return it->second;
}

void PromText::counter(const std::string& name, const std::string& help, double value, const Labels& labels) {
  family(name, help, "counter").samples.push_back(name + label_text(labels) + " " + number(value));
}

void PromText::gauge(const std::string& name, const std::string& help, double value, const Labels& labels) {
  family(name, help, "gauge").samples.push_back(name + label_text(labels) + " " + number(value));
}

void PromText::histogram(const std::string& name, const std::string& help, const Histogram::Snapshot& h,
                         const Labels& labels) {
  Family& f = family(name, help, "histogram");
  for (size_t i = 0; i <= h.bounds.size(); ++i) {
    Labels with = labels;
    with.emplace_back("le", i < h.bounds.size() ? number(h.bounds[i]) : "+Inf");
    f.samples.push_back(name + "_bucket" + label_text(with) + " " + number(double(h.cumulative[i])));
  }
  f.samples.push_back(name + "_sum" + label_text(labels) + " " + number(h.sum));
  f.samples.push_back(name + "_count" + label_text(labels) + " " + number(double(h.count)));
}

std::string PromText::str() const {
  std::string out;
  for (const std::string& name : order_) {
    const Family& f = families_.at(name);
    out += "# HELP " + name + " " + f.help + "\n";
    out += "# TYPE " + name + " " + f.type + "\n";
    for (const std::string& s : f.samples) out += s + "\n";
  }
  return out;
}

}  // namespace graft::server

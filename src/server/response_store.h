// ResponseStore: the stored responses of the Responses API, in memory, the
// `capacity` most recently used (stored or read); older ones are dropped.
// Thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "server/openai_params.h"

namespace graft::server {

struct StoredResponse {
  RequestJson response;      // the response object, for GET /v1/responses/{id}
  RequestJson conversation;  // its chat messages, inputs and output, for previous_response_id
};

class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}

  size_t capacity() const { return capacity_; }

  void put(const std::string& id, StoredResponse entry) {
    std::lock_guard lock(mutex_);
    erase_locked(id);
    order_.push_front(id);
    entries_.emplace(id, std::make_pair(std::move(entry), order_.begin()));
    while (entries_.size() > capacity_) {
      entries_.erase(order_.back());
      order_.pop_back();
    }
  }

  std::optional<StoredResponse> get(const std::string& id) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    order_.splice(order_.begin(), order_, it->second.second);
    return it->second.first;
  }

  bool erase(const std::string& id) {
    std::lock_guard lock(mutex_);
    return erase_locked(id);
  }

  size_t size() {
    std::lock_guard lock(mutex_);
    return entries_.size();
  }

 private:
  bool erase_locked(const std::string& id) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return false;
    order_.erase(it->second.second);
    entries_.erase(it);
    return true;
  }

  size_t capacity_;
  std::mutex mutex_;
  std::list<std::string> order_;  // most recently used first
  std::unordered_map<std::string, std::pair<StoredResponse, std::list<std::string>::iterator>> entries_;
};

}  // namespace graft::server

#include "adapters/mounted.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#include "adapters/targets.h"
#include "util/log.h"

namespace graft {

struct detail::MountedState {
  enum class Phase { loading, ready, unloading };
  struct Entry {
    LoadedAdapter info;
    Phase phase = Phase::loading;
  };
  std::mutex mutex;
  std::map<std::string, Entry, std::less<>> entries;
  AdapterSelection default_selection;
  uint64_t clock = 0;        // ticks at each load, select and release (for last_used)
  std::mutex on_idle_mutex;  // held while on_idle runs or changes
  std::function<void()> on_idle;

  void release(const AdapterSelection& selection) {
    bool idle = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (const AdapterChoice& c : selection.stack) {
        auto it = entries.find(c.id);
        if (it == entries.end() || it->second.info.users == 0) continue;
        it->second.info.last_used = ++clock;
        idle = --it->second.info.users == 0 || idle;
      }
    }
    if (!idle) return;
    std::lock_guard<std::mutex> lock(on_idle_mutex);
    if (on_idle) on_idle();
  }
};

using State = detail::MountedState;

AdapterLease::AdapterLease(AdapterLease&& other) noexcept
    : state_(std::move(other.state_)), selection_(std::move(other.selection_)), route_(other.route_) {
  other.selection_ = {};
  other.route_ = {};
}

AdapterLease& AdapterLease::operator=(AdapterLease&& other) noexcept {
  if (this != &other) {
    if (state_) state_->release(selection_);
    state_ = std::move(other.state_);
    selection_ = std::move(other.selection_);
    route_ = other.route_;
    other.selection_ = {};
    other.route_ = {};
  }
  return *this;
}

AdapterLease::~AdapterLease() {
  if (state_) state_->release(selection_);
}

MountedAdapters::MountedAdapters(BaseModel base)
    : base_(std::move(base)), state_(std::make_shared<State>()) {}

MountedAdapters::~MountedAdapters() = default;

Result<LoadedAdapter> MountedAdapters::load(const AvailableAdapter& adapter, const MountFn& mount) {
  GRAFT_TRY_STATUS(validate_adapter_id(adapter.id));
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto [it, inserted] = state_->entries.try_emplace(adapter.id);
    if (!inserted) {
      return errorf("conflict", "adapter '{}' is already {}", adapter.id,
                    it->second.phase == State::Phase::ready ? "loaded" : "being loaded or unloaded");
    }
  }
  auto forget = [&] {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->entries.erase(adapter.id);
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto weights = read_mountable(adapter, base_);
  const auto t1 = std::chrono::steady_clock::now();
  if (!weights) {
    forget();
    return weights.error();
  }
  const LoraType type = lora_type_of(*weights);
  auto slot = mount(*weights);
  const auto t2 = std::chrono::steady_clock::now();
  if (!slot) {
    forget();
    return slot.error();
  }
  const AdapterDescription& d = *adapter.description;
  LoadedAdapter info;
  info.id = adapter.id;
  info.path = adapter.path;
  info.format = d.format;
  info.rank = d.scaling.rank;
  info.alpha = d.scaling.alpha;
  info.scale = d.scaling.scale();
  info.size_bytes = d.size_bytes;
  info.layers = d.layers();
  for (LoraTarget t : d.targets()) info.targets.emplace_back(peft_target_name(t));
  info.type = type;
  info.slot = *slot;
  info.read_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  info.mount_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
  GRAFT_LOG_INFO(
      "loaded adapter '{}' ({}, rank {}, {} matrices, {}) in {:.1f} ms: read {:.1f} ms, mount {:.1f} ms",
      info.id, format_name(info.format), info.rank, d.modules.size(), ggml_type_name(ggml_type_of(type)),
      info.read_ms + info.mount_ms, info.read_ms, info.mount_ms);
  std::lock_guard<std::mutex> lock(state_->mutex);
  State::Entry& entry = state_->entries[adapter.id];
  info.last_used = ++state_->clock;
  entry.info = info;
  entry.phase = State::Phase::ready;
  return info;
}

Status MountedAdapters::unload(std::string_view id, const UnmountFn& unmount) {
  int slot = -1;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto it = state_->entries.find(id);
    if (it == state_->entries.end() || it->second.phase != State::Phase::ready) {
      return errorf("not_found", "adapter '{}' is not loaded", id);
    }
    for (const AdapterChoice& c : state_->default_selection.stack) {
      if (c.id == id) {
        return errorf("in_use",
                      "adapter '{}' is the default selection of every request; it cannot be unloaded", id);
      }
    }
    if (it->second.info.users > 0) {
      return errorf("in_use", "adapter '{}' is in use by {} request{}; unload it when they finish", id,
                    it->second.info.users, it->second.info.users == 1 ? "" : "s");
    }
    it->second.phase = State::Phase::unloading;
    slot = it->second.info.slot;
  }
  Status status = unmount(slot);
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->entries.find(id);
  if (!status) {
    it->second.phase = State::Phase::ready;
    return status;
  }
  state_->entries.erase(it);
  return {};
}

std::vector<LoadedAdapter> MountedAdapters::list() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<LoadedAdapter> out;
  for (const auto& [id, entry] : state_->entries) {
    if (entry.phase != State::Phase::loading) out.push_back(entry.info);
  }
  return out;
}

size_t MountedAdapters::size() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->entries.size();
}

std::optional<std::string> MountedAdapters::least_recently_used_idle(
    const std::vector<std::string>& keep) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto kept = [&](const std::string& id) {
    for (const AdapterChoice& c : state_->default_selection.stack) {
      if (c.id == id) return true;
    }
    return std::find(keep.begin(), keep.end(), id) != keep.end();
  };
  const State::Entry* oldest = nullptr;
  for (const auto& [id, entry] : state_->entries) {
    if (entry.phase != State::Phase::ready || entry.info.users > 0 || kept(id)) continue;
    if (!oldest || entry.info.last_used < oldest->info.last_used) oldest = &entry;
  }
  if (!oldest) return std::nullopt;
  return oldest->info.id;
}

void MountedAdapters::set_on_idle(std::function<void()> on_idle) {
  std::lock_guard<std::mutex> lock(state_->on_idle_mutex);
  state_->on_idle = std::move(on_idle);
}

std::optional<LoadedAdapter> MountedAdapters::find(std::string_view id) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->entries.find(id);
  if (it == state_->entries.end() || it->second.phase == State::Phase::loading) return std::nullopt;
  return it->second.info;
}

Status MountedAdapters::set_default(const AdapterSelection& selection) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  for (const AdapterChoice& c : selection.stack) {
    auto it = state_->entries.find(c.id);
    if (it == state_->entries.end() || it->second.phase != State::Phase::ready) {
      return errorf("invalid_argument", "adapter '{}' is not loaded", c.id);
    }
  }
  state_->default_selection = selection;
  return {};
}

AdapterSelection MountedAdapters::default_selection() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->default_selection;
}

Result<AdapterLease> MountedAdapters::select(std::optional<std::string_view> spec) const {
  if (!spec) return select(default_selection());
  GRAFT_TRY(AdapterSelection selection, parse_adapter_spec(*spec));
  return select(selection);
}

Result<AdapterLease> MountedAdapters::select(const AdapterSelection& selection) const {
  AdapterLease lease;
  if (selection.none()) return lease;
  std::lock_guard<std::mutex> lock(state_->mutex);
  for (size_t i = 0; i < selection.stack.size(); ++i) {
    const AdapterChoice& c = selection.stack[i];
    auto it = state_->entries.find(c.id);
    if (it == state_->entries.end()) return errorf("invalid_argument", "adapter '{}' is not loaded", c.id);
    if (it->second.phase != State::Phase::ready) {
      return errorf("invalid_argument", "adapter '{}' is not loaded (it is being {})", c.id,
                    it->second.phase == State::Phase::loading ? "loaded" : "unloaded");
    }
    lease.route_.slot[i] = it->second.info.slot;
    lease.route_.scale[i] = c.scale;
  }
  lease.route_.n = int(selection.stack.size());
  const uint64_t now = ++state_->clock;
  for (const AdapterChoice& c : selection.stack) {
    LoadedAdapter& info = state_->entries.find(c.id)->second.info;
    ++info.users;
    info.last_used = now;
  }
  lease.state_ = state_;
  lease.selection_ = selection;
  return lease;
}

}  // namespace graft

// The mounted set (the "loaded" state): which adapters are resident in the
// engine, at which LoRA slot, and how many requests hold each. Requests take
// an AdapterLease when they are admitted (the "selected" state, resolved);
// an adapter cannot be unloaded while a lease holds it.
//
// Thread-safe: HTTP threads select and list while loads and unloads run. The
// mount and unmount callbacks are where the caller hops onto the engine
// thread (Model::mount_lora / unmount_lora between steps); no lock is held
// while they run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/spec.h"
#include "adapters/store.h"
#include "model/adapter_route.h"

namespace graft {

static_assert(kMaxAdapterStack == AdapterRoute::kMaxStack);

namespace detail {
struct MountedState;
}

struct LoadedAdapter {
  std::string id;
  fs::path path;
  AdapterFormat format = AdapterFormat::peft;
  int rank = 0;
  float alpha = 0.0f;
  float scale = 0.0f;       // the adapter's own alpha / rank
  uint64_t size_bytes = 0;  // of its weight file
  std::vector<int> layers;
  std::vector<std::string> targets;  // PEFT module names
  LoraType type = LoraType::f16;     // what its matrices are kept and computed in
  int slot = -1;                     // the model's LoRA slot
  int users = 0;                     // leases holding it now
  uint64_t last_used = 0;            // when it was last loaded, selected or released (a tick count)
  double read_ms = 0.0;              // reading and checking the files
  double mount_ms = 0.0;             // the mount callback (the engine's copy)
};

// A request's resolved selection. While it lives, its adapters stay loaded.
class AdapterLease {
 public:
  AdapterLease() = default;  // the base model, holding nothing
  AdapterLease(AdapterLease&& other) noexcept;
  AdapterLease& operator=(AdapterLease&& other) noexcept;
  AdapterLease(const AdapterLease&) = delete;
  AdapterLease& operator=(const AdapterLease&) = delete;
  ~AdapterLease();

  const AdapterRoute& route() const { return route_; }
  const AdapterSelection& selection() const { return selection_; }

 private:
  friend class MountedAdapters;
  std::shared_ptr<detail::MountedState> state_;
  AdapterSelection selection_;
  AdapterRoute route_;
};

class MountedAdapters {
 public:
  using MountFn = std::function<Result<int>(const LoraWeights&)>;
  using UnmountFn = std::function<Status(int slot)>;

  explicit MountedAdapters(BaseModel base);
  ~MountedAdapters();
  MountedAdapters(const MountedAdapters&) = delete;
  MountedAdapters& operator=(const MountedAdapters&) = delete;

  const BaseModel& base() const { return base_; }

  // Reads the adapter, checks it against the base model and mounts it under
  // its id. Errors: "conflict" (the id is loaded or loading),
  // "invalid_adapter" (unreadable, with the reason), "incompatible_adapter",
  // or whatever `mount` returns. Nothing changes on error.
  Result<LoadedAdapter> load(const AvailableAdapter& adapter, const MountFn& mount);
  // Errors: "not_found" (not loaded), "in_use" (leases hold it, or it is the
  // default selection). Nothing changes on error.
  Status unload(std::string_view id, const UnmountFn& unmount);

  std::vector<LoadedAdapter> list() const;  // sorted by id
  // Adapters loaded, being loaded or being unloaded: the slots they take.
  size_t size() const;
  // The least recently used adapter that no lease holds, that is not in the
  // default selection and not in `keep`; nullopt when every one is in use.
  std::optional<std::string> least_recently_used_idle(const std::vector<std::string>& keep = {}) const;
  // Called (on the thread that releases the lease, with no lock held) each
  // time an adapter's last lease goes; nullptr to stop. After it returns, the
  // previous callback is not running and will not be called again.
  void set_on_idle(std::function<void()> on_idle);
  std::optional<LoadedAdapter> find(std::string_view id) const;

  // The selection for requests that name none (--force-adapter). Every id
  // in it must be loaded; "none" clears it.
  Status set_default(const AdapterSelection& selection);
  AdapterSelection default_selection() const;

  // Resolves a request's adapter field: nullopt takes the default, "none" the
  // base model. An id that is not loaded gives an "invalid_argument" error
  // naming it; there is never a fallback to the base model.
  Result<AdapterLease> select(std::optional<std::string_view> spec) const;
  Result<AdapterLease> select(const AdapterSelection& selection) const;

 private:
  BaseModel base_;
  std::shared_ptr<detail::MountedState> state_;
};

}  // namespace graft

// Adapters in `graft serve`: the three states over HTTP.
//   available  GET    /v1/adapters/available   what the store holds, compatible first
//   loaded     GET    /v1/adapters             what is mounted
//              POST   /v1/adapters             {"id"} or {"path", "id"?}: load (paths only
//                                              inside the store or an --adapter-dir, else 403)
//              DELETE /v1/adapters/{id}        unload (409 while a request uses it)
//   selected   the "adapter" field of completion and chat requests ("a", "a@0.5+b",
//              "none"); absent: the default (--force-adapter). An id that is not
//              loaded is a 400 naming it, never a fallback to the base model.
// The default selection and the loaded adapters show in /health and /stats.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "adapters/mounted.h"
#include "adapters/store.h"
#include "server/server.h"

namespace graft::server {

struct AdapterServiceOptions {
  std::vector<std::string> adapter_dirs;  // searched after the user's store
  std::string force;                      // --force-adapter: an id, a path or a spec; "" for none
};

class AdapterService {
 public:
  // Reads the served model's identity and loads --force-adapter (if any),
  // making it the default selection. Errors say what could not be loaded.
  static Result<std::unique_ptr<AdapterService>> create(ServedModel& model, AdapterServiceOptions options);
  // Finishes the loads and unloads queued. Destroy it after the HTTP
  // server stopped and before the served model goes.
  ~AdapterService();
  AdapterService(const AdapterService&) = delete;
  AdapterService& operator=(const AdapterService&) = delete;

  // Adds the routes, the request hook and the /health, /stats and /metrics hooks.
  void install(Server& server);

  const AdapterStore& store() const { return store_; }
  MountedAdapters& mounted() { return *mounted_; }

 private:
  struct Worker;
  struct Counters;  // loads, unloads and requests per adapter id, for /metrics
  AdapterService(ServedModel& model, AdapterServiceOptions options, BaseModel base);

  Result<int> mount(const LoraWeights& weights);
  Status unmount(int slot);
  // The 400 for a selection that failed: says whether each id is unknown,
  // does not fit the model, or is simply not loaded yet.
  ApiError explain_selection_error(const std::string& spec, const Error& error) const;

  ServedModel& model_;
  AdapterServiceOptions options_;
  AdapterStore store_;
  std::unique_ptr<MountedAdapters> mounted_;
  std::unique_ptr<Counters> counters_;
  std::unique_ptr<Worker> worker_;  // loads and unloads run here, off the HTTP threads
};

}  // namespace graft::server

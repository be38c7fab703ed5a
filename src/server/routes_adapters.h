// Adapters in `graft serve`: the three states over HTTP.
//   available  GET    /v1/adapters/available   what the store holds, compatible first
//   loaded     GET    /v1/adapters             what is mounted
//              POST   /v1/adapters             {"id"} or {"path", "id"?}: load (paths only
//                                              inside the store or an --adapter-dir, else 403)
//              DELETE /v1/adapters/{id}        unload (409 while a request uses it)
//   selected   the "adapter" field of completion and chat requests ("a", "a@0.5+b",
//              "none"), or their "model" naming an adapter or a stack ("a",
//              "a@0.5+b"), as vLLM does; absent (or "model" naming the served
//              model): the default (--force-adapter). Both given and different:
//              a 400. An id that is not loaded is a 400 naming it, never a
//              fallback to the base model — unless auto-loading is on: then
//              the request waits for it to load (one load however many wait),
//              and with a limit on loaded adapters the least recently used
//              idle one is unloaded to make room (never one in use, never
//              the default). A "model" that names nothing graft has is a 404.
// /v1/models lists the loaded adapters after the served model, each with
// "parent": the model's id. The default selection, the loaded adapters and
// the load counts show in /health and /stats.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "adapters/mounted.h"
#include "adapters/store.h"
#include "server/server.h"
#include "server/worker.h"

namespace graft::server {

struct AdapterServiceOptions {
  std::vector<std::string> adapter_dirs;  // searched after the user's store
  std::string force;                      // --force-adapter: an id, a path or a spec; "" for none
  bool auto_load = false;                 // --auto-load-adapters
  int max_loaded = 0;                     // --max-loaded-adapters; 0: no limit
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

  // Loads an adapter of the store by id on the adapter thread; `done` (there) gets the outcome.
  void load_in_background(std::string id, std::function<void(const Status&)> done);

  const AdapterStore& store() const { return store_; }
  MountedAdapters& mounted() { return *mounted_; }

 private:
  struct Counters;   // loads, unloads and requests per adapter id, for /metrics
  struct AutoLoads;  // the adapters being auto-loaded and the requests waiting for them
  // What a request selects, from its "model" and "adapter" fields: a spec,
  // or nullopt for the default; `param` names the field it came from.
  struct Requested {
    std::optional<std::string> spec;
    std::string param = "adapter";
  };
  AdapterService(ServedModel& model, AdapterServiceOptions options, BaseModel base);

  // The routes (the slow ones finish on the worker thread).
  void list_loaded(const std::shared_ptr<Exchange>& exchange) const;
  void list_available(const std::shared_ptr<Exchange>& exchange) const;
  void load(const HttpRequest& http, const std::shared_ptr<Exchange>& exchange);
  void load_on_worker(const std::string& id, const std::string& path, Exchange& exchange);
  void unload(const std::string& id, Exchange& exchange);
  // The "model" and "adapter" fields of a completion or chat request.
  std::optional<ApiError> requested(const RequestJson& body, Requested& out) const;
  std::optional<ApiError> select(const RequestJson& body, GenerationRequest& request) const;
  // The prepare hook: with auto-loading, loads what the request selects and
  // is not loaded, then answers with a lease that keeps it loaded.
  void prepare(const RequestJson& body, PrepareDone done);
  // On the worker: loads `id` (making room) and gives each request waiting
  // for it a lease on it, or the error; waits for room if none can be made.
  void auto_load(const std::string& id);
  void retry_waiting_for_room();
  // On the worker: unloads least recently used idle adapters until one more
  // fits under --max-loaded-adapters. False when every loaded one is in use.
  Result<bool> make_room(const std::string& for_id);
  ApiError auto_load_error(const std::string& id, const Error& error, const std::string& param) const;
  void add_models(RequestJson& data) const;
  void report_health(json& body) const;
  void report_stats(json& body) const;
  void report_metrics(PromText& m) const;

  // On the engine thread, between steps; the worker thread waits.
  Result<int> mount(const LoraWeights& weights);
  Status unmount(int slot);
  // The 400 for a selection that failed: says whether each id is unknown,
  // cannot be read, does not fit the model, or is simply not loaded yet.
  ApiError explain_selection_error(const std::string& spec, const Error& error,
                                   const std::string& param = "adapter") const;

  ServedModel& model_;
  AdapterServiceOptions options_;
  AdapterStore store_;
  std::unique_ptr<MountedAdapters> mounted_;
  std::unique_ptr<Counters> counters_;
  std::unique_ptr<AutoLoads> auto_loads_;
  std::unique_ptr<Worker> worker_;  // loads and unloads run here, off the HTTP threads
};

}  // namespace graft::server

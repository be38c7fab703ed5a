#include "server/routes_adapters.h"

#include <algorithm>
#include <future>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "adapters/load.h"
#include "adapters/targets.h"
#include "util/log.h"

namespace graft::server {

namespace {

json loaded_json(const LoadedAdapter& a, const AdapterSelection& default_selection, uint64_t requests) {
  bool is_default = false;
  for (const AdapterChoice& c : default_selection.stack) is_default = is_default || c.id == a.id;
  return json{{"id", a.id},
              {"object", "adapter"},
              {"path", a.path.string()},
              {"format", std::string(format_name(a.format))},
              {"rank", a.rank},
              {"alpha", a.alpha},
              {"scale", a.scale},
              {"size_bytes", a.size_bytes},
              {"layers", a.layers},
              {"targets", a.targets},
              {"in_use", a.users},
              {"default", is_default},
              {"requests", requests},
              {"load_ms", a.read_ms + a.mount_ms}};
}

json available_json(const AvailableAdapter& a, const Compatibility& c, bool loaded) {
  json j = {{"id", a.id}, {"object", "adapter"}, {"path", a.path.string()}};
  json base = nullptr;
  if (a.metadata && !a.metadata->base_repo.empty()) base = a.metadata->base_repo;
  if (base.is_null() && a.description && !a.description->base_model.empty()) base = a.description->base_model;
  j["base"] = base;
  j["stamped"] = a.metadata.has_value();
  if (a.description) {
    j["format"] = std::string(format_name(a.description->format));
    j["rank"] = a.description->scaling.rank;
    j["scale"] = a.description->scaling.scale();
    json targets = json::array();
    for (LoraTarget t : a.description->targets()) targets.push_back(std::string(peft_target_name(t)));
    j["targets"] = targets;
    j["size_bytes"] = a.description->size_bytes;
  } else {
    j["format"] = j["rank"] = j["scale"] = j["targets"] = j["size_bytes"] = nullptr;
  }
  j["compatible"] = c.compatible;
  if (!c.compatible) j["reason"] = c.reason;
  j["loaded"] = loaded;
  j["created"] = a.metadata && !a.metadata->created.empty() ? json(a.metadata->created) : json(nullptr);
  j["task"] = a.metadata && !a.metadata->task.empty() ? json(a.metadata->task) : json(nullptr);
  j["dataset"] = a.metadata && !a.metadata->dataset.empty() ? json(a.metadata->dataset) : json(nullptr);
  // The final losses graft train records in graft_adapter.json ("training").
  j["train_loss"] = j["valid_loss"] = nullptr;
  if (a.metadata && a.metadata->extra.contains("training") && a.metadata->extra["training"].is_object()) {
    const json& training = a.metadata->extra["training"];
    if (training.contains("train_loss") && training["train_loss"].is_number()) {
      j["train_loss"] = training["train_loss"];
    }
    if (training.contains("val_loss") && training["val_loss"].is_number()) {
      j["valid_loss"] = training["val_loss"];
    }
  }
  return j;
}

}  // namespace

struct AdapterService::Counters {
  std::mutex mutex;
  struct PerAdapter {
    uint64_t loads = 0, unloads = 0, requests = 0;
  };
  std::map<std::string, PerAdapter> by_id;
  uint64_t base_requests = 0;  // requests that used no adapter ("none")
  template <typename F>
  void add(const std::string& id, F field) {
    std::lock_guard lock(mutex);
    field(by_id[id])++;
  }
  // One request's selection: each adapter of a stack counts it; none counts as the base model's.
  void count_request(const AdapterSelection& selection) {
    std::lock_guard lock(mutex);
    if (selection.none()) ++base_requests;
    for (const AdapterChoice& c : selection.stack) ++by_id[c.id].requests;
  }
  uint64_t requests(const std::string& id) {
    std::lock_guard lock(mutex);
    const auto it = by_id.find(id);
    return it == by_id.end() ? 0 : it->second.requests;
  }
};

struct AdapterService::AutoLoads {
  using Waiter = std::function<void(Result<AdapterLease>)>;
  std::mutex mutex;
  // id → the requests waiting for it; an id is here from the first request
  // for it until its load is done (one load however many wait).
  std::map<std::string, std::vector<Waiter>> waiting;
  std::vector<std::string> need_room;  // ids whose load waits for an adapter to go idle
  bool retry_posted = false;
  uint64_t loads = 0, evictions = 0;  // since the start
};

AdapterService::AdapterService(ServedModel& model, AdapterServiceOptions options, BaseModel base)
    : model_(model),
      options_(std::move(options)),
      store_(AdapterStore::with_user_store({options_.adapter_dirs.begin(), options_.adapter_dirs.end()})),
      mounted_(std::make_unique<MountedAdapters>(std::move(base))),
      counters_(std::make_unique<Counters>()),
      auto_loads_(std::make_unique<AutoLoads>()),
      worker_(std::make_unique<Worker>("adapter job")) {}

AdapterService::~AdapterService() {
  mounted_->set_on_idle(nullptr);
  worker_.reset();
}

Result<std::unique_ptr<AdapterService>> AdapterService::create(ServedModel& model,
                                                               AdapterServiceOptions options) {
  if (!model.has_model()) return make_error("invalid_argument", "adapters need a loaded model");
  GRAFT_TRY(BaseModel base, BaseModel::from_gguf(model.model().gguf()));
  std::unique_ptr<AdapterService> service(new AdapterService(model, std::move(options), std::move(base)));
  if (!service->options_.force.empty()) {
    auto forced = force_adapter(service->options_.force, service->store_, *service->mounted_,
                                [&](const LoraWeights& w) { return service->mount(w); });
    if (!forced) return errorf(forced.error().code, "--force-adapter: {}", forced.error().message);
    for (const AdapterChoice& c : forced->stack)
      service->counters_->add(
          c.id, [](auto& a) -> auto& { return a.loads; });
    GRAFT_LOG_INFO("every request uses adapter {} unless it asks otherwise", forced->to_string());
  }
  const int max_loaded = service->options_.max_loaded;
  if (max_loaded < 0) return errorf("invalid_argument", "--max-loaded-adapters must be 0 (no limit) or more");
  if (max_loaded > 0 && service->mounted_->size() >= size_t(max_loaded)) {
    return errorf("invalid_argument",
                  "--max-loaded-adapters {} leaves no room beside the {} adapter{} of --force-adapter, which "
                  "stay loaded",
                  max_loaded, service->mounted_->size(), service->mounted_->size() == 1 ? "" : "s");
  }
  AdapterService* self = service.get();
  service->mounted_->set_on_idle([self] {
    std::lock_guard lock(self->auto_loads_->mutex);
    if (self->auto_loads_->need_room.empty() || self->auto_loads_->retry_posted) return;
    self->auto_loads_->retry_posted = true;
    self->worker_->post([self] { self->retry_waiting_for_room(); });
  });
  return service;
}

Result<int> AdapterService::mount(const LoraWeights& weights) {
  Model* model = &model_.model();
  return model_.engine().run_on_engine_thread([model, &weights] { return model->mount_lora(weights); });
}

Status AdapterService::unmount(int slot) {
  Model* model = &model_.model();
  Engine* engine = &model_.engine();
  return engine->run_on_engine_thread([model, engine, slot]() -> Status {
    if (engine->adapter_slot_in_use(slot)) return errorf("in_use", "a request still uses it");
    // Cached prompt prefixes computed with it must not serve a later adapter in this slot.
    engine->drop_cached_prefixes([slot](const AdapterRoute& route) {
      for (int i = 0; i < route.n; ++i) {
        if (route.slot[i] == slot) return true;
      }
      return false;
    });
    return model->unmount_lora(slot);
  });
}

ApiError AdapterService::explain_selection_error(const std::string& spec, const Error& error,
                                                 const std::string& param) const {
  auto selection = parse_adapter_spec(spec);
  if (!selection) return bad_request(selection.error().message, param, ApiCode::kInvalidAdapterSpec);
  for (const AdapterChoice& c : selection->stack) {
    if (mounted_->find(c.id)) continue;
    auto found = store_.find(c.id);
    if (!found) {
      return bad_request(
          fmt::format("unknown adapter '{}': it is neither loaded nor in the adapter store", c.id), param,
          ApiCode::kAdapterNotFound);
    }
    if (!found->readable()) {
      return bad_request(fmt::format("adapter '{}' cannot be read: {}", c.id, found->problem), param,
                         ApiCode::kAdapterCorrupt);
    }
    const Compatibility compat = check_compatibility(*found, mounted_->base());
    if (!compat.compatible) {
      return bad_request(fmt::format("adapter '{}' does not fit the served model: {}", c.id, compat.reason),
                         param, ApiCode::kAdapterIncompatible);
    }
    if (options_.auto_load) {
      return bad_request(fmt::format("adapter '{}' is not loaded", c.id), param, ApiCode::kAdapterNotLoaded);
    }
    return bad_request(
        fmt::format("adapter '{}' is not loaded; load it first with POST /v1/adapters {{\"id\": \"{}\"}}, "
                    "or start graft serve with --auto-load-adapters to load adapters as requests name them",
                    c.id, c.id),
        param, ApiCode::kAdapterNotLoaded);
  }
  return bad_request(error.message, param, ApiCode::kAdapterNotLoaded);
}

void AdapterService::load_in_background(std::string id, std::function<void(const Status&)> done) {
  worker_->post([this, id = std::move(id), done = std::move(done)] {
    Status status;
    Result<bool> room = true;
    if (auto adapter = store_.find(id); !adapter) {
      status = adapter.error();
    } else if (!mounted_->find(id) && !(room = make_room(id))) {
      status = room.error();
    } else if (!*room) {
      status = errorf("in_use", "no room for adapter '{}': all {} loaded adapters are in use", id,
                      options_.max_loaded);
    } else if (auto loaded = mounted_->load(*adapter, [this](const LoraWeights& w) { return mount(w); });
               !loaded) {
      status = loaded.error();
    }
    if (done) done(status);
  });
}

void AdapterService::install(Server& server) {
  Router& router = server.router();
  AdapterService* self = this;
  router.add("GET", "/v1/adapters",
             [self](HttpRequest&, std::shared_ptr<Exchange> exchange) { self->list_loaded(exchange); });
  router.add("GET", "/v1/adapters/available",
             [self](HttpRequest&, std::shared_ptr<Exchange> exchange) { self->list_available(exchange); });
  router.add("POST", "/v1/adapters",
             [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) { self->load(http, exchange); });
  router.add("DELETE", "/v1/adapters/{id}", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    const std::string id = http.params["id"];
    self->worker_->post(exchange, [self, exchange, id] { self->unload(id, *exchange); });
  });
  server.add_request_hook(
      [self](const RequestJson& body, GenerationRequest& request) { return self->select(body, request); },
      {"adapter", "model"});
  server.set_prepare_hook([self](const RequestJson& body, PrepareDone done) { self->prepare(body, done); });
  server.add_model_list_hook([self](RequestJson& data) { self->add_models(data); });
  server.add_health_hook([self](json& body) { self->report_health(body); });
  server.add_stats_hook([self](json& body) { self->report_stats(body); });
  server.add_metrics_hook([self](PromText& m) { self->report_metrics(m); });
}

void AdapterService::list_loaded(const std::shared_ptr<Exchange>& exchange) const {
  const AdapterSelection selection = mounted_->default_selection();
  json data = json::array();
  for (const LoadedAdapter& a : mounted_->list()) {
    data.push_back(loaded_json(a, selection, counters_->requests(a.id)));
  }
  exchange->send_json(200, json{{"object", "list"}, {"data", data}, {"default", selection.to_string()}});
}

void AdapterService::list_available(const std::shared_ptr<Exchange>& exchange) const {
  worker_->post(exchange, [this, exchange] {
    struct Row {
      AvailableAdapter adapter;
      Compatibility compat;
    };
    std::vector<Row> rows;
    for (AvailableAdapter& a : store_.scan()) {
      Compatibility c = check_compatibility(a, mounted_->base());
      rows.push_back({std::move(a), std::move(c)});
    }
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& x, const Row& y) { return x.compat.compatible > y.compat.compatible; });
    json data = json::array();
    for (const Row& r : rows) {
      data.push_back(available_json(r.adapter, r.compat, mounted_->find(r.adapter.id).has_value()));
    }
    json roots = json::array();
    for (const fs::path& root : store_.roots()) roots.push_back(root.string());
    exchange->send_json(200, json{{"object", "list"}, {"data", data}, {"folders", roots}});
  });
}

void AdapterService::load(const HttpRequest& http, const std::shared_ptr<Exchange>& exchange) {
  RequestJson body;
  if (auto error = parse_body(http.body, body)) return exchange->send_error(*error);
  const auto id = body.find("id");
  const auto path = body.find("path");
  if (id != body.end() && !id->is_string())
    return exchange->send_error(bad_request("'id' must be a string", "id"));
  if (path != body.end() && !path->is_string()) {
    return exchange->send_error(bad_request("'path' must be a string", "path"));
  }
  if (id == body.end() && path == body.end()) {
    return exchange->send_error(
        bad_request("give the adapter's \"id\" (in the store) or its \"path\"", "id"));
  }
  const std::string id_text = id != body.end() ? id->get<std::string>() : "";
  const std::string path_text = path != body.end() ? path->get<std::string>() : "";
  worker_->post(exchange,
                [this, exchange, id_text, path_text] { load_on_worker(id_text, path_text, *exchange); });
}

void AdapterService::load_on_worker(const std::string& id, const std::string& path, Exchange& exchange) {
  const std::string param = path.empty() ? "id" : "path";
  Result<AvailableAdapter> adapter = make_error("internal", "");
  if (!path.empty()) {
    auto inside = store_.confine(path);
    if (!inside) return exchange.send_error(api_error(inside.error(), "path"));
    adapter = inspect_adapter(*inside);
    if (adapter && !id.empty()) adapter->id = id;
  } else {
    adapter = store_.find(id);
  }
  if (!adapter) return exchange.send_error(api_error(adapter.error(), param));
  if (Status valid = validate_adapter_id(adapter->id); !valid) {
    return exchange.send_error(api_error(valid.error(), "id"));
  }
  if (!mounted_->find(adapter->id)) {
    auto room = make_room(adapter->id);
    if (!room) return exchange.send_error(api_error(room.error(), param));
    if (!*room) {
      return exchange.send_error(api_error(
          ApiCode::kInUse,
          fmt::format(
              "no room for adapter '{}': all {} loaded adapters are in use (--max-loaded-adapters {}); "
              "try again when a request finishes",
              adapter->id, options_.max_loaded, options_.max_loaded),
          param));
    }
  }
  auto loaded = mounted_->load(*adapter, [this](const LoraWeights& w) { return mount(w); });
  if (!loaded) return exchange.send_error(api_error(loaded.error(), param));
  counters_->add(
      loaded->id, [](auto& a) -> auto& { return a.loads; });
  exchange.send_json(200,
                     loaded_json(*loaded, mounted_->default_selection(), counters_->requests(loaded->id)));
}

void AdapterService::unload(const std::string& id, Exchange& exchange) {
  Status status = mounted_->unload(id, [this](int slot) { return unmount(slot); });
  if (!status) return exchange.send_error(api_error(status.error(), "id"));
  counters_->add(
      id, [](auto& a) -> auto& { return a.unloads; });
  exchange.send_json(200, json{{"id", id}, {"object", "adapter"}, {"deleted", true}});
}

std::optional<ApiError> AdapterService::requested(const RequestJson& body, Requested& out) const {
  std::optional<std::string> adapter;
  if (const auto field = body.find("adapter"); field != body.end() && !field->is_null()) {
    if (!field->is_string()) {
      return bad_request("'adapter' must be a string: an adapter id, \"a+b\", \"a@0.5+b\" or \"none\"",
                         "adapter", ApiCode::kInvalidType);
    }
    adapter = field->get<std::string>();
  }
  out = Requested{adapter, "adapter"};
  const auto field = body.find("model");
  if (field == body.end() || !field->is_string() || model_.answers_to(field->get<std::string>())) {
    return std::nullopt;  // the served model (read_openai_request checks the type)
  }
  // Any other model names an adapter or a stack of them, as vLLM does.
  const std::string model = field->get<std::string>();
  auto unknown = [&](const std::string& detail) {
    std::string names = "'" + model_.id() + "'";
    for (const std::string& alias : model_.aliases()) names += ", '" + alias + "'";
    for (const LoadedAdapter& a : mounted_->list()) names += ", '" + a.id + "'";
    return api_error(ApiCode::kModelNotFound,
                     fmt::format("the model '{}' does not exist{}: this server serves {} (and stacks of its "
                                 "adapters, like \"a+b\")",
                                 model, detail, names),
                     "model");
  };
  auto selection = parse_adapter_spec(model);
  if (!selection || selection->none()) return unknown("");
  for (const AdapterChoice& c : selection->stack) {
    if (mounted_->find(c.id)) continue;
    if (options_.auto_load) continue;  // the prepare hook loaded it, or said why it could not
    auto found = store_.find(c.id);
    if (!found) {
      return unknown(model == c.id ? "" : fmt::format(" (no adapter '{}' is loaded or in the store)", c.id));
    }
    // In the store: says how to load it (or why it cannot be).
    return explain_selection_error(
        model, make_error("invalid_argument", "adapter '" + c.id + "' is not loaded"), "model");
  }
  if (adapter) {
    auto other = parse_adapter_spec(*adapter);
    if (!other) return bad_request(other.error().message, "adapter", ApiCode::kInvalidAdapterSpec);
    if (*other != *selection) {
      return bad_request(fmt::format("'model' selects adapter {} but 'adapter' selects {}: give one of them, "
                                     "or the same in both",
                                     selection->to_string(), other->to_string()),
                         "adapter");
    }
  }
  out = Requested{model, "model"};
  return std::nullopt;
}

std::optional<ApiError> AdapterService::select(const RequestJson& body, GenerationRequest& request) const {
  Requested wanted;
  if (auto error = requested(body, wanted)) return error;
  const std::optional<std::string>& spec = wanted.spec;
  auto lease = mounted_->select(spec ? std::optional<std::string_view>(*spec) : std::nullopt);
  if (!lease) return explain_selection_error(spec.value_or(""), lease.error(), wanted.param);
  request.adapters = lease->route();
  counters_->count_request(lease->selection());
  if (!request.adapters.empty())
    request.keep_alive = std::make_shared<AdapterLease>(std::move(lease).value());
  return std::nullopt;
}

void AdapterService::prepare(const RequestJson& body, PrepareDone done) {
  if (!options_.auto_load) return done(std::nullopt, nullptr);
  Requested wanted;
  if (requested(body, wanted) || !wanted.spec) return done(std::nullopt, nullptr);  // select says why
  auto selection = parse_adapter_spec(*wanted.spec);
  if (!selection) return done(std::nullopt, nullptr);
  // Leases on what is loaded, held until the request takes its own, so
  // that nothing unloads them in between.
  std::vector<AdapterLease> pins;
  std::vector<std::string> missing;
  for (const AdapterChoice& c : selection->stack) {
    auto pin = mounted_->select(AdapterSelection{{AdapterChoice{c.id, 1.0f}}});
    if (pin) {
      pins.push_back(std::move(pin).value());
    } else {
      missing.push_back(c.id);
    }
  }
  if (missing.empty())
    return done(std::nullopt, std::make_shared<std::vector<AdapterLease>>(std::move(pins)));
  const int max_loaded = options_.max_loaded;
  if (max_loaded > 0 && selection->stack.size() > size_t(max_loaded)) {
    return done(bad_request(fmt::format("'{}' stacks {} adapters but at most {} may be loaded at once "
                                        "(--max-loaded-adapters)",
                                        selection->to_string(), selection->stack.size(), max_loaded),
                            wanted.param),
                nullptr);
  }
  // Each missing adapter loads once; this request holds a lease on each as
  // it arrives, then takes one on the whole selection.
  struct Gather {
    std::mutex mutex;
    size_t remaining = 0;
    std::vector<AdapterLease> pins;
    std::optional<ApiError> error;
  };
  auto gather = std::make_shared<Gather>();
  gather->remaining = missing.size();
  gather->pins = std::move(pins);
  for (const std::string& id : missing) {
    auto arrived = [this, gather, id, done, selection = *selection,
                    param = wanted.param](Result<AdapterLease> pin) {
      std::unique_lock lock(gather->mutex);
      if (pin) {
        gather->pins.push_back(std::move(pin).value());
      } else if (!gather->error) {
        gather->error = auto_load_error(id, pin.error(), param);
      }
      if (--gather->remaining > 0) return;
      lock.unlock();
      if (gather->error) return done(gather->error, nullptr);
      auto lease = mounted_->select(selection);
      if (!lease) return done(explain_selection_error(selection.to_string(), lease.error(), param), nullptr);
      gather->pins.clear();
      done(std::nullopt, std::make_shared<AdapterLease>(std::move(lease).value()));
    };
    bool first = false;
    {
      std::lock_guard lock(auto_loads_->mutex);
      auto& waiters = auto_loads_->waiting[id];
      first = waiters.empty();
      waiters.push_back(std::move(arrived));
    }
    if (first) worker_->post([this, id] { auto_load(id); });
  }
}

ApiError AdapterService::auto_load_error(const std::string& id, const Error& error,
                                         const std::string& param) const {
  if (error.code == "not_found") {
    if (param == "model") {
      return api_error(ApiCode::kModelNotFound,
                       fmt::format("the model '{}' does not exist: it is neither '{}' nor an adapter loaded "
                                   "or in the adapter store",
                                   id, model_.id()),
                       "model");
    }
    return bad_request(fmt::format("unknown adapter '{}': it is neither loaded nor in the adapter store", id),
                       param, ApiCode::kAdapterNotFound);
  }
  ApiError out = api_error(error, param);
  out.message = fmt::format("cannot load adapter '{}': {}", id, error.message);
  return out;
}

void AdapterService::auto_load(const std::string& id) {
  auto give = [&](const std::function<Result<AdapterLease>()>& pin) {
    std::vector<AutoLoads::Waiter> waiters;
    {
      std::lock_guard lock(auto_loads_->mutex);
      waiters = std::move(auto_loads_->waiting[id]);
      auto_loads_->waiting.erase(id);
    }
    for (auto& waiter : waiters) waiter(pin());
  };
  const AdapterSelection just_this{{AdapterChoice{id, 1.0f}}};
  auto pin = [&]() -> Result<AdapterLease> { return mounted_->select(just_this); };
  if (mounted_->find(id)) return give(pin);  // loaded meanwhile (POST /v1/adapters)
  auto adapter = store_.find(id);
  if (!adapter) return give([&]() -> Result<AdapterLease> { return adapter.error(); });
  auto room = make_room(id);
  if (!room) return give([&]() -> Result<AdapterLease> { return room.error(); });
  if (!*room) {  // every loaded adapter is in use: try again when one goes idle
    std::lock_guard lock(auto_loads_->mutex);
    auto_loads_->need_room.push_back(id);
    // One may have gone idle since make_room looked, before on_idle could see this id.
    if (mounted_->least_recently_used_idle() && !auto_loads_->retry_posted) {
      auto_loads_->retry_posted = true;
      worker_->post([this] { retry_waiting_for_room(); });
    }
    return;
  }
  auto loaded = mounted_->load(*adapter, [this](const LoraWeights& w) { return mount(w); });
  if (!loaded) return give([&]() -> Result<AdapterLease> { return loaded.error(); });
  counters_->add(
      id, [](auto& a) -> auto& { return a.loads; });
  {
    std::lock_guard lock(auto_loads_->mutex);
    ++auto_loads_->loads;
  }
  give(pin);
}

void AdapterService::retry_waiting_for_room() {
  std::vector<std::string> ids;
  {
    std::lock_guard lock(auto_loads_->mutex);
    ids.swap(auto_loads_->need_room);
    auto_loads_->retry_posted = false;
  }
  for (const std::string& id : ids) auto_load(id);
}

Result<bool> AdapterService::make_room(const std::string& for_id) {
  const int max_loaded = options_.max_loaded;
  if (max_loaded <= 0) return true;
  std::vector<std::string> tried;  // unloads refused (a request took it meanwhile)
  while (mounted_->size() >= size_t(max_loaded)) {
    auto victim = mounted_->least_recently_used_idle(tried);
    if (!victim) return false;
    Status unloaded = mounted_->unload(*victim, [this](int slot) { return unmount(slot); });
    if (!unloaded) {
      if (unloaded.error().code != "in_use" && unloaded.error().code != "not_found") return unloaded.error();
      tried.push_back(*victim);
      continue;
    }
    counters_->add(
        *victim, [](auto& a) -> auto& { return a.unloads; });
    {
      std::lock_guard lock(auto_loads_->mutex);
      ++auto_loads_->evictions;
    }
    GRAFT_LOG_INFO(
        "unloaded adapter '{}', the least recently used, to make room for '{}' "
        "(--max-loaded-adapters {})",
        *victim, for_id, max_loaded);
  }
  return true;
}

void AdapterService::add_models(RequestJson& data) const {
  for (const LoadedAdapter& a : mounted_->list()) {
    data.push_back(RequestJson{{"id", a.id},
                               {"object", "model"},
                               {"created", model_.created()},
                               {"owned_by", "graft"},
                               {"root", a.path.string()},
                               {"parent", model_.id()}});
  }
}

void AdapterService::report_health(json& body) const {
  body["adapter"] = mounted_->default_selection().to_string();
  body["adapters_loaded"] = mounted_->list().size();
}

void AdapterService::report_stats(json& body) const {
  const AdapterSelection selection = mounted_->default_selection();
  json loaded = json::array();
  for (const LoadedAdapter& a : mounted_->list()) {
    loaded.push_back(loaded_json(a, selection, counters_->requests(a.id)));
  }
  // The requests that used each adapter (loaded now or not), and the base model ("none").
  json requests = json::object();
  uint64_t loads = 0, unloads = 0;
  {
    std::lock_guard lock(counters_->mutex);
    requests["none"] = counters_->base_requests;
    for (const auto& [id, n] : counters_->by_id) {
      if (n.requests > 0) requests[id] = n.requests;
      loads += n.loads;
      unloads += n.unloads;
    }
  }
  body["adapters"] = json{{"default", selection.to_string()}, {"loaded", loaded}, {"requests", requests}};
  std::lock_guard lock(auto_loads_->mutex);
  body["adapters"]["loads"] = loads;
  body["adapters"]["unloads"] = unloads;
  body["adapters"]["auto_load"] = {{"enabled", options_.auto_load},
                                   {"max_loaded", options_.max_loaded},
                                   {"loads", auto_loads_->loads},
                                   {"evictions", auto_loads_->evictions},
                                   {"waiting", auto_loads_->waiting.size()}};
}

void AdapterService::report_metrics(PromText& m) const {
  m.gauge("graft_adapters_loaded", "Adapters mounted now.", double(mounted_->list().size()));
  std::lock_guard lock(counters_->mutex);
  for (const auto& [id, n] : counters_->by_id) {
    m.counter("graft_adapter_loads_total", "Adapter loads, by adapter.", double(n.loads), {{"adapter", id}});
    m.counter("graft_adapter_unloads_total", "Adapter unloads, by adapter.", double(n.unloads),
              {{"adapter", id}});
    m.counter("graft_adapter_requests_total", "Requests that selected the adapter, by adapter.",
              double(n.requests), {{"adapter", id}});
  }
}

}  // namespace graft::server

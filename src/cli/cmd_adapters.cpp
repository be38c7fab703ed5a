// `graft adapters list | show | stamp | use`: the adapters on disk (the
// "available" state), their compatibility with a model, writing
// graft_adapter.json, and the selection graft's clients share.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "adapters/base_model.h"
#include "adapters/metadata.h"
#include "adapters/shared_selection.h"
#include "adapters/store.h"
#include "adapters/targets.h"
#include "cli/commands.h"
#include "cli/http_client.h"

namespace graft::cli {

namespace {

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "graft: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

// "0-15", "0,2,4-6".
std::string format_ranges(const std::vector<int>& values) {
  std::string out;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j > i ? fmt::format("{}-{}", values[i], values[j]) : std::to_string(values[i]);
    i = j + 1;
  }
  return out.empty() ? "-" : out;
}

std::string format_targets(const std::vector<LoraTarget>& targets) {
  // "all": every projection of a llama-shaped block (7), of qwen35's two
  // kinds of layer (12), or of gemma4's layers with their per-layer inputs (9).
  // (The targets come sorted: the first 7 are the block's when the 7th is ffn_down.)
  const bool block = targets.size() >= 7 && targets[6] == LoraTarget::ffn_down;
  if (block && (targets.size() == 7 || (targets.size() == 12 && targets.back() == LoraTarget::ssm_out) ||
                (targets.size() == 9 && targets.back() == LoraTarget::per_layer_proj))) {
    return "all";
  }
  std::string out;
  for (LoraTarget t : targets) out += (out.empty() ? "" : ",") + std::string(peft_target_name(t));
  return out.empty() ? "-" : out;
}

std::string format_bytes(uint64_t bytes) {
  if (bytes >= (1u << 20)) return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20));
  return fmt::format("{:.1f} KiB", double(bytes) / 1024);
}

std::string made_for(const AvailableAdapter& a) {
  if (a.metadata) {
    return a.metadata->base_repo.empty() ? short_fingerprint(a.metadata->base_fingerprint)
                                         : a.metadata->base_repo;
  }
  if (a.description && !a.description->base_model.empty()) return a.description->base_model + " (unstamped)";
  return "(unstamped)";
}

struct StoreOptions {
  std::vector<std::string> adapter_dirs;
  std::string model;
};

AdapterStore open_store(const StoreOptions& o) {
  std::vector<fs::path> dirs(o.adapter_dirs.begin(), o.adapter_dirs.end());
  return AdapterStore::with_user_store(dirs);
}

std::optional<BaseModel> open_model(const std::string& path) {
  if (path.empty()) return std::nullopt;
  auto base = BaseModel::open(path);
  if (!base) fail(base.error().message);
  return std::move(base).value();
}

void list(const StoreOptions& o) {
  const AdapterStore store = open_store(o);
  const std::optional<BaseModel> base = open_model(o.model);
  struct Row {
    AvailableAdapter adapter;
    Compatibility compat;
  };
  std::vector<Row> rows;
  for (auto& a : store.scan()) {
    Compatibility c = base ? check_compatibility(a, *base) : Compatibility{a.readable(), a.problem};
    rows.push_back({std::move(a), std::move(c)});
  }
  if (base) {
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& x, const Row& y) { return x.compat.compatible > y.compat.compatible; });
  }
  std::printf("adapter folders: ");
  for (size_t i = 0; i < store.roots().size(); ++i)
    std::printf("%s%s", i ? ", " : "", store.roots()[i].c_str());
  std::printf("\n");
  if (rows.empty()) {
    std::printf("no adapters found\n");
    return;
  }
  auto print_line = [](std::string line) {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
  };
  print_line(fmt::format("{:<24} {:<5} {:>5} {:>7} {:<8} {:<28} {:<32}{}", "ID", "FORM", "RANK", "SCALE",
                         "LAYERS", "TARGETS", "MADE FOR", base ? " COMPATIBLE" : ""));
  for (const Row& r : rows) {
    const AvailableAdapter& a = r.adapter;
    if (!a.readable()) {
      std::printf("%-24s unreadable: %s\n", a.id.c_str(), a.problem.c_str());
      continue;
    }
    const AdapterDescription& d = *a.description;
    std::string compat;
    if (base) compat = r.compat.compatible ? " yes" : " no: " + r.compat.reason;
    print_line(fmt::format("{:<24} {:<5} {:>5} {:>7.3g} {:<8} {:<28} {:<32}{}", a.id, format_name(d.format),
                           d.scaling.rank, d.scaling.scale(), format_ranges(d.layers()),
                           format_targets(d.targets()), made_for(a), compat));
  }
}

AvailableAdapter find_or_fail(const AdapterStore& store, const std::string& id) {
  auto adapter = store.find(id);
  if (!adapter) fail(adapter.error().message);
  return std::move(adapter).value();
}

void show(const StoreOptions& o, const std::string& id) {
  const AvailableAdapter a = find_or_fail(open_store(o), id);
  std::printf("id           %s\npath         %s\n", a.id.c_str(), a.path.c_str());
  if (!a.readable()) {
    std::printf("problem      %s\n", a.problem.c_str());
    throw CLI::RuntimeError(1);
  }
  const AdapterDescription& d = *a.description;
  std::printf("format       %s (%s, %s)\n", std::string(format_name(d.format)).c_str(),
              d.weights_path.c_str(), format_bytes(d.size_bytes).c_str());
  if (!d.architecture.empty()) std::printf("architecture %s\n", d.architecture.c_str());
  std::printf("rank         %d\nalpha        %g%s\nscale        %g\n", d.scaling.rank, d.scaling.alpha,
              d.scaling.rslora ? " (rsLoRA)" : "", d.scaling.scale());
  std::printf("layers       %s\ntargets      %s\n", format_ranges(d.layers()).c_str(),
              format_targets(d.targets()).c_str());
  std::printf("matrices     %zu pairs\n", d.modules.size());
  if (!d.base_model.empty()) std::printf("PEFT base    %s\n", d.base_model.c_str());
  if (a.metadata) {
    const AdapterMetadata& m = *a.metadata;
    std::printf("made for     %s\nfingerprint  %s\ncreated      %s\n",
                m.base_repo.empty() ? "-" : m.base_repo.c_str(), m.base_fingerprint.c_str(),
                m.created.empty() ? "-" : m.created.c_str());
    if (!m.task.empty()) std::printf("task         %s\n", m.task.c_str());
    if (!m.dataset.empty()) std::printf("dataset      %s\n", m.dataset.c_str());
    if (!m.notes.empty()) std::printf("notes        %s\n", m.notes.c_str());
  } else {
    std::printf("metadata     none (write it with: graft adapters stamp %s --base MODEL)\n", a.id.c_str());
  }
  if (const auto base = open_model(o.model)) {
    const Compatibility c = check_compatibility(a, *base);
    std::printf("compatible   %s\n", c.compatible ? "yes" : ("no: " + c.reason).c_str());
  }
}

struct StampOptions {
  std::string id;
  std::string repo;
  std::string task;
  std::string dataset;
  std::string notes;
};

void stamp(const StoreOptions& o, const StampOptions& s) {
  const AvailableAdapter a = find_or_fail(open_store(o), s.id);
  // Unreadable weights, or a graft_adapter.json that cannot be parsed (which stamping would overwrite).
  if (!a.readable()) fail(a.problem);
  const std::optional<BaseModel> base = open_model(o.model);
  if (Status fits = check_adapter_fits(*a.description, *base); !fits) fail(fits.error().message);
  AdapterMetadata m = describe_for_base(a.id, *a.description, *base);
  if (a.metadata) {  // keep what was recorded before
    m.created = a.metadata->created.empty() ? m.created : a.metadata->created;
    m.task = a.metadata->task;
    m.dataset = a.metadata->dataset;
    m.notes = a.metadata->notes;
    m.extra = a.metadata->extra;
  }
  if (!s.repo.empty()) m.base_repo = s.repo;
  if (!s.task.empty()) m.task = s.task;
  if (!s.dataset.empty()) m.dataset = s.dataset;
  if (!s.notes.empty()) m.notes = s.notes;
  if (Status written = write_adapter_metadata(a.metadata_path, m); !written) fail(written.error().message);
  std::printf("stamped %s for %s (fingerprint %s): %s\n", a.id.c_str(),
              m.base_repo.empty() ? "-" : m.base_repo.c_str(), short_fingerprint(m.base_fingerprint).c_str(),
              a.metadata_path.c_str());
}

struct UseOptions {
  std::string spec;
  bool clear = false;
  std::string url = "http://127.0.0.1:8080";
  std::string api_key;
};

// Through the running server when one answers (it checks the spec against what
// it has loaded and its store, and writes the file); else against the store here.
void use(const StoreOptions& o, const UseOptions& u) {
  if (u.clear == !u.spec.empty()) fail("give an adapter id, a spec such as a+b, none, or --clear");
  std::optional<AdapterSelection> selection;
  if (!u.clear) {
    auto parsed = parse_adapter_spec(u.spec);
    if (!parsed) fail(parsed.error().message);
    selection = std::move(parsed).value();
  }
  auto client = HttpClient::connect_to(u.url, u.api_key);
  if (!client) fail(client.error().message);
  const nlohmann::json body = {{"adapter", selection ? nlohmann::json(selection->to_string()) : nullptr}};
  auto reply = client->request("PUT", "/v1/adapters/selection", body.dump());
  if (reply) {
    if (reply->status != 200) fail(error_message(*reply));
    if (selection) {
      std::printf("graft's clients now use %s (saved by the server at %s)\n", selection->to_string().c_str(),
                  u.url.c_str());
    } else {
      std::printf("cleared the shared selection (at the server at %s)\n", u.url.c_str());
    }
    return;
  }
  if (reply.error().code != "unreachable") fail(reply.error().message);
  const fs::path path = shared_selection_path();
  if (!selection) {
    if (Status cleared = clear_shared_selection(path); !cleared) fail(cleared.error().message);
    std::printf("cleared the shared selection (%s)\n", path.c_str());
    return;
  }
  // No server: each adapter must be in the store and readable (and made for --model, given one).
  const std::optional<BaseModel> base = open_model(o.model);
  if (Status usable = check_selectable(*selection, open_store(o), base ? &*base : nullptr); !usable) {
    fail(usable.error().message);
  }
  auto written = write_shared_selection(path, *selection);
  if (!written) fail(written.error().message);
  std::printf(
      "graft's clients now use %s (no server at %s: checked against the adapter store; saved in %s)\n",
      selection->to_string().c_str(), u.url.c_str(), path.c_str());
}

void add_store_options(CLI::App* cmd, StoreOptions& o) {
  cmd->add_option("--adapter-dir", o.adapter_dirs,
                  "Another folder of adapters (repeatable), searched after the user's store");
}

}  // namespace

void add_adapters_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "adapters", "List, inspect and stamp the LoRA adapters on disk; choose one for graft's clients");
  cmd->require_subcommand(1);
  cmd->footer(fmt::format("The user's store is {} ($XDG_DATA_HOME/graft/adapters).",
                          AdapterStore::user_store().string()));

  auto list_o = std::make_shared<StoreOptions>();
  auto* list_cmd =
      cmd->add_subcommand("list", "List the adapters found (with --model: compatible ones first)");
  add_store_options(list_cmd, *list_o);
  list_cmd->add_option("--model", list_o->model, "GGUF model to check compatibility with");
  list_cmd->callback([list_o] { list(*list_o); });

  auto show_o = std::make_shared<StoreOptions>();
  auto show_id = std::make_shared<std::string>();
  auto* show_cmd = cmd->add_subcommand("show", "Show one adapter in detail");
  show_cmd->add_option("id", *show_id, "Adapter id")->required();
  add_store_options(show_cmd, *show_o);
  show_cmd->add_option("--model", show_o->model, "GGUF model to check compatibility with");
  show_cmd->callback([show_o, show_id] { show(*show_o, *show_id); });

  auto stamp_o = std::make_shared<StoreOptions>();
  auto stamp_s = std::make_shared<StampOptions>();
  auto* stamp_cmd =
      cmd->add_subcommand("stamp", "Record the base model an adapter is for (writes graft_adapter.json)");
  stamp_cmd->add_option("id", stamp_s->id, "Adapter id")->required();
  stamp_cmd->add_option("--base", stamp_o->model, "The base model's GGUF file")->required();
  stamp_cmd->add_option("--repo", stamp_s->repo, "The base model's repository id (default: from the GGUF)");
  stamp_cmd->add_option("--task", stamp_s->task, "What the adapter is for");
  stamp_cmd->add_option("--dataset", stamp_s->dataset, "What it was trained on");
  stamp_cmd->add_option("--notes", stamp_s->notes, "Free-form notes");
  add_store_options(stamp_cmd, *stamp_o);
  stamp_cmd->callback([stamp_o, stamp_s] { stamp(*stamp_o, *stamp_s); });

  auto use_o = std::make_shared<StoreOptions>();
  auto use_u = std::make_shared<UseOptions>();
  auto* use_cmd = cmd->add_subcommand(
      "use", "Choose the adapter graft's clients use (the Pi extension, the web page's \"use everywhere\")");
  use_cmd->add_option("spec", use_u->spec,
                      "An adapter id, a stack such as a+b or a@0.5+b, or none (the base model)");
  use_cmd->add_flag("--clear", use_u->clear, "Remove the shared selection: clients send requests unchanged");
  use_cmd->add_option("--url", use_u->url, "The running server that checks and saves it")
      ->capture_default_str()
      ->envname("GRAFT_URL");
  use_cmd->add_option("--api-key", use_u->api_key, "The server's API key")->envname("GRAFT_API_KEY");
  add_store_options(use_cmd, *use_o);
  use_cmd->add_option("--model", use_o->model, "Without a server: the GGUF model the adapters must fit");
  use_cmd->footer(
      fmt::format("With no server at --url, the adapters are checked against the store and the "
                  "choice is saved in {}.",
                  shared_selection_path().string()));
  use_cmd->callback([use_o, use_u] { use(*use_o, *use_u); });
}

}  // namespace graft::cli

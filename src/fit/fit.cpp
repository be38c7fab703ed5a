#include "fit/fit.h"

#include <fmt/format.h>

namespace graft::fit {

using json = nlohmann::json;

Usable usable_here(int64_t held) {
  const SystemMemory m = read_system_memory();
  Usable u;
  u.free = m.free() + held;
  u.source = m.source() + (held > 0 ? " + this server's own memory" : "");
  u.margin = safety_margin(u.free);
  u.bytes = std::max<int64_t>(0, u.free - u.margin);
  return u;
}

Usable usable_given(int64_t bytes) {
  Usable u;
  u.bytes = u.free = std::max<int64_t>(0, bytes);
  u.source = "--memory";
  return u;
}

Usable usable_on_machine(int gib) {
  const int64_t total = int64_t(gib) << 30;
  Usable u;
  u.free = total - std::max<int64_t>(int64_t(1) << 30, total / 10);
  u.source = fmt::format("{} GiB machine", gib);
  u.margin = safety_margin(u.free);
  u.bytes = std::max<int64_t>(0, u.free - u.margin);
  return u;
}

FitReport make_report(const FitModel& model, const ServeSettings& settings, const Usable& usable,
                      const ProbeResult* probe, bool machines) {
  FitReport r;
  r.model_path = model.path();
  r.arch = model.config().arch;
  r.quantization = model.quantization();
  r.file_bytes = model.file_bytes();
  r.n_ctx_train = model.config().n_ctx_train;
  r.settings = settings;
  r.usable = usable;
  r.answer = solve(model, settings, usable.bytes);
  if (probe) {
    r.probe = *probe;
    r.speed = predict_speed(model, settings, *probe);
    if (probe->threads != settings.threads) {
      r.speed_note =
          fmt::format("the probe ran {} threads, the settings use {}", probe->threads, settings.threads);
    }
  } else {
    r.speed_note = "no probe of this machine yet: run graft fit --probe";
  }
  if (machines) {
    for (int gib : kMachineSizesGib)
      r.machines.push_back({gib, solve(model, settings, usable_on_machine(gib).bytes)});
  }
  return r;
}

namespace {

json memory_json(const MemoryBreakdown& m) {
  return json{{"weights_mapped", m.weights_mapped},
              {"weights_repacked", m.weights_repacked},
              {"weights_copied", m.weights_copied},
              {"kv_cache", m.kv},
              {"compute", m.compute},
              {"adapters", m.adapters},
              {"requests", m.requests},
              {"tokenizer", m.tokenizer},
              {"fixed", m.fixed},
              {"total", m.total()}};
}

json answer_json(const FitAnswer& a) {
  return json{{"fits", a.fits},
              {"reason", a.reason},
              {"usable_bytes", a.usable},
              {"needed_bytes", a.need.total()},
              {"max_safe_context", a.max_safe_context},
              {"max_parallel", a.max_parallel},
              {"kv_budget_tokens", a.kv_budget_tokens}};
}

}  // namespace

json to_json(const FitReport& r) {
  const ServeSettings& s = r.settings;
  json j = {{"model",
             {{"path", r.model_path},
              {"arch", r.arch},
              {"quantization", r.quantization},
              {"file_bytes", r.file_bytes},
              {"n_ctx_train", r.n_ctx_train}}},
            {"settings",
             {{"ctx", s.n_ctx},
              {"parallel", s.parallel},
              {"kv_type", ggml_type_name(s.kv_type)},
              {"kv_budget_tokens", s.kv_budget_tokens},
              {"batch", s.batch},
              {"threads", s.threads},
              {"adapters", s.adapters},
              {"adapter_rank", s.adapter_rank}}},
            {"memory", memory_json(r.answer.need)},
            {"usable",
             {{"bytes", r.usable.bytes},
              {"free", r.usable.free},
              {"margin", r.usable.margin},
              {"source", r.usable.source}}}};
  j.update(answer_json(r.answer));
  if (r.speed) {
    json decode = json::object();
    for (const auto& [rows, tps] : r.speed->decode_tps) decode[std::to_string(rows)] = tps;
    j["speed"] = {{"prefill_tokens", r.speed->prompt_tokens},
                  {"prefill_tps", r.speed->prefill_tps},
                  {"decode_prompt_tokens", r.speed->decode_prompt},
                  {"decode_tokens", r.speed->decode_tokens},
                  {"decode_tps", decode},
                  {"decode_tps_full_context", r.speed->decode_tps_full_context},
                  {"probe", r.probe->to_json()}};
    j["predicted_decode_tps"] =
        r.speed->decode_tps.count(1) ? json(r.speed->decode_tps.at(1)) : json(nullptr);
  } else {
    j["speed"] = nullptr;
    j["predicted_decode_tps"] = nullptr;
  }
  if (!r.speed_note.empty()) j["speed_note"] = r.speed_note;
  json machines = json::array();
  for (const MachineRow& m : r.machines) {
    json row = answer_json(m.answer);
    row["memory_gib"] = m.memory_gib;
    row.erase("reason");
    machines.push_back(row);
  }
  j["machines"] = machines;
  return j;
}

std::string to_text(const FitReport& r) {
  const ServeSettings& s = r.settings;
  const MemoryBreakdown& m = r.answer.need;
  std::string out;
  out += fmt::format("model: {} ({}, {}, file {}, trained for {} tokens)\n", r.model_path, r.arch,
                     r.quantization, format_bytes(r.file_bytes), r.n_ctx_train);
  out += fmt::format("settings: context {} x {} requests, KV {} budget {} tokens, batch {}, {} threads",
                     s.n_ctx, s.parallel, ggml_type_name(s.kv_type), s.kv_budget_tokens, s.batch, s.threads);
  if (s.adapters > 0) out += fmt::format(", {} adapters of rank {}", s.adapters, s.adapter_rank);
  out += "\nmemory:\n";
  auto line = [&](const char* what, int64_t bytes, const std::string& note = {}) {
    out += fmt::format("  {:<22} {:>10}{}{}\n", what, format_bytes(bytes), note.empty() ? "" : "  ", note);
  };
  line("weights (mapped)", m.weights_mapped, "read in place from the file");
  line("weights (repacked)", m.weights_repacked);
  line("weights (copied)", m.weights_copied, "in huge pages");
  line("KV cache", m.kv, fmt::format("{} tokens", s.kv_budget_tokens));
  line("compute", m.compute, "measured: the graph of the largest batch");
  if (m.adapters > 0) line("adapter slots", m.adapters);
  line("requests", m.requests, "sampling state");
  line("tokenizer and chat", m.tokenizer, "measured");
  line("process", m.fixed, "measured");
  line("total", m.total());
  out += fmt::format("usable: {} ({} {} minus a {} margin)\n", format_bytes(r.usable.bytes), r.usable.source,
                     format_bytes(r.usable.free), format_bytes(r.usable.margin));
  out += fmt::format("fits: {}: {}\n", r.answer.fits ? "yes" : "NO", r.answer.reason);
  out += fmt::format("longest context at --parallel {}: {}\n", s.parallel, r.answer.max_safe_context);
  out += fmt::format("most requests at --ctx {}: {}\n", s.n_ctx, r.answer.max_parallel);
  out += fmt::format("recommended --kv-budget: {} tokens\n", r.answer.kv_budget_tokens);
  if (r.speed) {
    out += fmt::format("speed (probe: {}, {} threads, {}{}):\n", r.probe->cpu, r.probe->threads,
                       r.probe->measured_at, r.probe->quick ? ", quick" : "");
    out += fmt::format("  prefill ({} tokens)     {:>8.1f} tok/s\n", r.speed->prompt_tokens,
                       r.speed->prefill_tps);
    for (const auto& [rows, tps] : r.speed->decode_tps) {
      out += fmt::format("  decode, {} row{}        {:>8.1f} tok/s  ({} tokens after {}-token prompts)\n",
                         rows, rows == 1 ? " " : "s", tps, r.speed->decode_tokens, r.speed->decode_prompt);
    }
    out += fmt::format("  decode at {} tokens  {:>8.1f} tok/s\n", s.n_ctx, r.speed->decode_tps_full_context);
  }
  if (!r.speed_note.empty()) out += fmt::format("speed: {}\n", r.speed_note);
  if (!r.machines.empty()) {
    out += fmt::format("machines (same settings):\n  {:>6} {:>5} {:>18} {:>18} {:>16}\n", "memory", "fits",
                       fmt::format("context (x{})", s.parallel), fmt::format("parallel (ctx {})", s.n_ctx),
                       "kv budget");
    for (const MachineRow& row : r.machines) {
      out += fmt::format("  {:>3} GiB {:>5} {:>18} {:>18} {:>16}\n", row.memory_gib,
                         row.answer.fits ? "yes" : "no", row.answer.max_safe_context, row.answer.max_parallel,
                         row.answer.kv_budget_tokens);
    }
  }
  return out;
}

std::string refusal(const FitReport& r) {
  const ServeSettings& s = r.settings;
  std::string text = fmt::format("{} does not fit in memory with --ctx {} --parallel {}: it {}.",
                                 r.model_path, s.n_ctx, s.parallel, r.answer.reason);
  if (r.answer.max_safe_context > 0) {
    text += fmt::format(" The largest context that fits with --parallel {} is {} tokens (--ctx {}).",
                        s.parallel, r.answer.max_safe_context, r.answer.max_safe_context);
  } else {
    text += fmt::format(" Not even {} tokens of context fit with --parallel {}.", 256, s.parallel);
  }
  if (r.answer.max_parallel > 0) {
    text += fmt::format(" With --ctx {} at most {} requests fit (--parallel {}).", s.n_ctx,
                        r.answer.max_parallel, r.answer.max_parallel);
  }
  text += " See graft fit for the details.";
  return text;
}

}  // namespace graft::fit

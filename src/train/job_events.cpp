#include "train/job_events.h"

#include <cmath>

#include <fmt/format.h>

#include "util/log.h"

namespace graft {

namespace {

std::optional<double> number(const json& ev, const char* key) {
  auto it = ev.find(key);
  if (it == ev.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

int64_t integer(const json& ev, const char* key, int64_t fallback = 0) {
  auto it = ev.find(key);
  if (it == ev.end() || !it->is_number()) return fallback;
  return it->get<int64_t>();
}

std::string text(const json& ev, const char* key) {
  auto it = ev.find(key);
  return it != ev.end() && it->is_string() ? it->get<std::string>() : std::string();
}

json optional_json(const std::optional<double>& x) {
  return x ? json(*x) : json(nullptr);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

void on_start(const json& ev, JobRecord& job, JobChanges& changes) {
  job.total_steps = integer(ev, "total_steps", job.total_steps);
  const int64_t resumed = integer(ev, "resumed_from");
  json data = {{"total_steps", job.total_steps},
               {"train_examples", integer(ev, "train_examples")},
               {"valid_examples", integer(ev, "valid_examples")},
               {"truncated", integer(ev, "truncated")},
               {"train_tokens", integer(ev, "train_tokens")},
               {"resumed_from", resumed}};
  if (resumed > 0) {
    changes.events.push_back(message_event(fmt::format("Resumed from step {}", resumed), "info", data));
    return;
  }
  std::string message = fmt::format("Training started: {} steps over {} examples", job.total_steps,
                                    integer(ev, "train_examples"));
  if (integer(ev, "truncated") > 0) {
    message += fmt::format(" ({} cut at the longest sequence)", integer(ev, "truncated"));
  }
  changes.events.push_back(message_event(message, "info", data));
}

void on_step(const json& ev, JobRecord& job, JobChanges& changes) {
  const int64_t step = integer(ev, "step");
  if (step <= job.last_step) return;  // repeated after a resume: already recorded
  job.last_step = step;
  job.total_steps = integer(ev, "total_steps", job.total_steps);
  job.trained_tokens = integer(ev, "tokens", job.trained_tokens);
  job.train_loss = number(ev, "train_loss");
  if (auto eta = number(ev, "eta_s"); eta && std::isfinite(*eta)) {
    job.estimated_finish = unix_now() + static_cast<int64_t>(std::llround(*eta));
  }
  JobEvent e;
  e.type = "metrics";
  e.message =
      fmt::format("Step {}/{}: training loss={:.4f}", step, job.total_steps, job.train_loss.value_or(NAN));
  e.data = {{"step", step},
            {"total_steps", job.total_steps},
            {"train_loss", optional_json(job.train_loss)},
            {"lr", optional_json(number(ev, "lr"))},
            {"tokens", job.trained_tokens},
            {"tokens_per_s", optional_json(number(ev, "tokens_per_s"))},
            {"eta_s", optional_json(number(ev, "eta_s"))}};
  changes.events.push_back(std::move(e));
}

void on_val(const json& ev, JobRecord& job, JobChanges& changes) {
  const int64_t step = integer(ev, "step");
  if (step <= job.last_val_step) return;
  job.last_val_step = step;
  job.valid_loss = number(ev, "val_loss");
  JobEvent e;
  e.type = "metrics";
  e.message =
      fmt::format("Step {}/{}: validation loss={:.4f}", step, job.total_steps, job.valid_loss.value_or(NAN));
  e.data = {{"step", step}, {"total_steps", job.total_steps}, {"valid_loss", optional_json(job.valid_loss)}};
  changes.events.push_back(std::move(e));
}

void add_checkpoint(int64_t step, const std::string& path, JobRecord& job, JobChanges& changes) {
  if (step <= job.checkpoint_step) return;
  job.checkpoint_step = step;
  CheckpointRecord c;
  c.step = step;
  c.path = path;
  c.metrics = {{"step", step},
               {"train_loss", step == job.last_step ? optional_json(job.train_loss) : json(nullptr)},
               {"valid_loss", optional_json(job.valid_loss)}};
  changes.checkpoints.push_back(c);
  changes.events.push_back(message_event(fmt::format("Checkpoint saved at step {}", step), "info",
                                         {{"step", step}, {"path", path}}));
}

void on_done(const json& ev, JobRecord& job, JobChanges& changes, TrainerOutcome& outcome) {
  outcome.done = true;
  const std::string adapter = text(ev, "adapter_id").empty() ? job.adapter_id : text(ev, "adapter_id");
  job.fine_tuned_model = adapter;
  job.trained_tokens = integer(ev, "tokens", job.trained_tokens);
  if (auto loss = number(ev, "train_loss")) job.train_loss = loss;
  if (auto loss = number(ev, "val_loss")) job.valid_loss = loss;
  job.status = JobStatus::succeeded;
  job.finished_at = unix_now();
  job.estimated_finish.reset();
  job.error.reset();
  job.pause_reason = PauseReason::none;
  changes.events.push_back(message_event(fmt::format("New adapter created: {}", adapter), "info",
                                         {{"adapter_id", adapter},
                                          {"adapter_path", text(ev, "adapter_path")},
                                          {"train_loss", optional_json(job.train_loss)},
                                          {"valid_loss", optional_json(job.valid_loss)},
                                          {"tokens", job.trained_tokens},
                                          {"wall_s", optional_json(number(ev, "wall_s"))}}));
  changes.events.push_back(message_event("The job has successfully completed"));
}

void on_error(const json& ev, JobRecord& job, JobChanges& changes, TrainerOutcome& outcome) {
  outcome.failed = true;
  const std::string file = text(ev, "file");
  const int64_t line = integer(ev, "line");
  JobError error = data_error(job.spec, text(ev, "code").empty() ? "training_failed" : text(ev, "code"),
                              text(ev, "message"), file, line);
  if (error.message.empty()) error.message = "graft train reported an error";
  changes.events.push_back(
      message_event("Job failed: " + error.message, "error",
                    {{"code", error.code}, {"line", line > 0 ? json(line) : json(nullptr)}}));
  if (job.status == JobStatus::cancelled) return;  // the user's cancel stands
  job.status = JobStatus::failed;
  job.finished_at = unix_now();
  job.estimated_finish.reset();
  job.error = std::move(error);
}

}  // namespace

JobError data_error(const JobSpec& spec, std::string code, const std::string& message,
                    const std::string& file, int64_t line) {
  JobError error{std::move(code), message, ""};
  std::string id;
  if (!file.empty() && file == spec.training_path.string()) {
    error.param = "training_file";
    id = spec.training_file;
  } else if (!file.empty() && !spec.validation_path.empty() && file == spec.validation_path.string()) {
    error.param = "validation_file";
    id = spec.validation_file;
  }
  std::string rest = replace_all(message, spec.training_path.string(), spec.training_file);
  if (!spec.validation_path.empty())
    rest = replace_all(rest, spec.validation_path.string(), spec.validation_file);
  if (error.param.empty()) {
    error.message = rest;
    if (line > 0 && rest.find(fmt::format("line {}", line)) == std::string::npos) {
      error.message += fmt::format(" (line {})", line);
    }
    return error;
  }
  // "<id>:17: what" or "<id>: what" → "training_file <id>, line 17: what".
  for (const std::string& prefix : {fmt::format("{}:{}: ", id, line), id + ": "}) {
    if (rest.rfind(prefix, 0) == 0) {
      rest = rest.substr(prefix.size());
      break;
    }
  }
  error.message = line > 0 ? fmt::format("{} {}, line {}: {}", error.param, id, line, rest)
                           : fmt::format("{} {}: {}", error.param, id, rest);
  return error;
}

JobEvent message_event(std::string message, std::string level, json data) {
  JobEvent e;
  e.type = "message";
  e.level = std::move(level);
  e.message = std::move(message);
  e.data = std::move(data);
  return e;
}

void apply_trainer_line(std::string_view line, JobRecord& job, JobChanges& changes, TrainerOutcome& outcome) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
  json ev = json::parse(line.begin(), line.end(), nullptr, false);
  if (ev.is_discarded() || !ev.is_object() || !ev.contains("type") || !ev["type"].is_string()) {
    GRAFT_LOG_WARN("job {}: skipping a trainer line that is not an event: {}", job.id,
                   std::string(line.substr(0, 200)));
    return;
  }
  const std::string type = ev["type"].get<std::string>();
  if (type == "start") {
    on_start(ev, job, changes);
  } else if (type == "step") {
    on_step(ev, job, changes);
  } else if (type == "val") {
    on_val(ev, job, changes);
  } else if (type == "checkpoint") {
    add_checkpoint(integer(ev, "step"), text(ev, "path"), job, changes);
  } else if (type == "stopped") {
    outcome.stopped_at = integer(ev, "step");
  } else if (type == "done") {
    on_done(ev, job, changes, outcome);
  } else if (type == "error") {
    on_error(ev, job, changes, outcome);
  } else {
    GRAFT_LOG_WARN("job {}: skipping a trainer event of unknown type '{}'", job.id, type);
  }
}

}  // namespace graft

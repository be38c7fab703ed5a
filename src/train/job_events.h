// From `graft train --json` lines to a job's record: counters, status, and
// the OpenAI-shaped events and checkpoints to keep. A resumed trainer repeats
// the steps after its checkpoint; those are recorded once (the contract makes
// them equal), so the stored history has no step twice and none missing.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "train/job_store.h"

namespace graft {

// What the trainer said about how its run ended.
struct TrainerOutcome {
  bool done = false;                  // the adapter is in the store
  std::optional<int64_t> stopped_at;  // it stopped on request after this step
  bool failed = false;                // it reported an error (recorded in the job)
};

// An error about a job's data in the user's terms: the request field and the
// file id instead of where graft keeps the file, and the line ("training_file
// file-…, line 17: …"). `file` is the path the error came with ("" if none).
JobError data_error(const JobSpec& spec, std::string code, const std::string& message,
                    const std::string& file, int64_t line);

// An event with a message (type "message").
JobEvent message_event(std::string message, std::string level = "info", json data = nullptr);

// Applies one line of trainer output. Lines that are not a known event are
// skipped (and logged): the trainer's stdout carries only events.
void apply_trainer_line(std::string_view line, JobRecord& job, JobChanges& changes, TrainerOutcome& outcome);

}  // namespace graft

#include "train/job_store.h"

#include <chrono>
#include <random>
#include <stdexcept>

#include "util/log.h"

namespace graft {

namespace {

constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  filename TEXT NOT NULL,
  purpose TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  rows INTEGER NOT NULL,
  path TEXT NOT NULL,
  created_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  created_at INTEGER NOT NULL,
  spec TEXT NOT NULL,
  status TEXT NOT NULL,
  adapter_id TEXT NOT NULL,
  work_dir TEXT NOT NULL,
  fine_tuned_model TEXT,
  trained_tokens INTEGER NOT NULL,
  total_steps INTEGER NOT NULL,
  last_step INTEGER NOT NULL,
  last_val_step INTEGER NOT NULL,
  checkpoint_step INTEGER NOT NULL,
  train_loss REAL,
  valid_loss REAL,
  estimated_finish INTEGER,
  started_at INTEGER,
  finished_at INTEGER,
  error TEXT,
  pause_reason TEXT NOT NULL,
  pid INTEGER NOT NULL,
  failures INTEGER NOT NULL,
  events_offset INTEGER NOT NULL,
  queue_seq INTEGER NOT NULL,
  training_file TEXT NOT NULL,
  validation_file TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs(status, queue_seq);
CREATE TABLE IF NOT EXISTS events(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL REFERENCES jobs(id),
  created_at INTEGER NOT NULL,
  level TEXT NOT NULL,
  type TEXT NOT NULL,
  message TEXT NOT NULL,
  data TEXT);
CREATE INDEX IF NOT EXISTS events_by_job ON events(job_id, seq);
CREATE TABLE IF NOT EXISTS checkpoints(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL REFERENCES jobs(id),
  step INTEGER NOT NULL,
  path TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  metrics TEXT NOT NULL,
  UNIQUE(job_id, step));
)sql";

constexpr const char* kJobColumns =
    "id, created_at, spec, status, adapter_id, work_dir, fine_tuned_model, trained_tokens, total_steps, "
    "last_step, last_val_step, checkpoint_step, train_loss, valid_loss, estimated_finish, started_at, "
    "finished_at, error, pause_reason, pid, failures, events_offset, queue_seq, training_file, "
    "validation_file";

constexpr const char* kFileColumns = "id, filename, purpose, bytes, sha256, rows, path, created_at";

const char* pause_name(PauseReason reason) {
  switch (reason) {
    case PauseReason::user:
      return "user";
    case PauseReason::shutdown:
      return "shutdown";
    case PauseReason::none:
      break;
  }
  return "";
}

PauseReason parse_pause(const std::string& name) {
  if (name == "user") return PauseReason::user;
  if (name == "shutdown") return PauseReason::shutdown;
  return PauseReason::none;
}

FileRecord read_file_row(Statement& s) {
  FileRecord f;
  f.id = s.text(0);
  f.filename = s.text(1);
  f.purpose = s.text(2);
  f.bytes = s.int64(3);
  f.sha256 = s.text(4);
  f.rows = s.int64(5);
  f.path = s.text(6);
  f.created_at = s.int64(7);
  return f;
}

JobEvent read_event(Statement& s) {
  JobEvent e;
  e.seq = s.int64(0);
  e.job_id = s.text(1);
  e.created_at = s.int64(2);
  e.level = s.text(3);
  e.type = s.text(4);
  e.message = s.text(5);
  if (auto data = s.optional_text(6)) e.data = json::parse(*data, nullptr, false);
  return e;
}

CheckpointRecord read_checkpoint(Statement& s) {
  CheckpointRecord c;
  c.seq = s.int64(0);
  c.job_id = s.text(1);
  c.step = s.int64(2);
  c.path = s.text(3);
  c.created_at = s.int64(4);
  c.metrics = json::parse(s.text(5), nullptr, false);
  return c;
}

// Runs fn, turning a database failure (a thrown error) into an Error.
template <typename Fn>
auto guarded(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    GRAFT_LOG_ERROR("job store: {}", e.what());
    return make_error("io_error", std::string("the job store failed: ") + e.what());
  }
}

}  // namespace

std::string_view status_name(JobStatus status) {
  switch (status) {
    case JobStatus::validating_files:
      return "validating_files";
    case JobStatus::queued:
      return "queued";
    case JobStatus::running:
      return "running";
    case JobStatus::paused:
      return "paused";
    case JobStatus::succeeded:
      return "succeeded";
    case JobStatus::failed:
      return "failed";
    case JobStatus::cancelled:
      return "cancelled";
  }
  return "failed";
}

std::optional<JobStatus> parse_status(std::string_view name) {
  for (JobStatus s : {JobStatus::validating_files, JobStatus::queued, JobStatus::running, JobStatus::paused,
                      JobStatus::succeeded, JobStatus::failed, JobStatus::cancelled}) {
    if (status_name(s) == name) return s;
  }
  return std::nullopt;
}

bool is_final(JobStatus status) {
  return status == JobStatus::succeeded || status == JobStatus::failed || status == JobStatus::cancelled;
}

bool is_active(JobStatus status) {
  return !is_final(status);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string new_id(std::string_view prefix) {
  static std::mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(mutex);
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

Result<std::unique_ptr<JobStore>> JobStore::open(const fs::path& database) {
  GRAFT_TRY(std::unique_ptr<Database> db, Database::open(database));
  std::unique_ptr<JobStore> store(new JobStore(std::move(db)));
  try {
    store->create_schema();
  } catch (const std::exception& e) {
    return errorf("io_error", "cannot prepare the job store {}: {}", database.string(), e.what());
  }
  return store;
}

JobStore::~JobStore() = default;

void JobStore::create_schema() {
  Transaction tx(*db_);
  db_->exec(kSchema);
  Statement get = db_->prepare("SELECT value FROM meta WHERE key = 'schema_version'");
  if (get.step()) {
    const std::string version = get.text(0);
    if (version != std::to_string(kSchemaVersion)) {
      throw std::runtime_error("it was written by another version of graft (schema " + version +
                               ", this one reads " + std::to_string(kSchemaVersion) + ")");
    }
  } else {
    db_->prepare("INSERT INTO meta(key, value) VALUES('schema_version', ?)")
        .bind(1, std::to_string(kSchemaVersion))
        .run();
  }
  tx.commit();
}

Status JobStore::add_file(const FileRecord& f) {
  return guarded([&]() -> Status {
    std::lock_guard lock(mutex_);
    Transaction tx(*db_);
    db_->prepare(
           "INSERT INTO files(id, filename, purpose, bytes, sha256, rows, path, created_at) "
           "VALUES(?, ?, ?, ?, ?, ?, ?, ?)")
        .bind(1, f.id)
        .bind(2, f.filename)
        .bind(3, f.purpose)
        .bind(4, f.bytes)
        .bind(5, f.sha256)
        .bind(6, f.rows)
        .bind(7, f.path.string())
        .bind(8, f.created_at)
        .run();
    tx.commit();
    return {};
  });
}

Result<FileRecord> JobStore::file(std::string_view id) {
  return guarded([&]() -> Result<FileRecord> {
    std::lock_guard lock(mutex_);
    Statement s = db_->prepare(std::string("SELECT ") + kFileColumns + " FROM files WHERE id = ?");
    s.bind(1, id);
    if (!s.step()) return errorf("not_found", "no file '{}'", id);
    return read_file_row(s);
  });
}

Result<Page<FileRecord>> JobStore::list_files(std::string_view after, int limit, bool oldest_first) {
  return guarded([&]() -> Result<Page<FileRecord>> {
    std::lock_guard lock(mutex_);
    int64_t from = oldest_first ? 0 : INT64_MAX;
    if (!after.empty()) {
      Statement s = db_->prepare("SELECT seq FROM files WHERE id = ?");
      s.bind(1, after);
      if (!s.step()) return errorf("not_found", "no file '{}'", after);
      from = s.int64(0);
    }
    Statement s = db_->prepare(std::string("SELECT ") + kFileColumns +
                               (oldest_first ? " FROM files WHERE seq > ? ORDER BY seq LIMIT ?"
                                             : " FROM files WHERE seq < ? ORDER BY seq DESC LIMIT ?"));
    s.bind(1, from).bind(2, limit + 1);
    Page<FileRecord> page;
    while (s.step()) page.items.push_back(read_file_row(s));
    page.has_more = static_cast<int>(page.items.size()) > limit;
    if (page.has_more) page.items.pop_back();
    return page;
  });
}

Result<FileRecord> JobStore::remove_file(std::string_view id) {
  return guarded([&]() -> Result<FileRecord> {
    std::lock_guard lock(mutex_);
    Transaction tx(*db_);
    Statement s = db_->prepare(std::string("SELECT ") + kFileColumns + " FROM files WHERE id = ?");
    s.bind(1, id);
    if (!s.step()) return errorf("not_found", "no file '{}'", id);
    FileRecord f = read_file_row(s);
    Statement users = db_->prepare(
        "SELECT id, status FROM jobs WHERE (training_file = ?1 OR validation_file = ?1) AND status IN "
        "('validating_files', 'queued', 'running', 'paused') ORDER BY seq LIMIT 1");
    users.bind(1, id);
    if (users.step()) {
      return errorf("conflict", "file '{}' is used by job {} ({}); cancel the job or wait until it ends", id,
                    users.text(0), users.text(1));
    }
    db_->prepare("DELETE FROM files WHERE id = ?").bind(1, id).run();
    tx.commit();
    return f;
  });
}

JobRecord JobStore::read_job(Statement& s) {
  JobRecord j;
  j.id = s.text(0);
  j.created_at = s.int64(1);
  auto spec = job_spec_from_json(json::parse(s.text(2)));
  if (!spec) throw std::runtime_error("job " + j.id + ": " + spec.error().message);
  j.spec = std::move(*spec);
  auto status = parse_status(s.text(3));
  if (!status) throw std::runtime_error("job " + j.id + " has an unknown status '" + s.text(3) + "'");
  j.status = *status;
  j.adapter_id = s.text(4);
  j.work_dir = s.text(5);
  j.fine_tuned_model = s.optional_text(6);
  j.trained_tokens = s.int64(7);
  j.total_steps = s.int64(8);
  j.last_step = s.int64(9);
  j.last_val_step = s.int64(10);
  j.checkpoint_step = s.int64(11);
  j.train_loss = s.optional_real(12);
  j.valid_loss = s.optional_real(13);
  j.estimated_finish = s.optional_int64(14);
  j.started_at = s.optional_int64(15);
  j.finished_at = s.optional_int64(16);
  if (auto error = s.optional_text(17)) {
    json e = json::parse(*error);
    j.error = JobError{e.value("code", ""), e.value("message", ""), e.value("param", "")};
  }
  j.pause_reason = parse_pause(s.text(18));
  j.pid = s.int64(19);
  j.failures = s.int64(20);
  j.events_offset = s.int64(21);
  j.queue_seq = s.int64(22);
  return j;
}

std::optional<JobRecord> JobStore::find_job(std::string_view id) {
  Statement s = db_->prepare(std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = ?");
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return read_job(s);
}

void JobStore::write_job(const JobRecord& j) {
  std::optional<std::string> error;
  if (j.error)
    error = json{{"code", j.error->code}, {"message", j.error->message}, {"param", j.error->param}}.dump();
  Statement s = db_->prepare(
      "INSERT INTO jobs(id, created_at, spec, status, adapter_id, work_dir, fine_tuned_model, "
      "trained_tokens, "
      "total_steps, last_step, last_val_step, checkpoint_step, train_loss, valid_loss, estimated_finish, "
      "started_at, finished_at, error, pause_reason, pid, failures, events_offset, queue_seq, training_file, "
      "validation_file) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, "
      "?18, "
      "?19, ?20, ?21, ?22, ?23, ?24, ?25) "
      "ON CONFLICT(id) DO UPDATE SET spec = ?3, status = ?4, adapter_id = ?5, work_dir = ?6, "
      "fine_tuned_model = ?7, trained_tokens = ?8, total_steps = ?9, last_step = ?10, last_val_step = ?11, "
      "checkpoint_step = ?12, train_loss = ?13, valid_loss = ?14, estimated_finish = ?15, started_at = ?16, "
      "finished_at = ?17, error = ?18, pause_reason = ?19, pid = ?20, failures = ?21, events_offset = ?22, "
      "queue_seq = ?23, training_file = ?24, validation_file = ?25");
  s.bind(1, j.id)
      .bind(2, j.created_at)
      .bind(3, to_json(j.spec).dump())
      .bind(4, status_name(j.status))
      .bind(5, j.adapter_id)
      .bind(6, j.work_dir.string())
      .bind(7, j.fine_tuned_model)
      .bind(8, j.trained_tokens)
      .bind(9, j.total_steps)
      .bind(10, j.last_step)
      .bind(11, j.last_val_step)
      .bind(12, j.checkpoint_step)
      .bind(13, j.train_loss)
      .bind(14, j.valid_loss)
      .bind(15, j.estimated_finish)
      .bind(16, j.started_at)
      .bind(17, j.finished_at)
      .bind(18, error)
      .bind(19, pause_name(j.pause_reason))
      .bind(20, j.pid)
      .bind(21, j.failures)
      .bind(22, j.events_offset)
      .bind(23, j.queue_seq)
      .bind(24, j.spec.training_file)
      .bind(25, j.spec.validation_file)
      .run();
}

void JobStore::insert_changes(const std::string& job_id, JobChanges& changes) {
  const int64_t now = unix_now();
  for (JobEvent& e : changes.events) {
    e.job_id = job_id;
    if (e.created_at == 0) e.created_at = now;
    std::optional<std::string> data;
    if (!e.data.is_null()) data = e.data.dump();
    db_->prepare(
           "INSERT INTO events(job_id, created_at, level, type, message, data) VALUES(?, ?, ?, ?, ?, ?)")
        .bind(1, job_id)
        .bind(2, e.created_at)
        .bind(3, e.level)
        .bind(4, e.type)
        .bind(5, e.message)
        .bind(6, data)
        .run();
    e.seq = db_->last_insert_rowid();
  }
  for (CheckpointRecord& c : changes.checkpoints) {
    c.job_id = job_id;
    if (c.created_at == 0) c.created_at = now;
    db_->prepare(
           "INSERT OR REPLACE INTO checkpoints(job_id, step, path, created_at, metrics) VALUES(?, ?, ?, ?, "
           "?)")
        .bind(1, job_id)
        .bind(2, c.step)
        .bind(3, c.path)
        .bind(4, c.created_at)
        .bind(5, c.metrics.dump())
        .run();
    c.seq = db_->last_insert_rowid();
  }
}

Result<JobRecord> JobStore::create_job(JobRecord job, JobChanges changes) {
  auto result = guarded([&]() -> Result<JobRecord> {
    std::lock_guard lock(mutex_);
    Transaction tx(*db_);
    if (find_job(job.id)) return errorf("conflict", "a job with id '{}' exists", job.id);
    Statement same = db_->prepare(
        "SELECT id FROM jobs WHERE adapter_id = ? AND status IN ('validating_files', 'queued', 'running', "
        "'paused') LIMIT 1");
    same.bind(1, job.adapter_id);
    if (same.step()) {
      return errorf("conflict", "job {} is already making adapter '{}'", same.text(0), job.adapter_id);
    }
    Statement next = db_->prepare("SELECT COALESCE(MAX(queue_seq), 0) + 1 FROM jobs");
    next.step();
    job.queue_seq = next.int64(0);
    write_job(job);
    insert_changes(job.id, changes);
    tx.commit();
    return job;
  });
  if (result) notify(result->id);
  return result;
}

Result<JobRecord> JobStore::job(std::string_view id) {
  return guarded([&]() -> Result<JobRecord> {
    std::lock_guard lock(mutex_);
    auto job = find_job(id);
    if (!job) return errorf("not_found", "no fine-tuning job '{}'", id);
    return std::move(*job);
  });
}

Result<Page<JobRecord>> JobStore::list_jobs(std::string_view after, int limit) {
  return guarded([&]() -> Result<Page<JobRecord>> {
    std::lock_guard lock(mutex_);
    int64_t before = INT64_MAX;
    if (!after.empty()) {
      Statement s = db_->prepare("SELECT seq FROM jobs WHERE id = ?");
      s.bind(1, after);
      if (!s.step()) return errorf("not_found", "no fine-tuning job '{}'", after);
      before = s.int64(0);
    }
    Statement s = db_->prepare(std::string("SELECT ") + kJobColumns +
                               " FROM jobs WHERE seq < ? ORDER BY seq DESC LIMIT ?");
    s.bind(1, before).bind(2, limit + 1);
    Page<JobRecord> page;
    while (s.step()) page.items.push_back(read_job(s));
    page.has_more = static_cast<int>(page.items.size()) > limit;
    if (page.has_more) page.items.pop_back();
    return page;
  });
}

std::vector<JobRecord> JobStore::jobs_with_status(JobStatus status) {
  auto result = guarded([&]() -> Result<std::vector<JobRecord>> {
    std::lock_guard lock(mutex_);
    Statement s = db_->prepare(std::string("SELECT ") + kJobColumns +
                               " FROM jobs WHERE status = ? ORDER BY queue_seq, seq");
    s.bind(1, status_name(status));
    std::vector<JobRecord> jobs;
    while (s.step()) jobs.push_back(read_job(s));
    return jobs;
  });
  return result ? std::move(*result) : std::vector<JobRecord>{};
}

Result<JobRecord> JobStore::update_job(std::string_view id,
                                       const std::function<Status(JobRecord&, JobChanges&)>& change) {
  bool added_events = false;
  auto result = guarded([&]() -> Result<JobRecord> {
    std::lock_guard lock(mutex_);
    Transaction tx(*db_);
    auto job = find_job(id);
    if (!job) return errorf("not_found", "no fine-tuning job '{}'", id);
    JobChanges changes;
    GRAFT_TRY_STATUS(change(*job, changes));
    if (changes.to_back_of_queue) {
      Statement next = db_->prepare("SELECT COALESCE(MAX(queue_seq), 0) + 1 FROM jobs");
      next.step();
      job->queue_seq = next.int64(0);
    }
    write_job(*job);
    insert_changes(job->id, changes);
    tx.commit();
    added_events = !changes.events.empty();
    return std::move(*job);
  });
  if (result && added_events) notify(result->id);
  return result;
}

Result<Page<JobEvent>> JobStore::list_events(std::string_view job_id, std::optional<int64_t> after,
                                             int limit) {
  return guarded([&]() -> Result<Page<JobEvent>> {
    std::lock_guard lock(mutex_);
    if (!find_job(job_id)) return errorf("not_found", "no fine-tuning job '{}'", job_id);
    Statement s = db_->prepare(
        "SELECT seq, job_id, created_at, level, type, message, data FROM events WHERE job_id = ? AND seq < ? "
        "ORDER BY seq DESC LIMIT ?");
    s.bind(1, job_id).bind(2, after.value_or(INT64_MAX)).bind(3, limit + 1);
    Page<JobEvent> page;
    while (s.step()) page.items.push_back(read_event(s));
    page.has_more = static_cast<int>(page.items.size()) > limit;
    if (page.has_more) page.items.pop_back();
    return page;
  });
}

Result<JobStore::EventsSince> JobStore::events_since(std::string_view job_id, int64_t seq, int limit) {
  return guarded([&]() -> Result<EventsSince> {
    std::lock_guard lock(mutex_);
    Transaction tx(*db_);  // the events and the status from one snapshot
    auto job = find_job(job_id);
    if (!job) return errorf("not_found", "no fine-tuning job '{}'", job_id);
    Statement s = db_->prepare(
        "SELECT seq, job_id, created_at, level, type, message, data FROM events WHERE job_id = ? AND seq > ? "
        "ORDER BY seq LIMIT ?");
    s.bind(1, job_id).bind(2, seq).bind(3, limit + 1);
    EventsSince out;
    while (s.step()) out.events.push_back(read_event(s));
    out.more = static_cast<int>(out.events.size()) > limit;
    if (out.more) out.events.pop_back();
    out.status = job->status;
    tx.commit();
    return out;
  });
}

Result<Page<CheckpointRecord>> JobStore::list_checkpoints(std::string_view job_id,
                                                          std::optional<int64_t> after, int limit) {
  return guarded([&]() -> Result<Page<CheckpointRecord>> {
    std::lock_guard lock(mutex_);
    if (!find_job(job_id)) return errorf("not_found", "no fine-tuning job '{}'", job_id);
    Statement s = db_->prepare(
        "SELECT seq, job_id, step, path, created_at, metrics FROM checkpoints WHERE job_id = ? AND seq < ? "
        "ORDER BY seq DESC LIMIT ?");
    s.bind(1, job_id).bind(2, after.value_or(INT64_MAX)).bind(3, limit + 1);
    Page<CheckpointRecord> page;
    while (s.step()) page.items.push_back(read_checkpoint(s));
    page.has_more = static_cast<int>(page.items.size()) > limit;
    if (page.has_more) page.items.pop_back();
    return page;
  });
}

int64_t JobStore::subscribe(std::string job_id, std::function<void()> fn) {
  std::lock_guard lock(subscribers_mutex_);
  const int64_t token = next_token_++;
  subscribers_[token] = Subscriber{std::move(job_id), std::make_shared<std::function<void()>>(std::move(fn))};
  return token;
}

void JobStore::unsubscribe(int64_t token) {
  std::lock_guard lock(subscribers_mutex_);
  subscribers_.erase(token);
}

void JobStore::unsubscribe_all() {
  std::lock_guard lock(subscribers_mutex_);
  subscribers_.clear();
}

void JobStore::notify(const std::string& job_id) {
  std::vector<std::shared_ptr<std::function<void()>>> fns;
  {
    std::lock_guard lock(subscribers_mutex_);
    for (auto& [token, s] : subscribers_) {
      if (s.job_id == job_id) fns.push_back(s.fn);
    }
  }
  for (auto& fn : fns) (*fn)();
}

}  // namespace graft

#include "train/job_db.h"

#include <sqlite3.h>

#include <stdexcept>

#include <fmt/format.h>

#include "util/log.h"

namespace graft {

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) {
  other.stmt_ = nullptr;
}

Statement& Statement::bind(int index, int64_t value) {
  if (sqlite3_bind_int64(stmt_, index, value) != SQLITE_OK) db_->fail("bind");
  return *this;
}

Statement& Statement::bind(int index, double value) {
  if (sqlite3_bind_double(stmt_, index, value) != SQLITE_OK) db_->fail("bind");
  return *this;
}

Statement& Statement::bind(int index, std::string_view value) {
  if (sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT) !=
      SQLITE_OK) {
    db_->fail("bind");
  }
  return *this;
}

Statement& Statement::bind(int index, std::nullopt_t) {
  if (sqlite3_bind_null(stmt_, index) != SQLITE_OK) db_->fail("bind");
  return *this;
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_->fail(sqlite3_sql(stmt_));
}

void Statement::run() {
  while (step()) {
  }
}

bool Statement::is_null(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

int64_t Statement::int64(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

double Statement::real(int column) const {
  return sqlite3_column_double(stmt_, column);
}

std::string Statement::text(int column) const {
  const auto* data = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
  if (!data) return {};
  return std::string(data, static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::optional<int64_t> Statement::optional_int64(int column) const {
  if (is_null(column)) return std::nullopt;
  return int64(column);
}

std::optional<double> Statement::optional_real(int column) const {
  if (is_null(column)) return std::nullopt;
  return real(column);
}

std::optional<std::string> Statement::optional_text(int column) const {
  if (is_null(column)) return std::nullopt;
  return text(column);
}

Result<std::unique_ptr<Database>> Database::open(const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return errorf("io_error", "cannot create {}: {}", path.parent_path().string(), ec.message());
  sqlite3* handle = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &handle,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = handle ? sqlite3_errmsg(handle) : sqlite3_errstr(rc);
    sqlite3_close(handle);
    return errorf("io_error", "cannot open the database {}: {}", path.string(), message);
  }
  std::unique_ptr<Database> db(new Database(handle, path));
  try {
    sqlite3_busy_timeout(handle, 5000);
    db->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;");
    if (db->journal_mode() != "wal") {
      return errorf("io_error", "the database {} cannot use write-ahead logging", path.string());
    }
  } catch (const std::exception& e) {
    return make_error("io_error", e.what());
  }
  return db;
}

Database::~Database() {
  sqlite3_close(db_);
}

Statement Database::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr) != SQLITE_OK)
    fail(sql);
  return Statement(*this, stmt);
}

void Database::exec(std::string_view sql) {
  std::string text(sql);
  char* message = nullptr;
  if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    std::string what = message ? message : "unknown error";
    sqlite3_free(message);
    throw std::runtime_error(fmt::format("database {}: {} (in: {})", path_.string(), what, text));
  }
}

int64_t Database::last_insert_rowid() const {
  return sqlite3_last_insert_rowid(db_);
}

int Database::changes() const {
  return sqlite3_changes(db_);
}

std::string Database::journal_mode() {
  Statement s = prepare("PRAGMA journal_mode");
  return s.step() ? s.text(0) : std::string();
}

void Database::fail(std::string_view what) const {
  throw std::runtime_error(
      fmt::format("database {}: {} (in: {})", path_.string(), sqlite3_errmsg(db_), what));
}

Transaction::Transaction(Database& db) : db_(db) {
  db_.exec("BEGIN IMMEDIATE");
}

Transaction::~Transaction() {
  if (done_) return;
  try {
    db_.exec("ROLLBACK");
  } catch (const std::exception& e) {
    GRAFT_LOG_ERROR("{}", e.what());
  }
}

void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace graft

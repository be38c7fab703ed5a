// A thin RAII layer over SQLite for the job store: a connection, prepared
// statements with bind/step/column, and transactions. Nothing about jobs here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "util/files.h"
#include "util/result.h"

struct sqlite3;
struct sqlite3_stmt;

namespace graft {

class Database;

// One prepared statement. Bind parameters are numbered from 1; columns from 0.
class Statement {
 public:
  Statement(Database& db, sqlite3_stmt* stmt) : db_(&db), stmt_(stmt) {}
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& operator=(Statement&&) = delete;

  Statement& bind(int index, int64_t value);
  Statement& bind(int index, double value);
  Statement& bind(int index, std::string_view value);
  Statement& bind(int index, const char* value) { return bind(index, std::string_view(value)); }
  Statement& bind(int index, const std::string& value) { return bind(index, std::string_view(value)); }
  Statement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  Statement& bind(int index, std::nullopt_t);
  template <typename T>
  Statement& bind(int index, const std::optional<T>& value) {
    return value ? bind(index, *value) : bind(index, std::nullopt);
  }

  // Runs one step: true while a row is ready, false when done. Errors throw
  // (inside the store, a failed step means the disk or database is broken).
  bool step();
  // Runs a statement that returns no rows.
  void run();

  bool is_null(int column) const;
  int64_t int64(int column) const;
  double real(int column) const;
  std::string text(int column) const;
  std::optional<int64_t> optional_int64(int column) const;
  std::optional<double> optional_real(int column) const;
  std::optional<std::string> optional_text(int column) const;

 private:
  Database* db_;
  sqlite3_stmt* stmt_;
};

// One connection. Not thread-safe by itself: the job store serialises its use.
class Database {
 public:
  // Opens (creating if missing) the database file, in WAL mode with full
  // syncs, foreign keys on, and a busy timeout.
  static Result<std::unique_ptr<Database>> open(const fs::path& path);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  Statement prepare(std::string_view sql);
  void exec(std::string_view sql);  // one or more statements, no results
  int64_t last_insert_rowid() const;
  int changes() const;
  std::string journal_mode();

  // Throws std::runtime_error naming the database and SQLite's message.
  [[noreturn]] void fail(std::string_view what) const;

 private:
  explicit Database(sqlite3* db, fs::path path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  fs::path path_;
};

// BEGIN IMMEDIATE on construction; ROLLBACK on destruction unless commit().
class Transaction {
 public:
  explicit Transaction(Database& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Database& db_;
  bool done_ = false;
};

}  // namespace graft

#include "results/store.h"

#include <sqlite3.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <ctime>
#include <thread>
#include <type_traits>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/util/error.h"
#include "engine/util/hash.h"
#include "engine/util/io.h"
#include "results/schema.h"
#include "results/stats.h"

namespace kvb::results {

namespace {

std::string now_iso() {
  auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// A prepared statement bound to a Store's error reporting.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql, const std::function<void(int, const std::string&)>& err)
      : db_(db), err_(err) {
    int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &st_, nullptr);
    if (rc != SQLITE_OK) err_(rc, "preparing SQL");
  }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, const std::string& s) {
    ok(sqlite3_bind_text(st_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Stmt& bind(int i, const char* s) { return bind(i, std::string(s)); }
  Stmt& bind(int i, int64_t v) {
    ok(sqlite3_bind_int64(st_, i, v));
    return *this;
  }
  Stmt& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  Stmt& bind(int i, uint64_t v) { return bind(i, static_cast<int64_t>(v)); }
  Stmt& bind(int i, double v) {
    ok(sqlite3_bind_double(st_, i, v));
    return *this;
  }
  Stmt& bind(int i, const std::optional<double>& v) {
    if (v) return bind(i, *v);
    ok(sqlite3_bind_null(st_, i));
    return *this;
  }
  Stmt& bind(int i, const std::optional<int64_t>& v) {
    if (v) return bind(i, *v);
    ok(sqlite3_bind_null(st_, i));
    return *this;
  }
  Stmt& bind(int i, const std::optional<std::string>& v) {
    if (v) return bind(i, *v);
    ok(sqlite3_bind_null(st_, i));
    return *this;
  }
  Stmt& bind(int i, bool v) { return bind(i, static_cast<int64_t>(v ? 1 : 0)); }
  /// Binds `v...` to parameters 1, 2, … in order (the overloads above).
  template <class... T>
  Stmt& bind_row(const T&... v) {
    int i = 1;
    (bind(i++, v), ...);
    return *this;
  }
  /// Steps once; true when a row is available.
  bool step() {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    err_(rc, "executing SQL");
    return false;
  }
  void run() {
    while (step()) {
    }
    reset();
  }
  void reset() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  bool is_null(int c) { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
  std::string text(int c) {
    const unsigned char* p = sqlite3_column_text(st_, c);
    return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(st_, c)) : "";
  }
  /// The column as an integer / a number. Text or a blob where a number belongs (SQLite would
  /// read it as 0) is refused with SQLITE_MISMATCH naming the column; NULL reads as 0.
  int64_t i64(int c) {
    numeric(c);
    return sqlite3_column_int64(st_, c);
  }
  double dbl(int c) {
    numeric(c);
    return sqlite3_column_double(st_, c);
  }
  std::optional<double> opt_dbl(int c) {
    if (is_null(c)) return std::nullopt;
    return dbl(c);
  }
  int columns() { return sqlite3_column_count(st_); }
  /// Reads the current row's columns 0, 1, … into `out...` in order, each by its C++ type:
  /// integers (int64_t, int, uint64_t: the column's int64 cast), double, std::optional<double>
  /// and std::optional<int64_t> (NULL = nullopt) and std::string (NULL = ""). The caller lists the columns in SELECT order.
  template <class... T>
  void row(T&... out) {
    int c = 0;
    (column(c++, out), ...);
  }

 private:
  void column(int c, std::string& v) { v = text(c); }
  void column(int c, double& v) { v = dbl(c); }
  void column(int c, std::optional<double>& v) { v = opt_dbl(c); }
  void column(int c, std::optional<int64_t>& v) {
    if (is_null(c)) v = std::nullopt;
    else v = i64(c);
  }
  template <class I>
  requires std::is_integral_v<I>
  void column(int c, I& v) { v = static_cast<I>(i64(c)); }
  void ok(int rc) {
    if (rc != SQLITE_OK) err_(rc, "binding SQL parameter");
  }
  void numeric(int c) {
    const int t = sqlite3_column_type(st_, c);
    if (t != SQLITE_TEXT && t != SQLITE_BLOB) return;
    const char* name = sqlite3_column_name(st_, c);
    std::string v = t == SQLITE_TEXT ? text(c) : "(a blob)";
    if (v.size() > 40) v = v.substr(0, 40) + "...";
    for (auto& ch : v)
      if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
    err_(SQLITE_MISMATCH, fmt::format("column '{}': expected a number, found '{}'", name ? name : "?", v));
  }
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
  std::function<void(int, const std::string&)> err_;
};

}  // namespace

std::string inputs_digest(const std::vector<RunInput>& inputs) {
  std::vector<std::string> lines;
  for (const auto& in : inputs) lines.push_back(in.role + "\t" + in.owner + "\t" + in.name + "\t" + in.sha256 + "\n");
  std::sort(lines.begin(), lines.end());
  std::string cat;
  for (const auto& l : lines) cat += l;
  return sha256_hex(cat);
}

std::optional<std::string> describe_input_change(const std::vector<RunInput>& before, const std::vector<RunInput>& now,
                                                 int64_t run_id) {
  auto key = [](const RunInput& in) { return in.owner + "\n" + in.name; };
  std::map<std::string, const RunInput*> old_by, new_by;
  for (const auto& in : before) old_by[key(in)] = &in;
  for (const auto& in : now) new_by[key(in)] = &in;
  auto short_sha = [](const std::string& h) { return h.substr(0, 16); };
  std::vector<std::string> changes;
  for (const auto& in : now) {  // in this process's order: weights first
    auto it = old_by.find(key(in));
    if (it == old_by.end())
      changes.push_back(fmt::format("{}: not read by run {} (a new {} file)", in.path, run_id, in.role));
    else if (it->second->sha256 != in.sha256 || it->second->role != in.role)
      changes.push_back(fmt::format("{}: content changed since run {} ({} sha256 {} -> {})", in.path, run_id, in.role,
                                    short_sha(it->second->sha256), short_sha(in.sha256)));
  }
  for (const auto& in : before)
    if (!new_by.count(key(in)))
      changes.push_back(fmt::format("{}: read by run {} ({} file) but not now", in.path, run_id, in.role));
  if (changes.empty()) return std::nullopt;
  if (changes.size() > 1) changes.front() += fmt::format(", and {} more changed input(s)", changes.size() - 1);
  return changes.front();
}

std::string default_run_key(const RunInfo& info) {
  nlohmann::json j{{"version", info.kvbench_version},
                   {"git_sha", info.git_sha},
                   {"backend", info.backend},
                   {"config", info.config},
                   {"name", info.name}};
  return sha256_hex(j.dump());
}

void Store::raise(int rc, const std::string& what) {
  last_rc_ = rc;
  int primary = rc & 0xff;
  std::string detail = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  switch (primary) {
    case SQLITE_FULL:
      throw Error(path_ + ": disk full (or database size limit reached) while " + what +
                      "; free some space and rerun — stored batches are kept (" + detail + ")",
                  ErrorKind::kRuntime);
    case SQLITE_READONLY:
      throw Error(path_ + ": database is read-only while " + what +
                      "; check the permissions of the file and its directory (SQLite writes "
                      "-wal/-shm files next to it) (" +
                      detail + ")",
                  ErrorKind::kRuntime);
    case SQLITE_MISMATCH:  // Stmt::numeric: a value of the wrong type in a kvbench column
      throw Error(path_ + ": " + what + " (the file was changed outside kvbench: restore it from a copy)",
                  ErrorKind::kInput);
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      throw Error(path_ + ": not a SQLite database or the file is corrupt (" + detail +
                      "); move it aside and rerun, or restore it from a copy",
                  ErrorKind::kInput);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      throw Error(path_ + ": database is locked by another process (waited 30 s) while " + what + " (" + detail + ")",
                  ErrorKind::kRuntime);
    case SQLITE_CANTOPEN:
      throw Error(path_ +
                      ": cannot open the database (does the directory exist and is it "
                      "writable?) (" +
                      detail + ")",
                  ErrorKind::kRuntime);
    case SQLITE_IOERR: throw Error(path_ + ": I/O error while " + what + " (" + detail + ")", ErrorKind::kRuntime);
    default:
      throw Error(path_ + ": SQLite error while " + what + ": " + detail + " (code " + std::to_string(rc) + ")",
                  ErrorKind::kRuntime);
  }
}

void Store::check(int rc, const std::string& what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) raise(rc, what);
}

void Store::exec(const std::string& sql) {
  char* msg = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &msg);
  if (msg) sqlite3_free(msg);
  check(rc, "executing SQL");
}

namespace {
// RAII transaction: BEGIN IMMEDIATE ... COMMIT, rolled back on exception.
class Txn {
 public:
  explicit Txn(Store& s) : s_(s) { s_.exec("BEGIN IMMEDIATE"); }
  void commit() {
    s_.exec("COMMIT");
    done_ = true;
  }
  ~Txn() {
    if (done_) return;
    try {
      s_.exec("ROLLBACK");
    } catch (...) {  // nothing to roll back (the failed statement ended the transaction)
    }
  }

 private:
  Store& s_;
  bool done_ = false;
};
}  // namespace

Store::Store(const std::string& path, Mode mode) : path_(path), mode_(mode) {
  // SQLite gives special meanings to these names (a private temporary or in-memory database, a
  // URI with options): a run would "succeed" and store nothing anywhere the user can read.
  if (path.empty()) throw Error("--db: empty path (name a results database file)", ErrorKind::kInput);
  if (path == ":memory:" || path.rfind("file:", 0) == 0)
    throw Error(path +
                    ": not a file path (in-memory databases and SQLite URIs are not results "
                    "databases; name a file, e.g. ./" +
                    path + " for a file of that name)",
                ErrorKind::kInput);
  if (mode == Mode::kReadOnly && access(path.c_str(), F_OK) != 0)
    throw Error(path + ": no such results database", ErrorKind::kInput);
  if (mode == Mode::kReadWrite) create_if_missing();
  open(path);
}

Store::Store(const std::string& display, const std::string& file, CreateTag)
    : path_(display), mode_(Mode::kReadWrite), creating_(true) {
  open(file);
}

void Store::create_if_missing() {
  struct stat st {};
  if (lstat(path_.c_str(), &st) == 0) return;
  if (errno != ENOENT)
    throw Error(path_ + ": cannot open the database (" + std::strerror(errno) + ")", ErrorKind::kRuntime);
  // Built under a temporary name and hard-linked into place: link() fails when another shard
  // got there first (then its whole database is used), and nobody ever sees a half-made file —
  // so an empty file at `path` is never taken for a new database.
  static std::atomic<int> counter{0};
  const std::string tmp = path_ + ".kvbench-new." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  struct Cleanup {
    std::string p;
    ~Cleanup() {
      ::unlink(p.c_str());
      for (const char* suffix : {"-wal", "-shm", "-journal"}) ::unlink((p + suffix).c_str());
    }
  } cleanup{tmp};
  { Store fresh(path_, tmp, CreateTag{}); }  // closed: the WAL is checkpointed and removed
  if (::link(tmp.c_str(), path_.c_str()) == 0 || errno == EEXIST) return;
  const int link_errno = errno;
  // File systems without hard links: rename without replacing (fails when the file appeared).
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE) == 0 || errno == EEXIST) return;
  throw Error(path_ + ": cannot create the database (" + std::strerror(link_errno) + ")", ErrorKind::kRuntime);
}

void Store::open(const std::string& file) {
  // Readers open read-write without CREATE and set query_only: a SQLITE_OPEN_READONLY
  // connection to a WAL file creates its -wal/-shm files but cannot remove them when it closes,
  // so every `report`/`compare` would leave them behind. (SQLite still opens a write-protected
  // file read-only.) Only the temporary file of create_if_missing() is created here.
  int flags = creating_ ? (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) : SQLITE_OPEN_READWRITE;
  flags |= SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(file.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    raise(rc, "opening: " + msg);
  }
  // Shards started together on a file that does not exist yet all open it here. The WAL switch
  // and the first migration take exclusive locks, and SQLite answers some of those conflicts
  // with SQLITE_BUSY at once, without calling the busy handler (a connection that holds a read
  // lock and needs a write lock would otherwise deadlock; sqlite.org/c3ref/busy_handler.html).
  // init() is idempotent (the migration re-reads user_version under the write lock), so the
  // whole open is retried with a jittered backoff until the same 30 s the busy handler allows.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int attempt = 0;; ++attempt) {
    last_rc_ = SQLITE_OK;
    try {
      init(mode_);
      return;
    } catch (...) {
      const int primary = last_rc_ & 0xff;
      const bool busy = primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
      if (!busy || std::chrono::steady_clock::now() >= deadline) {
        sqlite3_close_v2(db_);  // the destructor does not run when the constructor throws
        db_ = nullptr;
        throw;
      }
    }
    const int ms = std::min(200, 2 << std::min(attempt, 7)) + static_cast<int>(::getpid() % 7);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
}

namespace {
// Table name -> its column names in order, of the database `db` (sqlite_ tables left out).
std::map<std::string, std::vector<std::string>> table_columns(sqlite3* db,
                                                              const std::function<void(int, const std::string&)>& err) {
  std::map<std::string, std::vector<std::string>> out;
  std::vector<std::string> names;
  {
    Stmt t(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'", err);
    while (t.step()) names.push_back(t.text(0));
  }
  for (const auto& n : names) {
    Stmt c(db, "SELECT name FROM pragma_table_info(?)", err);
    c.bind(1, n);
    auto& cols = out[n];
    while (c.step()) cols.push_back(c.text(0));
  }
  return out;
}

// Throws kvb::Error (kInput, one line naming the table, column or view) unless the database
// `db` (shown as `path_`) holds every table migrations 0 .. version-1 create, each with all its
// columns, and, when `views`, every view views_sql() creates. Reads only. `raise` reports SQLite
// errors of `db`.
void check_schema(sqlite3* db, const std::string& path_, int version, bool views,
                  const std::function<void(int, const std::string&)>& raise) {
  // What migrations 0 .. version-1 create, built in a private in-memory database.
  static std::mutex mu;
  static std::map<int, std::map<std::string, std::vector<std::string>>> cache;
  std::map<std::string, std::vector<std::string>> want;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(version);
    if (it == cache.end()) {
      sqlite3* mem = nullptr;
      if (sqlite3_open(":memory:", &mem) != SQLITE_OK) {
        sqlite3_close(mem);
        throw Error(path_ + ": cannot check the schema (out of memory)", ErrorKind::kRuntime);
      }
      auto mem_err = [](int rc, const std::string& w) {
        throw Error("results schema: " + w + ": " + sqlite3_errstr(rc), ErrorKind::kRuntime);
      };
      for (int v = 0; v < version && v < static_cast<int>(migrations().size()); ++v)
        if (sqlite3_exec(mem, migrations()[v].c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
          sqlite3_close(mem);
          throw Error("results schema: migration " + std::to_string(v) + " failed", ErrorKind::kRuntime);
        }
      it = cache.emplace(version, table_columns(mem, mem_err)).first;
      sqlite3_close(mem);
    }
    want = it->second;
  }
  const auto have = table_columns(db, raise);
  const std::string hint = " (the file was changed outside kvbench: restore it from a copy)";
  for (const auto& [table, cols] : want) {
    auto h = have.find(table);
    if (h == have.end()) throw Error(fmt::format("{}: table '{}' is missing{}", path_, table, hint), ErrorKind::kInput);
    for (const auto& c : cols)
      if (std::find(h->second.begin(), h->second.end(), c) == h->second.end())
        throw Error(fmt::format("{}: table '{}': column '{}' is missing{}", path_, table, c, hint), ErrorKind::kInput);
  }
  if (!views) return;
  std::set<std::string> stored;
  {
    Stmt q(db, "SELECT name FROM sqlite_master WHERE type = 'view'", raise);
    while (q.step()) stored.insert(q.text(0));
  }
  const std::string& v = views_sql();  // "CREATE VIEW name AS ..." statements
  for (size_t at = 0; (at = v.find("CREATE VIEW ", at)) != std::string::npos; at += 12) {
    const std::string name = v.substr(at + 12, v.find_first_of(" \n(", at + 12) - (at + 12));
    if (!stored.count(name))
      throw Error(fmt::format("{}: view '{}' is missing (the file was changed outside kvbench; a read-write open, "
                              "e.g. `kvbench grade --db {}`, recreates the views)",
                              path_, name, path_),
                  ErrorKind::kInput);
  }
}

}  // namespace

void Store::init(Mode mode) {
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, 30000);
  if (mode == Mode::kReadOnly) exec("PRAGMA query_only = 1");
  // Reading the header validates the file (SQLITE_NOTADB for garbage).
  int app_id = 0, version = 0;
  {
    Stmt a(db_, "PRAGMA application_id", [this](int rc, const std::string& w) { raise(rc, w); });
    if (a.step()) app_id = static_cast<int>(a.i64(0));
  }
  version = schema_version();
  int64_t ntables = 0;
  {
    Stmt t(db_, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'",
           [this](int rc, const std::string& w) { raise(rc, w); });
    if (t.step()) ntables = t.i64(0);
  }
  const bool fresh = app_id == 0 && version == 0 && ntables == 0;
  if (creating_ && !fresh)
    throw Error(path_ + ": cannot create the database (its temporary file is not empty)", ErrorKind::kRuntime);
  if (!creating_ && fresh) {
    struct stat st {};
    const bool empty = ::stat(path_.c_str(), &st) == 0 && st.st_size == 0;
    throw Error(path_ + (empty ? ": an empty file, not a kvbench results database (kvbench creates "
                                 "the database itself: remove the file or name a new one)"
                               : ": is a SQLite database but not a kvbench results database (it holds "
                                 "no tables and no kvbench application_id)"),
                ErrorKind::kInput);
  }
  if (app_id != kApplicationId && !fresh)
    throw Error(path_ +
                    ": is a SQLite database but not a kvbench results database "
                    "(application_id " +
                    std::to_string(app_id) + ")",
                ErrorKind::kInput);
  if (!creating_ && version < 1)
    throw Error(path_ + ": schema version " + std::to_string(version) + " is not one kvbench writes (valid: 1 to " +
                    std::to_string(kSchemaVersion) + "); the file was changed outside kvbench: restore it from a copy",
                ErrorKind::kInput);
  if (version > kSchemaVersion)
    throw Error(path_ + ": written by a newer kvbench (schema version " + std::to_string(version) + " > " +
                    std::to_string(kSchemaVersion) + "); upgrade kvbench",
                ErrorKind::kInput);
  // Before anything is written (the WAL switch included): every table of this schema version
  // with its columns, and (readers) every view, so that a damaged file is one error line here
  // rather than a raw SQLite error later, after `report` made its folder.
  if (!creating_)
    check_schema(db_, path_, version, mode == Mode::kReadOnly && version == kSchemaVersion,
                 [this](int rc, const std::string& w) { raise(rc, w); });
  exec("PRAGMA foreign_keys = ON");
  if (mode == Mode::kReadOnly) {
    if (version != kSchemaVersion)
      throw Error(path_ + ": schema version " + std::to_string(version) + ", this kvbench reads " +
                      std::to_string(kSchemaVersion) + "; open it once read-write to migrate it",
                  ErrorKind::kInput);
    return;
  }
  // WAL is a property of the file: switch once (the switch needs an exclusive lock; later opens
  // by other shards then take none).
  std::string journal;
  {
    Stmt j(db_, "PRAGMA journal_mode", [this](int rc, const std::string& w) { raise(rc, w); });
    if (j.step()) journal = j.text(0);
  }
  if (journal != "wal") exec("PRAGMA journal_mode = WAL");
  exec("PRAGMA synchronous = NORMAL");
  migrate();
}

Store::~Store() {
  if (db_) sqlite3_close_v2(db_);
}

Store::Store(Store&& o) noexcept
    : after_row_hook_for_testing(std::move(o.after_row_hook_for_testing)),
      path_(std::move(o.path_)),
      mode_(o.mode_),
      db_(o.db_),
      part_id_(o.part_id_) {
  o.db_ = nullptr;
}

Store& Store::operator=(Store&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close_v2(db_);
    path_ = std::move(o.path_);
    mode_ = o.mode_;
    db_ = o.db_;
    part_id_ = o.part_id_;
    after_row_hook_for_testing = std::move(o.after_row_hook_for_testing);
    o.db_ = nullptr;
  }
  return *this;
}

int Store::schema_version() {
  Stmt v(db_, "PRAGMA user_version", [this](int rc, const std::string& w) { raise(rc, w); });
  return v.step() ? static_cast<int>(v.i64(0)) : 0;
}

void Store::migrate() {
  const auto& m = migrations();
  for (;;) {
    Txn txn(*this);
    int v = schema_version();  // re-read inside the write lock: another process may have migrated
    if (v < 0) fail("{}: schema version {} is not one kvbench writes", path_, v);  // init() refuses it first
    if (v >= static_cast<int>(m.size())) break;                                    // Txn rolls back (nothing written)
    exec(m[v]);
    if (v == 0) {
      exec("PRAGMA application_id = " + std::to_string(kApplicationId));
      Stmt ins(db_, "INSERT INTO t975 (df, t) VALUES (?, ?)", [this](int rc, const std::string& w) { raise(rc, w); });
      for (int df = 1; df <= 1000; ++df) {
        ins.bind(1, df).bind(2, student_t_quantile(0.975, df));
        ins.run();
      }
    }
    exec("PRAGMA user_version = " + std::to_string(v + 1));
    txn.commit();
  }
  // The views are (re)created only when they differ from this build's: an open that changes
  // nothing leaves the file byte-for-byte as it was (a `grade` refused for a bad --run, say).
  if (stored_views() == expected_views()) return;
  Txn txn(*this);
  exec(views_sql());
  txn.commit();
}

std::map<std::string, std::string> Store::expected_views() {
  // sqlite_master.sql holds each CREATE VIEW statement's text as written, without its ';'.
  std::map<std::string, std::string> out;
  const std::string& v = views_sql();
  for (size_t at = 0; (at = v.find("CREATE VIEW ", at)) != std::string::npos;) {
    const size_t end = v.find(";\n", at);
    const std::string stmt = v.substr(at, end == std::string::npos ? std::string::npos : end - at);
    const size_t name_end = stmt.find(' ', 12);
    out[stmt.substr(12, name_end - 12)] = stmt;
    if (end == std::string::npos) break;
    at = end;
  }
  return out;
}

std::map<std::string, std::string> Store::stored_views() {
  std::map<std::string, std::string> out;
  Stmt q(db_, "SELECT name, sql FROM sqlite_master WHERE type = 'view'",
         [this](int rc, const std::string& w) { raise(rc, w); });
  while (q.step()) out[q.text(0)] = q.text(1);
  return out;
}

#define KVB_ERR [this](int rc, const std::string& w) { raise(rc, w); }

int64_t Store::begin_run(const RunInfo& info, Shard shard) {
  if (info.run_key.empty()) fail("{}: begin_run: empty run_key", path_);
  Txn txn(*this);
  int64_t run_id = 0;
  {
    Stmt q(db_, "SELECT run_id FROM runs WHERE run_key = ?", KVB_ERR);
    q.bind(1, info.run_key);
    if (q.step()) run_id = q.i64(0);
  }
  std::string now = now_iso();
  if (!run_id) {
    Stmt ins(db_,
             "INSERT INTO runs (run_key, name, kvbench_version, git_sha, host, backend, device, "
             "config_json, started_at) VALUES (?,?,?,?,?,?,?,?,?)",
             KVB_ERR);
    ins.bind_row(info.run_key, info.name, info.kvbench_version, info.git_sha,
                 info.host.empty() ? hostname() : info.host, info.backend, info.device, info.config.dump(), now);
    ins.run();
    run_id = sqlite3_last_insert_rowid(db_);
  } else {
    check_resume_inputs(run_id, info.inputs);
    exec("UPDATE runs SET finished_at = NULL WHERE run_id = " + std::to_string(run_id));
  }
  {
    Stmt u(db_, "UPDATE runs SET inputs_sha256 = ? WHERE run_id = ? AND inputs_sha256 IS NULL", KVB_ERR);
    u.bind_row(inputs_digest(info.inputs), run_id).run();
    Stmt in(db_,
            "INSERT OR IGNORE INTO run_inputs (run_id, role, owner, name, path, bytes, sha256) VALUES (?,?,?,?,?,?,?)",
            KVB_ERR);
    for (const auto& f : info.inputs) in.bind_row(run_id, f.role, f.owner, f.name, f.path, f.bytes, f.sha256).run();
  }
  {
    Stmt m(db_,
           "INSERT OR IGNORE INTO run_models (run_id, model_id, revision, weights_sha256) "
           "VALUES (?,?,?,?)",
           KVB_ERR);
    for (const auto& rm : info.models) m.bind_row(run_id, rm.model_id, rm.revision, rm.weights_sha256).run();
    Stmt d(db_, "INSERT OR IGNORE INTO run_datasets (run_id, task, source, sha256) VALUES (?,?,?,?)", KVB_ERR);
    for (const auto& ds : info.datasets) d.bind_row(run_id, ds.task, ds.source, ds.sha256).run();
    Stmt p(db_,
           "INSERT INTO run_parts (run_id, shard_index, shard_count, host, pid, started_at, "
           "part_uid) VALUES (?,?,?,?,?,?,?)",
           KVB_ERR);
    p.bind_row(run_id, shard.index, shard.count, info.host.empty() ? hostname() : info.host,
               static_cast<int64_t>(getpid()), now,
               sha256_hex(fmt::format("{}\x1f{}\x1f{}\x1f{}", info.run_key, hostname(), getpid(),
                                      std::chrono::steady_clock::now().time_since_epoch().count())));
    p.run();
    part_id_ = sqlite3_last_insert_rowid(db_);
  }
  txn.commit();
  return run_id;
}

void Store::check_resume_inputs(int64_t run_id, const std::vector<RunInput>& inputs) {
  Stmt q(db_, "SELECT inputs_sha256 FROM runs WHERE run_id = ?", KVB_ERR);
  q.bind(1, run_id);
  if (!q.step()) return;
  if (q.is_null(0))
    throw Error(fmt::format("{}: run {}: stored before schema v6, without the hashes of the model, tokenizer and "
                            "dataset files it read, so resuming it could mix results of changed inputs; start a new "
                            "run with another --run-name, or use another --db",
                            path_, run_id),
                ErrorKind::kInput);
  if (q.text(0) == inputs_digest(inputs)) return;
  auto change = describe_input_change(run_inputs(run_id), inputs, run_id);
  throw Error(fmt::format("{} in {}; resuming would mix results of different inputs: start a new run with another "
                          "--run-name, or use another --db",
                          change ? *change : fmt::format("run {}: recorded inputs differ", run_id), path_),
              ErrorKind::kInput);
}

std::vector<RunInput> Store::run_inputs(int64_t run_id) {
  std::vector<RunInput> out;
  Stmt q(db_, "SELECT role, owner, name, path, bytes, sha256 FROM run_inputs WHERE run_id = ? ORDER BY rowid", KVB_ERR);
  q.bind(1, run_id);
  while (q.step()) {
    RunInput in;
    q.row(in.role, in.owner, in.name, in.path, in.bytes, in.sha256);
    out.push_back(std::move(in));
  }
  return out;
}

std::optional<FileHash> Store::cached_file_hash(const std::string& path) {
  Stmt q(db_, "SELECT path, dev, inode, bytes, mtime_ns, ctime_ns, sha256 FROM file_hashes WHERE path = ?", KVB_ERR);
  q.bind(1, path);
  if (!q.step()) return std::nullopt;
  FileHash h;
  q.row(h.path, h.dev, h.inode, h.bytes, h.mtime_ns, h.ctime_ns, h.sha256);
  return h;
}

void Store::put_file_hashes(const std::vector<FileHash>& hashes) {
  if (hashes.empty()) return;
  Txn txn(*this);
  Stmt p(db_,
         "INSERT OR REPLACE INTO file_hashes (path, dev, inode, bytes, mtime_ns, ctime_ns, sha256, hashed_at) "
         "VALUES (?,?,?,?,?,?,?,?)",
         KVB_ERR);
  const std::string now = now_iso();
  for (const auto& h : hashes) p.bind_row(h.path, h.dev, h.inode, h.bytes, h.mtime_ns, h.ctime_ns, h.sha256, now).run();
  txn.commit();
}

void Store::end_run(int64_t run_id) {
  Txn txn(*this);
  std::string now = now_iso();
  if (part_id_) {
    Stmt p(db_, "UPDATE run_parts SET finished_at = ? WHERE part_id = ?", KVB_ERR);
    p.bind(1, now).bind(2, part_id_);
    p.run();
  }
  // The run is finished when, for its shard count, every shard index has a finished part.
  Stmt r(db_,
         "UPDATE runs SET finished_at = ? WHERE run_id = ? AND EXISTS ("
         " SELECT 1 FROM run_parts p WHERE p.run_id = runs.run_id AND p.finished_at IS NOT NULL"
         " GROUP BY p.shard_count HAVING COUNT(DISTINCT p.shard_index) = p.shard_count)",
         KVB_ERR);
  r.bind(1, now).bind(2, run_id);
  r.run();
  txn.commit();
}

void Store::add_work_items(const std::vector<WorkItem>& items) {
  Txn txn(*this);
  Stmt ins(db_,
           "INSERT OR IGNORE INTO work_items (item_key, model_id, model_revision, policy, "
           "policy_params_json, policy_label, budget, task, example_id, prompt_sha256, "
           "sample_index, seed, sampling_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
           KVB_ERR);
  for (const auto& it : items) {
    if (it.key.empty()) fail("{}: work item without key (task {}, example {})", path_, it.task, it.example_id);
    ins.bind_row(it.key, it.model_id, it.model_revision, it.policy, it.policy_params.dump(), it.policy_label, it.budget,
                 it.task, it.example_id, it.prompt_sha256, it.sample_index, it.seed, it.sampling.dump());
    ins.run();
  }
  txn.commit();
}

std::vector<WorkItem> Store::pending(int64_t run_id, const std::vector<WorkItem>& items) {
  std::unordered_set<std::string> done;
  Stmt q(db_, "SELECT item_key FROM generations WHERE run_id = ?", KVB_ERR);
  q.bind(1, run_id);
  while (q.step()) done.insert(q.text(0));
  std::vector<WorkItem> out;
  for (const auto& it : items)
    if (!done.count(it.key)) out.push_back(it);
  return out;
}

static void insert_grades(sqlite3* db, int64_t run_id, const std::vector<GradeRecord>& grades,
                          const std::function<void(int, const std::string&)>& err, const std::string& path) {
  Stmt g(db,
         "INSERT OR REPLACE INTO grades (run_id, item_key, score, extracted, pred_norm, gold_norm, "
         "reason, grader, ungraded, judge_key, graded_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
         err);
  std::string now = now_iso();
  for (const auto& gr : grades) {
    if (gr.score && !(*gr.score >= 0 && *gr.score <= 1))
      fail("{}: grade for item {}: score {} outside [0, 1]", path, gr.item_key, *gr.score);
    if (!gr.score && !gr.ungraded) fail("{}: grade for item {}: no score but not marked ungraded", path, gr.item_key);
    g.bind_row(run_id, gr.item_key, gr.score, gr.extracted, gr.pred_norm, gr.gold_norm, gr.reason, gr.grader,
               gr.ungraded, gr.judge_key, now);
    g.run();
  }
}

void Store::write_batch(int64_t run_id, const std::vector<GenerationRecord>& gens,
                        const std::vector<GradeRecord>& grades) {
  Txn txn(*this);
  Stmt ins(db_,
           "INSERT OR REPLACE INTO generations (run_id, item_key, text, prompt_tokens, "
           "generated_tokens, finish_reason, prefill_s, decode_s, ttft_s, evictions, "
           "kv_bytes_peak, kv_bytes_final, device_peak_bytes, extra_json, created_at, kv_bytes_read_step, "
           "kv_bytes_steady, decode_share_s, kv_tokens_mean, kv_tokens_peak) "
           "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
           KVB_ERR);
  std::string now = now_iso();
  for (size_t i = 0; i < gens.size(); ++i) {
    const auto& g = gens[i];
    ins.bind_row(run_id, g.item_key, g.text, g.prompt_tokens, g.generated_tokens, g.finish_reason, g.prefill_s,
                 g.decode_s, g.ttft_s, g.evictions, g.kv_bytes_peak, g.kv_bytes_final, g.device_peak_bytes,
                 g.extra.dump(), now, g.kv_bytes_read_step, g.kv_bytes_steady, g.decode_share_s, g.kv_tokens_mean,
                 g.kv_tokens_peak);
    ins.run();
    if (after_row_hook_for_testing) after_row_hook_for_testing(i);
  }
  insert_grades(db_, run_id, grades, KVB_ERR, path_);
  txn.commit();
}

void Store::write_grades(int64_t run_id, const std::vector<GradeRecord>& grades) {
  Txn txn(*this);
  insert_grades(db_, run_id, grades, KVB_ERR, path_);
  txn.commit();
}

std::vector<ToGrade> Store::to_grade(std::optional<int64_t> run_id, bool regrade) {
  return select_to_grade(run_id, regrade ? ""
                                         : " AND NOT EXISTS (SELECT 1 FROM grades r WHERE r.run_id = g.run_id AND "
                                           "r.item_key = g.item_key)");
}

std::vector<ToGrade> Store::to_grade_failed(std::optional<int64_t> run_id) {
  return select_to_grade(run_id,
                         " AND EXISTS (SELECT 1 FROM grades r WHERE r.run_id = g.run_id AND r.item_key = g.item_key "
                         "AND r.ungraded = 1) AND g.finish_reason NOT LIKE 'error:%'");
}

std::vector<ToGrade> Store::select_to_grade(std::optional<int64_t> run_id, const std::string& where) {
  std::string sql =
      "SELECT g.run_id, g.text, w.item_key, w.model_id, w.model_revision, w.policy, "
      "w.policy_params_json, w.policy_label, w.budget, w.task, w.example_id, w.prompt_sha256, "
      "w.sample_index, w.seed, w.sampling_json, g.extra_json FROM generations g JOIN work_items w "
      "ON w.item_key = g.item_key WHERE (?1 IS NULL OR g.run_id = ?1)";
  sql += where;
  sql +=
      " ORDER BY g.run_id, w.model_id, w.task, w.example_id, w.policy_label, w.budget, "
      "w.sample_index";
  Stmt q(db_, sql, KVB_ERR);
  if (run_id) q.bind(1, *run_id);
  std::vector<ToGrade> out;
  while (q.step()) {
    ToGrade t;
    WorkItem& w = t.item;
    std::string params_json, sampling_json, extra_json;
    q.row(t.run_id, t.text, w.key, w.model_id, w.model_revision, w.policy, params_json, w.policy_label, w.budget,
          w.task, w.example_id, w.prompt_sha256, w.sample_index, w.seed, sampling_json, extra_json);
    w.policy_params = parse_json(params_json, "work_items.policy_params_json");
    w.sampling = parse_json(sampling_json, "work_items.sampling_json");
    const auto extra = nlohmann::json::parse(extra_json, nullptr, false);
    if (extra.is_object() && extra.contains("turns") && extra["turns"].is_array())
      for (const auto& turn : extra["turns"])
        t.turn_texts.push_back(turn.is_object() ? turn.value("text", std::string()) : std::string());
    out.push_back(std::move(t));
  }
  return out;
}

std::optional<JudgeEntry> Store::judge_get(const std::string& key) {
  Stmt q(db_, "SELECT judge_model, request, response, score, template FROM judge_cache WHERE judge_key = ?", KVB_ERR);
  q.bind(1, key);
  if (!q.step()) return std::nullopt;
  JudgeEntry e;
  e.judge_key = key;
  q.row(e.judge_model, e.request, e.response, e.score, e.template_name);
  return e;
}

void Store::judge_put(const JudgeEntry& e) {
  Stmt q(db_,
         "INSERT OR REPLACE INTO judge_cache (judge_key, judge_model, request, response, score, "
         "created_at, template) VALUES (?,?,?,?,?,?,?)",
         KVB_ERR);
  q.bind_row(e.judge_key, e.judge_model, e.request, e.response, e.score, now_iso(), e.template_name);
  q.run();
}

std::vector<RunRow> Store::runs() {
  Stmt q(db_,
         "SELECT run_id, run_key, name, kvbench_version, git_sha, host, backend, device, "
         "config_json, started_at, COALESCE(finished_at, '') FROM runs ORDER BY run_id",
         KVB_ERR);
  std::vector<RunRow> out;
  while (q.step()) {
    RunRow r;
    q.row(r.run_id, r.run_key, r.name, r.kvbench_version, r.git_sha, r.host, r.backend, r.device, r.config_json,
          r.started_at, r.finished_at);
    out.push_back(std::move(r));
  }
  return out;
}

int64_t Store::resolve_run(const std::string& ref) {
  auto all = runs();
  // The known runs on the error's one line: the newest 10, "id name key-prefix started".
  auto known = [&] {
    std::string s;
    const size_t from = all.size() > 10 ? all.size() - 10 : 0;
    if (from) s += fmt::format(" ({} older not shown)", from);
    for (size_t i = from; i < all.size(); ++i) {
      const auto& r = all[i];
      s += fmt::format("{} {} {} {} {}{}", i == from ? "" : ";", r.run_id, r.name.empty() ? "-" : r.name,
                       r.run_key.substr(0, 12), r.started_at, r.finished_at.empty() ? " (unfinished)" : "");
    }
    return s.empty() ? std::string(" (none)") : s;
  };
  if (all.empty()) throw Error(path_ + ": no runs stored", ErrorKind::kInput);
  // 'latest' and 'previous' name finished runs only: a run that failed or is still going (no
  // finished_at) must not become the nightly comparison's candidate or baseline.
  if (ref == "latest" || ref == "previous") {
    std::vector<int64_t> done;
    for (const auto& r : all)
      if (!r.finished_at.empty()) done.push_back(r.run_id);
    const size_t need = ref == "latest" ? 1 : 2;
    if (done.size() < need)
      throw Error(fmt::format("{}: run '{}': {} finished run(s) stored (unfinished runs are not counted); runs:{}",
                              path_, ref, done.size(), known()),
                  ErrorKind::kInput);
    return done[done.size() - need];
  }
  if (!ref.empty() && ref.size() <= 18 && ref.find_first_not_of("0123456789") == std::string::npos) {
    int64_t id = std::stoll(ref);
    for (const auto& r : all)
      if (r.run_id == id) return id;
  }
  // A name or key prefix must pick one run: with two runs named "nightly", "nightly" is
  // ambiguous (it silently meant the newest, so `compare` compared a run with itself).
  auto unique = [&](const std::vector<int64_t>& ids, const char* what) -> std::optional<int64_t> {
    if (ids.empty()) return std::nullopt;
    if (ids.size() > 1)
      throw Error(fmt::format("{}: run '{}': {} matches {} runs (ids {}); give a run id", path_, ref, what, ids.size(),
                              fmt::join(ids, ", ")),
                  ErrorKind::kInput);
    return ids.front();
  };
  std::vector<int64_t> named, keyed;
  for (const auto& r : all) {
    if (!ref.empty() && r.name == ref) named.push_back(r.run_id);
    if (ref.size() >= 8 && r.run_key.rfind(ref, 0) == 0) keyed.push_back(r.run_id);
  }
  if (auto id = unique(named, "the name")) return *id;
  if (auto id = unique(keyed, "the run key prefix")) return *id;
  throw Error(path_ + ": no run '" + ref +
                  "' (give a run id, a name, a run key prefix, 'latest' "
                  "or 'previous'); runs:" +
                  known(),
              ErrorKind::kInput);
}

std::vector<SampleRow> Store::samples(const std::vector<int64_t>& run_ids) {
  std::string sql =
      "SELECT run_id, item_key, model_id, task, policy, policy_label, example_id, budget, "
      "sample_index, prompt_tokens, generated_tokens, finish_reason, prefill_s, decode_s, "
      "ttft_s, evictions, kv_bytes_peak, kv_bytes_final, device_peak_bytes, score, "
      "COALESCE(pred_norm, ''), kv_bytes_read_step, kv_bytes_steady, decode_share_s, kv_tokens_mean, "
      "kv_tokens_peak, "
      // The scheduler's per-generation figures live in extra_json (no column of their own);
      // a value that is not a number reads as absent.
      "(SELECT CASE WHEN json_valid(g.extra_json) AND json_type(g.extra_json, '$.decode_batch_mean') IN "
      "('real', 'integer') THEN json_extract(g.extra_json, '$.decode_batch_mean') END FROM generations g "
      "WHERE g.run_id = v_samples.run_id AND g.item_key = v_samples.item_key), "
      "(SELECT CASE WHEN json_valid(g.extra_json) AND json_type(g.extra_json, '$.preemptions') = 'integer' "
      "THEN json_extract(g.extra_json, '$.preemptions') ELSE 0 END FROM generations g "
      "WHERE g.run_id = v_samples.run_id AND g.item_key = v_samples.item_key) FROM v_samples";
  if (!run_ids.empty()) {
    sql += " WHERE run_id IN (";
    for (size_t i = 0; i < run_ids.size(); ++i) sql += (i ? "," : "") + std::to_string(run_ids[i]);
    sql += ")";
  }
  sql += " ORDER BY run_id, model_id, task, policy_label, budget, example_id, sample_index";
  Stmt q(db_, sql, KVB_ERR);
  std::vector<SampleRow> out;
  while (q.step()) {
    SampleRow s;
    q.row(s.run_id, s.item_key, s.model_id, s.task, s.policy, s.policy_label, s.example_id, s.budget, s.sample_index,
          s.prompt_tokens, s.generated_tokens, s.finish_reason, s.prefill_s, s.decode_s, s.ttft_s, s.evictions,
          s.kv_bytes_peak, s.kv_bytes_final, s.device_peak_bytes, s.score, s.pred_norm, s.kv_bytes_read_step,
          s.kv_bytes_steady, s.decode_share_s, s.kv_tokens_mean, s.kv_tokens_peak, s.decode_batch_mean, s.preemptions);
    if (s.decode_batch_mean && !(std::isfinite(*s.decode_batch_mean) && *s.decode_batch_mean >= 0))
      s.decode_batch_mean.reset();
    if (s.preemptions < 0) s.preemptions = 0;
    // A score outside [0, 1] (+inf, 7) was never written by a grader: refused, not averaged.
    if (s.score && !(*s.score >= 0 && *s.score <= 1))
      throw Error(fmt::format("{}: run {}: item {}: score {} is not in [0, 1] (the file was changed outside kvbench: "
                              "restore it from a copy)",
                              path_, s.run_id, s.item_key.substr(0, 16), *s.score),
                  ErrorKind::kInput);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::vector<std::string>> Store::query(const std::string& sql) {
  Stmt q(db_, sql, KVB_ERR);
  std::vector<std::vector<std::string>> out;
  while (q.step()) {
    std::vector<std::string> row;
    for (int c = 0; c < q.columns(); ++c) row.push_back(q.is_null(c) ? "NULL" : q.text(c));
    out.push_back(std::move(row));
  }
  return out;
}

void Store::set_max_page_count_for_testing(int64_t pages) { exec("PRAGMA max_page_count = " + std::to_string(pages)); }

Store::Totals Store::totals() {
  const auto n = query(
      "SELECT (SELECT COUNT(*) FROM runs), (SELECT COUNT(*) FROM generations), "
      "(SELECT COUNT(*) FROM grades)");
  return {std::stoll(n.at(0).at(0)), std::stoll(n.at(0).at(1)), std::stoll(n.at(0).at(2))};
}

namespace {

/// What merge() compares of a run: where it is, its models' weight hashes and its inputs.
struct RunIdentity {
  std::string file;
  int64_t run_id = 0;
  std::optional<std::string> inputs_digest;    ///< nullopt: stored before schema v6
  std::map<std::string, std::string> weights;  ///< model_id -> weights_sha256
  std::vector<RunInput> inputs;
};

}  // namespace

void Store::check_merge_identities(const std::vector<std::string>& files) {
  std::map<std::string, RunIdentity> seen;  // run key -> the first copy met
  for (const auto& file : files) {
    Store s(file, Mode::kReadOnly);
    std::vector<std::pair<std::string, RunIdentity>> runs;
    {
      Stmt q(s.db_, "SELECT run_key, run_id, inputs_sha256 FROM runs ORDER BY run_id",
             [&s](int rc, const std::string& w) { s.raise(rc, w); });
      while (q.step()) {
        RunIdentity r;
        r.file = file;
        r.run_id = q.i64(1);
        if (!q.is_null(2)) r.inputs_digest = q.text(2);
        runs.emplace_back(q.text(0), std::move(r));
      }
    }
    for (auto& [key, r] : runs) {
      Stmt m(s.db_, "SELECT model_id, weights_sha256 FROM run_models WHERE run_id = ?",
             [&s](int rc, const std::string& w) { s.raise(rc, w); });
      m.bind(1, r.run_id);
      while (m.step()) r.weights[m.text(0)] = m.text(1);
      r.inputs = s.run_inputs(r.run_id);
      auto it = seen.find(key);
      if (it == seen.end()) {
        seen.emplace(key, std::move(r));
        continue;
      }
      const RunIdentity& a = it->second;
      const int64_t run_id = r.run_id;  // clang 14 cannot capture a structured binding
      auto refuse = [&](const std::string& what) {
        throw Error(fmt::format("{}: merge: run {} has the run key of run {} in {} but read other files: {}", file,
                                run_id, a.run_id, a.file, what),
                    ErrorKind::kInput);
      };
      for (const auto& [model, sha] : r.weights) {
        auto w = a.weights.find(model);
        if (w != a.weights.end() && w->second != sha)
          refuse(fmt::format("model {}: weights sha256 {} -> {}", model, w->second.substr(0, 16), sha.substr(0, 16)));
      }
      if (a.inputs_digest && r.inputs_digest && *a.inputs_digest != *r.inputs_digest) {
        auto change = describe_input_change(a.inputs, r.inputs, a.run_id);
        refuse(change ? *change : std::string("recorded inputs differ"));
      }
      if (!a.inputs_digest && r.inputs_digest) it->second = std::move(r);  // compare later copies with the known one
    }
  }
}

void Store::merge(const std::string& out, const std::vector<std::string>& inputs) {
  if (inputs.empty()) fail("merge: no input databases given");
  // The same file twice (under any spelling), or the output among the inputs, is refused at once
  // (SQLite would otherwise wait on its own lock and then blame another process).
  namespace fs = std::filesystem;
  auto same_file = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == out || same_file(inputs[i], out))
      fail("{}: merge: the output database is also an input", inputs[i]);
    for (size_t j = 0; j < i; ++j)
      if (inputs[i] == inputs[j] || same_file(inputs[i], inputs[j]))
        fail("{}: merge: given twice as an input", inputs[i]);
  }
  // Validate every input (a kvbench store at the current schema version), and that runs sharing
  // a run key read the same files, before the output is opened or created, so that an error
  // names the input at fault and nothing is written.
  for (const auto& in : inputs) Store src(in, Mode::kReadOnly);
  {
    std::vector<std::string> files;
    std::error_code ec;
    if (fs::exists(out, ec)) {
      Store migrated(out);  // an older output is migrated first (read-only needs the current version)
      files.push_back(out);
    }
    files.insert(files.end(), inputs.begin(), inputs.end());
    check_merge_identities(files);
  }
  Store dst(out);
  for (const auto& in : inputs) {
    std::string alias = "src";
    {
      Stmt a(dst.db_, "ATTACH DATABASE ? AS src",
             [&](int rc, const std::string& w) { dst.raise(rc, "attaching " + in); });
      a.bind(1, in);
      a.run();
    }
    try {
      Txn txn(dst);
      // Map runs by run_key (insert missing ones).
      dst.exec(
          "INSERT OR IGNORE INTO main.runs (run_key, name, kvbench_version, git_sha, host, backend, "
          "device, config_json, started_at, finished_at, inputs_sha256) SELECT run_key, name, kvbench_version, "
          "git_sha, host, backend, device, config_json, started_at, finished_at, inputs_sha256 FROM src.runs "
          "ORDER BY run_id");
      dst.exec("DROP TABLE IF EXISTS temp.run_map");
      dst.exec(
          "CREATE TEMP TABLE run_map AS SELECT s.run_id AS src_id, d.run_id AS dst_id "
          "FROM src.runs s JOIN main.runs d ON d.run_key = s.run_key");
      dst.exec(
          "INSERT OR IGNORE INTO main.run_models SELECT m.dst_id, r.model_id, r.revision, "
          "r.weights_sha256 FROM src.run_models r JOIN temp.run_map m ON m.src_id = r.run_id");
      dst.exec(
          "INSERT OR IGNORE INTO main.run_datasets SELECT m.dst_id, r.task, r.source, r.sha256 "
          "FROM src.run_datasets r JOIN temp.run_map m ON m.src_id = r.run_id");
      // Inputs: equal on both sides (checked above), or known on one side only (kept).
      dst.exec(
          "UPDATE main.runs SET inputs_sha256 = (SELECT s.inputs_sha256 FROM src.runs s WHERE s.run_key = "
          "runs.run_key) WHERE inputs_sha256 IS NULL AND run_id IN (SELECT dst_id FROM temp.run_map)");
      dst.exec(
          "INSERT OR IGNORE INTO main.run_inputs (run_id, role, owner, name, path, bytes, sha256) SELECT m.dst_id, "
          "i.role, i.owner, i.name, i.path, i.bytes, i.sha256 FROM src.run_inputs i JOIN temp.run_map m "
          "ON m.src_id = i.run_id JOIN main.runs d ON d.run_id = m.dst_id JOIN src.runs s ON s.run_id = m.src_id "
          "WHERE d.inputs_sha256 = s.inputs_sha256 ORDER BY i.rowid");
      dst.exec(
          "INSERT OR IGNORE INTO main.run_parts (part_uid, run_id, shard_index, shard_count, host, "
          "pid, started_at, finished_at) SELECT p.part_uid, m.dst_id, p.shard_index, p.shard_count, "
          "p.host, p.pid, p.started_at, p.finished_at FROM src.run_parts p JOIN temp.run_map m "
          "ON m.src_id = p.run_id ORDER BY p.part_id");
      dst.exec("INSERT OR IGNORE INTO main.work_items SELECT * FROM src.work_items");
      dst.exec(
          "INSERT OR IGNORE INTO main.generations (run_id, item_key, text, prompt_tokens, "
          "generated_tokens, finish_reason, prefill_s, decode_s, ttft_s, evictions, kv_bytes_peak, "
          "kv_bytes_final, device_peak_bytes, extra_json, created_at, kv_bytes_read_step, kv_bytes_steady, "
          "decode_share_s, kv_tokens_mean, kv_tokens_peak) SELECT m.dst_id, g.item_key, g.text, "
          "g.prompt_tokens, g.generated_tokens, g.finish_reason, g.prefill_s, g.decode_s, "
          "g.ttft_s, g.evictions, g.kv_bytes_peak, g.kv_bytes_final, g.device_peak_bytes, "
          "g.extra_json, g.created_at, g.kv_bytes_read_step, g.kv_bytes_steady, g.decode_share_s, "
          "g.kv_tokens_mean, g.kv_tokens_peak "
          "FROM src.generations g JOIN temp.run_map m "
          "ON m.src_id = g.run_id");
      dst.exec(
          "INSERT OR IGNORE INTO main.grades SELECT m.dst_id, g.item_key, g.score, g.extracted, "
          "g.pred_norm, g.gold_norm, g.reason, g.grader, g.ungraded, g.judge_key, g.graded_at "
          "FROM src.grades g JOIN temp.run_map m ON m.src_id = g.run_id");
      dst.exec("INSERT OR IGNORE INTO main.judge_cache SELECT * FROM src.judge_cache");
      // A merged run is finished when every shard of it has finished.
      dst.exec(
          "UPDATE main.runs SET finished_at = (SELECT MAX(p.finished_at) FROM main.run_parts p "
          "WHERE p.run_id = runs.run_id) WHERE run_id IN (SELECT dst_id FROM temp.run_map) AND "
          "EXISTS (SELECT 1 FROM main.run_parts p WHERE p.run_id = runs.run_id AND "
          "p.finished_at IS NOT NULL GROUP BY p.shard_count "
          "HAVING COUNT(DISTINCT p.shard_index) = p.shard_count)");
      dst.exec("DROP TABLE temp.run_map");
      txn.commit();
    } catch (const Error& e) {
      sqlite3_exec(dst.db_, "DETACH DATABASE src", nullptr, nullptr, nullptr);
      throw Error(std::string("merging ") + in + " into " + out + ": " + e.what(), e.kind());
    }
    dst.exec("DETACH DATABASE src");
  }
}

}  // namespace kvb::results

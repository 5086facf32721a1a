// The kvbench results store: one SQLite file holding runs (provenance), work items,
// generations, grades and a judge cache, plus SQL views for per-cell metrics.
//
// Durability: WAL journal, synchronous=NORMAL, foreign keys on, 30 s busy timeout. Every batch is
// one transaction, so a process killed at any point (SIGKILL, power cut aside) leaves only whole
// batches behind; a rerun skips work items whose generation is stored (Store::pending).
// Schema changes are migrations keyed by PRAGMA user_version (see kSchemaVersion and
// results/README.md for the tables and views).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "results/grid.h"

struct sqlite3;

namespace kvb::results {

/// A model used by a run, with the sha256 of its weights file(s) (provenance).
struct RunModel {
  std::string model_id;
  std::string revision;
  std::string weights_sha256;
};

/// A dataset a run read, per task: where it came from and its sha256.
struct RunDataset {
  std::string task;
  std::string source;
  std::string sha256;
};

/// One file a run read, with the SHA-256 of its bytes (schema v5, table run_inputs). A run's
/// identity on resume and merge is its run key plus the content of these files.
struct RunInput {
  std::string role;   ///< "weights" | "config" | "tokenizer" | "chat_template" | "dataset"
  std::string owner;  ///< the --model spec, or the suite task spec for a dataset file
  /// Machine-independent name within `owner`: the file name inside the model directory (the
  /// file name for a .gguf), or the dataset registry key (e.g. "gsm8k/test.jsonl").
  std::string name;
  std::string path;    ///< where this process read it (for messages)
  int64_t bytes = 0;   ///< file size
  std::string sha256;  ///< 64 lower-case hex digits
};

/// The digest a run stores in runs.inputs_sha256: SHA-256 of the lines "role\towner\tname\tsha256\n"
/// sorted (paths and sizes left out, so shards on machines with other paths share it).
std::string inputs_digest(const std::vector<RunInput>& inputs);

/// The first difference between a run's recorded inputs `before` and this process's `now`
/// (matched by owner and name), as "<path>: <what>" — "content changed since run N (sha256 A ->
/// B)", "not read by run N" or "read by run N but not now" — followed by ", and K more" when
/// several differ; nullopt when they hold the same files with the same hashes. `run_id` is put
/// into the text.
std::optional<std::string> describe_input_change(const std::vector<RunInput>& before, const std::vector<RunInput>& now,
                                                 int64_t run_id);

/// A cached file hash (schema v5, table file_hashes): valid while the file keeps its device,
/// inode, size, mtime and ctime (nanoseconds). See harness/input_identity.h for when it is used.
struct FileHash {
  std::string path;
  int64_t dev = 0, inode = 0, bytes = 0, mtime_ns = 0, ctime_ns = 0;
  std::string sha256;
};

/// What `kvbench run` records about itself. `run_key` identifies the run across reruns and
/// shards (see default_run_key); `config` is the full resolved configuration.
struct RunInfo {
  std::string run_key;
  std::string name;  ///< user label (--run-name), may be empty
  std::string kvbench_version;
  std::string git_sha;
  std::string host;
  std::string backend;  ///< "cpu" | "cpu-bf16" | "cuda" (engine/backend/backend.h, backend_registry)
  std::string device;   ///< the host's CPU model (/proc/cpuinfo) for the CPU backends, else the backend name ("cuda")
  nlohmann::json config = nlohmann::json::object();
  std::vector<RunModel> models;
  std::vector<RunDataset> datasets;
  /// Every file the run reads (model weights, config, tokenizer, chat template, dataset files)
  /// with its hash: begin_run refuses to resume a run whose recorded inputs differ.
  std::vector<RunInput> inputs;
};

/// The run key `kvbench run` uses unless told otherwise: SHA-256 of the compact JSON
/// {"version","git_sha","backend","config","name"}. Host, device and shard are left out so
/// shards on different machines share one run; the git sha is in, so a rebuilt kvbench starts
/// a new run instead of mixing outputs of two code versions.
std::string default_run_key(const RunInfo& info);

/// A row of the runs table.
struct RunRow {
  int64_t run_id = 0;
  std::string run_key, name, kvbench_version, git_sha, host, backend, device, config_json;
  std::string started_at, finished_at;  ///< ISO-8601 UTC; finished_at empty while running
};

/// One generation as the engine reports it. Seconds are wall-clock; bytes are bytes.
struct GenerationRecord {
  std::string item_key;
  std::string text;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  std::string finish_reason;  ///< "stop" | "length" | "error: ..."
  double prefill_s = 0;
  double decode_s = 0;
  double ttft_s = 0;      ///< time to first token
  int64_t evictions = 0;  ///< eviction/compaction events for this sequence
  /// High-water mark of the KV pages held by this sequence, in bytes (GenerationResult::
  /// kv_bytes_peak; schema v4 semantics: counted at allocation, a step's compressions taking
  /// effect at its end, so it does not depend on the prefill chunk under compress=prompt_end;
  /// rows written before v4 sampled it with per-layer compressions inside a step).
  int64_t kv_bytes_peak = 0;
  int64_t kv_bytes_final = 0;     ///< KV-cache bytes at the end
  int64_t device_peak_bytes = 0;  ///< peak device memory during the batch (0 if unknown)
  /// Mean over the sequence's decode steps of the K+V bytes its attention read, summed over
  /// layers and kv heads (GenerationResult::kv_read_bytes / decode_steps); nullopt when it had no
  /// decode step (schema v3; NULL in rows written before).
  std::optional<double> kv_bytes_read_step;
  /// Steady footprint: the most KV page bytes held at the end of any step from the end of the
  /// prompt on (GenerationResult::kv_bytes_steady; schema v4, NULL in rows written before).
  std::optional<int64_t> kv_bytes_steady;
  /// This sequence's share of the wall time of the decode steps it took part in (each step's
  /// seconds divided by the sequences it decoded): summed over a cell it is the cell's decode
  /// wall time, so Σ generated / Σ share is the aggregate decode throughput (schema v4, NULL
  /// before).
  std::optional<double> decode_share_s;
  /// Realised KV tokens per (layer, kv_head) from the end of the prompt on (GenerationResult::
  /// kv_tokens_mean / kv_tokens_peak, every turn's steps counted): the mean over those steps of the
  /// tokens held per head, and the most one head held. The budget a `budget_kind=threshold` policy
  /// realised (schema v5, NULL in rows written before and for a prompt that was not generated).
  std::optional<double> kv_tokens_mean;
  std::optional<int64_t> kv_tokens_peak;
  nlohmann::json extra = nlohmann::json::object();  ///< anything else (free-form)
};

/// One grade. `score` in [0, 1]; missing when `ungraded` (grader could not score it, e.g. a
/// judge failure), and ungraded samples are left out of the accuracy metrics.
struct GradeRecord {
  std::string item_key;
  std::optional<double> score;
  std::string extracted;  ///< the answer the grader pulled out of the text
  std::string pred_norm;  ///< normalised prediction (maj@k votes on this)
  std::string gold_norm;  ///< normalised reference
  std::string reason;     ///< short human-readable explanation
  std::string grader;     ///< grader registry name (graders/grade.h), e.g. "math"; no version is stored
  bool ungraded = false;
  std::optional<std::string> judge_key;  ///< judge_cache key when an LLM judge was used
};

/// A stored generation that needs (re)grading, with the work item it belongs to.
struct ToGrade {
  int64_t run_id = 0;
  WorkItem item;
  std::string text;
  /// The follow-up turns' texts of a multi-turn generation (generations.extra_json "turns"[].text),
  /// in order; empty for single-turn generations.
  std::vector<std::string> turn_texts;
};

/// A cached LLM-judge verdict, keyed by a content hash of (judge model, template, question,
/// answer, prediction). Only verdicts are cached (score set); failed judgments never are.
struct JudgeEntry {
  std::string judge_key;
  std::string judge_model;
  std::string request;
  std::string response;
  std::optional<double> score;
  std::string template_name;  ///< the judge template used (e.g. LongMemEval's "temporal-reasoning")
};

/// One row of the v_samples view: a generation with its work item and grade.
struct SampleRow {
  int64_t run_id = 0;
  std::string item_key, model_id, task, policy, policy_label, example_id;
  int64_t budget = 0;
  int sample_index = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  std::string finish_reason;
  double prefill_s = 0, decode_s = 0, ttft_s = 0;
  int64_t evictions = 0, kv_bytes_peak = 0, kv_bytes_final = 0, device_peak_bytes = 0;
  std::optional<double> kv_bytes_read_step;  ///< see GenerationRecord (NULL: not measured)
  std::optional<int64_t> kv_bytes_steady;    ///< see GenerationRecord (NULL: before schema v4)
  std::optional<double> decode_share_s;      ///< see GenerationRecord (NULL: before schema v4)
  std::optional<double> kv_tokens_mean;      ///< see GenerationRecord (NULL: before schema v5)
  std::optional<int64_t> kv_tokens_peak;     ///< see GenerationRecord (NULL: before schema v5)
  /// Under `run --memory`: the mean decode batch over the decode steps this generation took part
  /// in (sequences decoding together), from GenerationRecord::extra's `decode_batch_mean`;
  /// nullopt when not recorded (rows written without a scheduler measurement).
  std::optional<double> decode_batch_mean;
  /// Times this generation was preempted (its pages freed, later recomputed; extra's
  /// `preemptions`, 0 when absent).
  int64_t preemptions = 0;
  std::optional<double> score;  ///< nullopt when not graded or ungraded
  std::string pred_norm;
};

/// An open results database. Move-only; not thread-safe (one Store per thread).
/// Every failure throws kvb::Error naming the file; SQLite's full-disk, read-only, locked and
/// corrupt/not-a-database conditions get messages that say so and what to do.
class Store {
 public:
  /// The schema version this build writes (PRAGMA user_version).
  static constexpr int kSchemaVersion = 6;
  /// PRAGMA application_id marking kvbench databases ("kvb0").
  static constexpr int kApplicationId = 0x6b766230;

  enum class Mode { kReadWrite, kReadOnly };

  /// Opens (kReadWrite: creating it when missing) and migrates `path` to kSchemaVersion.
  /// kReadOnly opens an existing file without migrating it and fails if its version differs.
  /// A new database is built in a temporary file beside `path` and linked into place whole, so
  /// an existing file at `path` is always either a kvbench database or refused: an empty file,
  /// a SQLite database of another program (also one with no tables), a kvbench database whose
  /// schema version is outside [1, kSchemaVersion], "", ":memory:" and "file:" URIs all throw
  /// kvb::Error (ErrorKind::kInput) before anything is written.
  explicit Store(const std::string& path, Mode mode = Mode::kReadWrite);
  ~Store();
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }
  /// The file's schema version (user_version).
  int schema_version();

  /// Finds the run with info.run_key (creating it when absent; provenance of the first writer
  /// is kept, with info.inputs and their digest) and records this process as a part (shard,
  /// host, start time). Returns run_id. Resuming an existing run is refused (kvb::Error,
  /// kInput, nothing written) when its recorded inputs differ from info.inputs — the message
  /// names the first changed file (describe_input_change) — or when it was stored before schema
  /// v5 and has no recorded inputs.
  int64_t begin_run(const RunInfo& info, Shard shard = {});
  /// The inputs recorded for run `run_id` (empty for a run stored before schema v5).
  std::vector<RunInput> run_inputs(int64_t run_id);

  /// The cached hash of `path` (table file_hashes), or nullopt. The caller checks that the
  /// file's identity (FileHash fields) still matches before trusting it.
  std::optional<FileHash> cached_file_hash(const std::string& path);
  /// Inserts or replaces cached file hashes in one transaction.
  void put_file_hashes(const std::vector<FileHash>& hashes);
  /// Marks this process's part (and, when every shard of the run has a finished part, the run)
  /// finished.
  void end_run(int64_t run_id);

  /// Inserts work items (ignoring keys already present) in one transaction.
  void add_work_items(const std::vector<WorkItem>& items);
  /// The items (in input order) with no stored generation in run `run_id` — what a rerun must
  /// still generate.
  std::vector<WorkItem> pending(int64_t run_id, const std::vector<WorkItem>& items);
  /// Writes a batch of generations and (optionally) their grades in ONE transaction: either
  /// all rows are stored or none. The work items must have been added. Throws on any error
  /// (the transaction is rolled back).
  void write_batch(int64_t run_id, const std::vector<GenerationRecord>& gens,
                   const std::vector<GradeRecord>& grades = {});

  /// Generations to grade: with `regrade` all of them, otherwise those without a grade row.
  /// `run_id` restricts to one run.
  std::vector<ToGrade> to_grade(std::optional<int64_t> run_id, bool regrade);
  /// Generations whose stored grade is ungraded (a failed judgment, a grader error, no judge
  /// given) — what `kvbench grade --retry-failed` re-grades. Generations that failed
  /// themselves (finish_reason "error: ...") are left out: there is nothing to grade.
  std::vector<ToGrade> to_grade_failed(std::optional<int64_t> run_id);
  /// Inserts or replaces grades of run `run_id` in one transaction.
  void write_grades(int64_t run_id, const std::vector<GradeRecord>& grades);

  /// Judge cache lookup / insert-or-replace.
  std::optional<JudgeEntry> judge_get(const std::string& judge_key);
  void judge_put(const JudgeEntry& e);

  /// All runs, oldest first.
  std::vector<RunRow> runs();
  /// Resolves a run reference: a numeric run id, "latest", "previous" (second newest), or a
  /// run name, or a run_key prefix of >= 8 hex digits. Throws kvb::Error listing the known runs
  /// when nothing matches, and naming the runs when a name or prefix matches several.
  int64_t resolve_run(const std::string& ref);

  /// Rows of v_samples for the given runs (all runs when empty), ordered by run, model, task,
  /// policy label, budget, example id, sample index.
  std::vector<SampleRow> samples(const std::vector<int64_t>& run_ids = {});

  /// Runs arbitrary SQL (no results). For tools and tests.
  void exec(const std::string& sql);
  /// Runs a query and returns every cell as text (NULL -> "NULL"). For tools and tests.
  std::vector<std::vector<std::string>> query(const std::string& sql);

  /// Merges the stores `inputs` into `out` (created when missing): runs are matched by run_key,
  /// work items by key, generations and grades by (run, item) — the first copy wins, so merging
  /// the shards of one run gives the same rows as one unsharded run. Each input is merged in
  /// one transaction. Throws kvb::Error naming the input on a schema mismatch or a bad file,
  /// and (kInput, nothing of that input merged) when a run of the input matches a run of `out`
  /// by run key but read other files: a model whose weights_sha256 differs, or recorded inputs
  /// (schema v5) that differ (describe_input_change). Runs with unknown inputs (stored before
  /// v5) are checked on their weights only. The file-hash cache is not merged.
  static void merge(const std::string& out, const std::vector<std::string>& inputs);

  /// Row counts of the whole file (what `kvbench merge` reports after merging).
  struct Totals {
    int64_t runs = 0, generations = 0, grades = 0;
  };
  /// The numbers of runs, generations and grades stored. Throws kvb::Error naming the file.
  Totals totals();

 private:
  /// Test hooks, reached only through StoreTestAccess (tests/support/store_test_access.h): a
  /// cap on the file size in pages (to provoke SQLITE_FULL), and a callback run after each
  /// generation row is written inside write_batch (to kill a writer mid-batch).
  friend struct StoreTestAccess;
  void set_max_page_count_for_testing(int64_t pages);
  std::function<void(size_t row)> after_row_hook_for_testing;

  struct CreateTag {};
  /// Builds a new database in `file` (which must not exist) with errors naming `display`.
  Store(const std::string& display, const std::string& file, CreateTag);
  /// Creates `path_` atomically when it does not exist (see the public constructor).
  void create_if_missing();
  /// Opens `file` and runs init() with the busy retries (shared by both constructors).
  void open(const std::string& file);
  void init(Mode mode);
  void migrate();
  /// merge(): throws kvb::Error (kInput) naming the later file when runs of two of `files`
  /// (opened read-only, in order) share a run key but not their model weights or inputs.
  static void check_merge_identities(const std::vector<std::string>& files);
  /// Throws kvb::Error (kInput) when run `run_id` has no recorded inputs or others than `inputs`.
  void check_resume_inputs(int64_t run_id, const std::vector<RunInput>& inputs);
  /// The views this build creates (views_sql()) and the ones the file holds: name -> SQL text.
  static std::map<std::string, std::string> expected_views();
  std::map<std::string, std::string> stored_views();
  std::vector<ToGrade> select_to_grade(std::optional<int64_t> run_id, const std::string& where);
  [[noreturn]] void raise(int rc, const std::string& what);
  void check(int rc, const std::string& what);

  std::string path_;
  Mode mode_ = Mode::kReadWrite;
  sqlite3* db_ = nullptr;
  int64_t part_id_ = 0;
  int last_rc_ = 0;        ///< the SQLite code of the last raise() (the constructor retries BUSY opens)
  bool creating_ = false;  ///< the file is a fresh temporary one: an empty database is expected
};

}  // namespace kvb::results

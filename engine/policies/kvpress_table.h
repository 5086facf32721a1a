// The kvpress migration table: every press of kvpress 0.5.5 and the kvbench policy spec that does
// what it does (docs/policies.md, "Migrating from kvpress"; `kvbench policies --kvpress`).
#pragma once

#include <string>
#include <vector>

namespace kvb {

/// How a kvpress press relates to kvbench.
enum class KvpressStatus {
  kGolden,   ///< equal keep-sets, pinned by a kvpress golden in tests (`golden` names it)
  kChecked,  ///< equal keep-sets, checked once from outside the test suite (`note` says where)
  kRule,     ///< the same rule, but not the same draws (a random press: another generator)
  kWrapper,  ///< a kvpress wrapper whose job is a kvbench protocol option of every policy
  kMissing,  ///< not in kvbench yet (issue 45)
  kExcused,  ///< left out on purpose; `note` gives the reason
};

/// One row of the table. `spec` is the kvbench policy spec (no budget) with kvpress's defaults
/// written out; a kvpress `compression_ratio=r` becomes `--budget int(L·(1−r))` for an L-token
/// prompt, or `budget_kind=ratio,ratio=1−r` (kvbench's ratio is the KEPT fraction, kvpress's the
/// removed one). Empty `spec` for kMissing and kExcused rows.
struct KvpressRow {
  std::string press;  ///< the kvpress class, e.g. "SnapKVPress"
  std::string args;   ///< its arguments at kvpress's defaults, e.g. "compression_ratio=r, window_size=64"
  std::string spec;   ///< the equivalent kvbench spec, e.g. "snapkv:window=64,kernel=5,pool=avg,..."
  KvpressStatus status = KvpressStatus::kMissing;
  /// kGolden: "<fixture file under tests/fixtures/policies>:<selector>", where the selector is the
  /// golden cases' `press` field, or a prefix of their `name` ending in '*'. Empty otherwise.
  std::string golden;
  /// Spec parameters a golden varies per case (its value there differs from kvpress's default),
  /// comma-separated; the test compares every other parameter of the golden's spec with `spec`.
  std::string varied;
  std::string note;  ///< what differs, why a press is left out, or where it was checked
};

/// The table, in the order of docs/policies.md. Every class kvpress 0.5.5 exports that compresses
/// (its `*Press` names but BasePress, ScorerPress and ExpectedAttentionStatsPress) has one row.
const std::vector<KvpressRow>& kvpress_table();

/// "golden", "checked", "rule", "wrapper", "missing" or "excused".
const char* kvpress_status_name(KvpressStatus s);

}  // namespace kvb

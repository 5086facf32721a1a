// The SQL text of the results schema: one migration per schema version. Kept in one place so
// results/README.md can quote it and tests can check the views against the C++ metrics.
#pragma once

#include <string>
#include <vector>

namespace kvb::results {

/// migrations()[v] upgrades a database from user_version v to v + 1 (applied in order, each
/// in its own transaction together with the user_version bump).
const std::vector<std::string>& migrations();

/// SQL that (re)creates the views; run after the migrations on every read-write open, so view
/// fixes need no migration.
const std::string& views_sql();

}  // namespace kvb::results

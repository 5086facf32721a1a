// The test hooks of results::Store, which are private: only tests reach them, through this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

#include "results/store.h"

namespace kvb::results {

/// Friend of Store (results/store.h) giving tests its two hooks.
struct StoreTestAccess {
  /// Caps the file at `pages` pages (PRAGMA max_page_count), to provoke SQLITE_FULL.
  static void set_max_page_count(Store& s, int64_t pages) { s.set_max_page_count_for_testing(pages); }
  /// Runs `hook(row)` after each generation row write_batch writes (e.g. to kill the writer).
  static void set_after_row_hook(Store& s, std::function<void(size_t row)> hook) {
    s.after_row_hook_for_testing = std::move(hook);
  }
};

}  // namespace kvb::results

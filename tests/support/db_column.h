// The first column of a query on a results database, for tests that check what a run stored.
#pragma once

#include <sqlite3.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvb::test {

/// The first column of every row of `sql` on the SQLite file `db`, opened read-only ("<null>"
/// for NULL). An unopenable file or a bad statement is a test failure (ADD_FAILURE), with the
/// rows read so far returned.
inline std::vector<std::string> db_column(const std::string& db, const std::string& sql) {
  std::vector<std::string> out;
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(h);
    ADD_FAILURE() << "cannot open " << db;
    return out;
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      out.push_back(t ? reinterpret_cast<const char*>(t) : "<null>");
    }
  } else {
    ADD_FAILURE() << sql << ": " << sqlite3_errmsg(h);
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

}  // namespace kvb::test

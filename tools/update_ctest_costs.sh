#!/usr/bin/env bash
# Refreshes tests/ctest_costs/{release,sanitize}.txt, the test times ctest orders a fresh build's
# run by (tests/CMakeLists.txt), from the cost files of finished runs: every test of 1 s or more,
# longest first, each line as ctest wrote it ("<test name> <runs> <mean seconds>"; a name may hold
# spaces). Run it after a full `ctest` in ./build and ./build-asan on the CI machine kind.
#   tools/update_ctest_costs.sh [BUILD_DIR [ASAN_BUILD_DIR]]
set -euo pipefail
cd "$(dirname "$0")/.."
take() {  # take BUILD_DIR OUT
  local f="$1/Testing/Temporary/CTestCostData.txt"
  [ -f "$f" ] || { echo "update_ctest_costs: $f: not found (run ctest there first)" >&2; exit 2; }
  awk '$0 == "---" { exit } NF >= 3 && $NF + 0 >= 1.0 { print $NF "\t" $0 }' "$f" | sort -t"$(printf '\t')" -k1,1 -g -r |
    cut -f2- >"$2"
  echo "$2: $(wc -l <"$2") tests"
}
take "${1:-build}" tests/ctest_costs/release.txt
take "${2:-build-asan}" tests/ctest_costs/sanitize.txt

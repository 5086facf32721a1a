// ci/: the ready-to-use nightly workflows. The GitHub Actions and GitLab CI files parse as YAML
// and have the parts ci/README.md promises (schedule, database cache per branch, run + compare +
// report, artifacts, failing on compare's exit 1); every kvbench command line in them and in the
// Slurm script names a command and options that `kvbench <command> --help` of the built binary
// lists; and ci/slurm/nightly.sbatch runs end to end here with SLURM_ARRAY_TASK_ID and
// SLURM_ARRAY_TASK_COUNT set: two shards, two nights, merge, compare, report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "datasets/records.h"
#include "results/store.h"
#include "engine/util/io.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;
using kvb::test::run_cli;
using kvb::test::run_command;

namespace {

const std::string kSrc = KVB_SOURCE_DIR;

/// One kvbench invocation found in a shell text: the command words ("run", "datasets fetch")
/// and the long options it passes.
struct Invocation {
  std::string command;
  std::vector<std::string> options;
  std::string line;
};

/// Every kvbench invocation in `shell` (a workflow step's script or a bash file): backslash
/// continuations joined, each line cut at | ; && || > and parentheses, a segment is an
/// invocation when its first word is kvbench, */kvbench, $KVBENCH or ${KVBENCH} (quoted or not).
std::vector<Invocation> kvbench_invocations(std::string shell) {
  shell = std::regex_replace(shell, std::regex("\\\\\n"), " ");
  std::vector<Invocation> out;
  std::istringstream lines(shell);
  std::string line;
  static const std::regex kSplit("\\|\\||&&|[|;>()]");
  static const std::regex kBin("^\"?(\\$\\{?KVBENCH\\}?|([^ \"]*/)?kvbench)\"?$");
  while (std::getline(lines, line)) {
    if (auto h = line.find_first_not_of(" \t"); h != std::string::npos && line[h] == '#') continue;
    for (std::sregex_token_iterator seg(line.begin(), line.end(), kSplit, -1), end; seg != end; ++seg) {
      std::istringstream words(seg->str());
      std::vector<std::string> w;
      for (std::string x; words >> x;) w.push_back(x);
      if (w.size() < 2 || !std::regex_match(w[0], kBin)) continue;
      Invocation inv;
      inv.command = w[1];
      inv.line = line;
      size_t i = 2;
      if (inv.command == "datasets" && w.size() > 2 && w[2][0] != '-') inv.command += " " + w[i++];
      for (; i < w.size(); ++i)
        if (w[i].rfind("--", 0) == 0) inv.options.push_back(w[i].substr(0, w[i].find('=')));
      out.push_back(inv);
    }
  }
  return out;
}

/// Fails the test for each invocation whose command or option `kvbench ... --help` does not list.
void expect_known(const std::vector<Invocation>& invs, const std::string& file) {
  for (const auto& inv : invs) {
    auto [rc, help] = run_cli(inv.command + " --help");
    ASSERT_EQ(rc, 0) << file << ": `kvbench " << inv.command << "` is not a command: " << help << "\n" << inv.line;
    for (const auto& o : inv.options) {
      std::regex listed("(^|[\\s,])" + o + "([\\s,=]|$)");
      EXPECT_TRUE(std::regex_search(help, listed))
          << file << ": `kvbench " << inv.command << "` has no option " << o << "\n"
          << inv.line;
    }
  }
}

std::multiset<std::string> commands(const std::vector<Invocation>& invs) {
  std::multiset<std::string> s;
  for (const auto& i : invs) s.insert(i.command);
  return s;
}

/// Expects the kvbench invocations in the shell text `shell` of `file` to be exactly the commands
/// `want` (a multiset: a command run twice is listed twice), each with options it accepts.
void expect_invocations(const std::string& shell, const std::string& file, const std::multiset<std::string>& want) {
  const auto invs = kvbench_invocations(shell);
  EXPECT_EQ(commands(invs), want) << file;
  expect_known(invs, file);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void require_binary() { ASSERT_EQ(access(KVB_BINARY, X_OK), 0) << "kvbench binary not built: " << KVB_BINARY; }

/// The shell of a workflow's real-model test job (label `nightly`): it builds with the tests,
/// fetches the 1.5B model before it runs that label, and invokes kvbench only as `models`.
void expect_nightly_test_job(const std::string& test_shell, const std::string& file) {
  EXPECT_TRUE(contains(test_shell, "./bootstrap.sh --tests")) << test_shell;
  EXPECT_LT(test_shell.find("$KVBENCH models --fetch qwen2.5-coder-1.5b-instruct"),
            test_shell.find("ctest --test-dir build --output-on-failure -L nightly"))
      << test_shell;
  EXPECT_TRUE(contains(test_shell, "ctest --test-dir build --output-on-failure -L nightly")) << test_shell;
  expect_invocations(test_shell, file, {"models"});
}

}  // namespace

TEST(CiWorkflows, InvocationScannerFindsCommandsAndOptions) {
  auto invs = kvbench_invocations(
      "# kvbench run --not-this\n"
      "set +e; $KVBENCH compare --db \"$DB\" --baseline previous \\\n  --missing-baseline-ok | tee c.txt\n"
      "./build/kvbench datasets fetch gsm8k --data-dir=d && \"${KVBENCH}\" report --out r\n"
      "echo kvbench run --x\n");
  ASSERT_EQ(invs.size(), 3u);
  EXPECT_EQ(invs[0].command, "compare");
  EXPECT_EQ(invs[0].options, (std::vector<std::string>{"--db", "--baseline", "--missing-baseline-ok"}));
  EXPECT_EQ(invs[1].command, "datasets fetch");
  EXPECT_EQ(invs[1].options, std::vector<std::string>{"--data-dir"});
  EXPECT_EQ(invs[2].command, "report");
}

TEST(CiWorkflows, GitHubActionsNightly) {
  require_binary();
  const std::string file = kSrc + "/ci/github/nightly.yml";
  const auto doc = kvb::datasets::load_yaml_file(file);
  // Scheduled, one job, steps in the promised order.
  ASSERT_TRUE(doc.contains("on")) << doc.dump();
  const auto& cron = doc["on"]["schedule"][0]["cron"];
  ASSERT_TRUE(cron.is_string());
  EXPECT_TRUE(std::regex_match(cron.get<std::string>(), std::regex("(\\S+ ){4}\\S+")));
  const auto& steps = doc["jobs"]["nightly"]["steps"];
  ASSERT_TRUE(steps.is_array());
  std::string all_shell;
  int restore = -1, save = -1, run = -1, compare = -1, report = -1, upload = -1, fail = -1;
  for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
    const auto& s = steps[i];
    const std::string uses = s.value("uses", ""), script = s.value("run", ""), cond = s.value("if", "");
    all_shell += script + "\n";
    if (uses.rfind("actions/cache/restore@", 0) == 0) {
      restore = i;
      EXPECT_EQ(s["with"]["path"], "nightly.db");
      EXPECT_TRUE(contains(s["with"]["key"].get<std::string>(), "${{ github.ref_name }}"));
      EXPECT_TRUE(contains(s["with"]["restore-keys"].get<std::string>(), "${{ github.ref_name }}"));
    }
    if (uses.rfind("actions/cache/save@", 0) == 0) {
      save = i;
      EXPECT_EQ(s["with"]["path"], "nightly.db");
      EXPECT_TRUE(contains(cond, "always()")) << "the database is saved even when compare fails";
    }
    if (contains(script, "$KVBENCH run ")) run = i;
    if (contains(script, "$KVBENCH compare ")) compare = i;
    if (contains(script, "$KVBENCH report ")) {
      report = i;
      EXPECT_TRUE(contains(script, "tools/render_report_png.sh")) << "the PNG";
    }
    if (uses.rfind("actions/upload-artifact@", 0) == 0) {
      upload = i;
      const std::string paths = s["with"]["path"].get<std::string>();
      EXPECT_TRUE(contains(paths, "nightly-report/") && contains(paths, "compare.txt")) << paths;
      EXPECT_TRUE(contains(cond, "always()")) << "artifacts also after a regression";
    }
    if (contains(cond, "steps.compare.outputs.status == '1'") && contains(script, "exit 1")) fail = i;
  }
  EXPECT_TRUE(restore >= 0 && restore < run && run < save && save < compare && compare < report && report < upload &&
              upload < fail)
      << restore << " " << run << " " << save << " " << compare << " " << report << " " << upload << " " << fail;
  ASSERT_GE(compare, 0);
  EXPECT_EQ(steps[compare].value("id", ""), "compare");
  EXPECT_TRUE(contains(steps[compare]["run"].get<std::string>(), "PIPESTATUS[0]"));
  EXPECT_TRUE(fs::exists(kSrc + "/tools/render_report_png.sh"));
  EXPECT_TRUE(fs::exists(kSrc + "/bootstrap.sh"));

  expect_invocations(all_shell, file, {"compare", "datasets fetch", "models", "report", "run"});
  // The real model of the GSM8K cells is fetched before the run (ci/nightly-suite.yaml).
  EXPECT_LT(all_shell.find("$KVBENCH models --fetch qwen2.5-coder-1.5b-instruct"), all_shell.find("$KVBENCH run "));

  // The real-model test (label `nightly`, left out of .ci/run) has a job of its own: the model
  // fetched, then that label.
  const auto& test_steps = doc["jobs"]["nightly-test"]["steps"];
  ASSERT_TRUE(test_steps.is_array()) << doc["jobs"].dump();
  std::string test_shell;
  for (const auto& s : test_steps) test_shell += s.value("run", "") + "\n";
  expect_nightly_test_job(test_shell, file);
}

TEST(CiWorkflows, GitLabNightly) {
  require_binary();
  const std::string file = kSrc + "/ci/gitlab/nightly.gitlab-ci.yml";
  const auto doc = kvb::datasets::load_yaml_file(file);
  const auto& job = doc["kvbench-nightly"];
  ASSERT_TRUE(job.is_object()) << doc.dump();
  EXPECT_TRUE(contains(job["rules"].dump(), "schedule"));
  bool db_cache = false;
  for (const auto& c : job["cache"])
    if (c["paths"] == nlohmann::json::array({"nightly.db"})) {
      db_cache = true;
      EXPECT_TRUE(contains(c["key"].get<std::string>(), "$CI_COMMIT_REF_SLUG"));
      EXPECT_EQ(c.value("when", ""), "always");
    }
  EXPECT_TRUE(db_cache) << job["cache"].dump();
  EXPECT_EQ(job["artifacts"]["when"], "always");
  EXPECT_EQ(job["artifacts"]["paths"], nlohmann::json::array({"nightly-report/", "compare.txt"}));
  std::string shell;
  for (const auto& section : {"before_script", "script"})
    for (const auto& l : job[section]) shell += l.get<std::string>() + "\n";
  EXPECT_EQ(job["script"].back(), "exit $status") << "the job's status is compare's";
  EXPECT_TRUE(contains(shell, "tools/render_report_png.sh"));
  expect_invocations(shell, file, {"compare", "datasets fetch", "models", "report", "run"});
  EXPECT_LT(shell.find("$KVBENCH models --fetch qwen2.5-coder-1.5b-instruct"), shell.find("$KVBENCH run "));

  // The real-model test (label `nightly`) in a job of its own.
  const auto& test_job = doc["kvbench-nightly-test"];
  ASSERT_TRUE(test_job.is_object()) << doc.dump();
  EXPECT_TRUE(contains(test_job["rules"].dump(), "schedule"));
  std::string test_shell;
  for (const auto& section : {"before_script", "script"})
    for (const auto& l : test_job[section]) test_shell += l.get<std::string>() + "\n";
  expect_nightly_test_job(test_shell, file);
}

TEST(CiWorkflows, SlurmScriptNamesExistingOptions) {
  require_binary();
  const std::string file = kSrc + "/ci/slurm/nightly.sbatch";
  expect_invocations(kvb::read_file(file), file, {"compare", "merge", "models", "report", "run"});
}

// Two nights of the Slurm array on the default model, each with two shards run one after the
// other as Slurm would run the array tasks, a tiny grid through KVB_NIGHTLY_ARGS.
TEST(CiSlurm, ArrayShardsMergeCompareAndReportOverTwoNights) {
  require_binary();
  const fs::path dir = fs::temp_directory_path() / ("kvb_ci_slurm_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto task = [&](int id, const std::string& night) {
    return run_command("cd " + kSrc + " && env -u SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID=" + std::to_string(id) +
                       " SLURM_ARRAY_TASK_COUNT=2 KVBENCH=" + KVB_BINARY + " KVB_NIGHTLY_DIR=" + dir.string() +
                       " KVB_RUN_NAME=" + night + " KVB_NIGHTLY_MODELS=smollm2-135m-instruct" +
                       " KVB_NIGHTLY_ARGS='--task smoke --limit 3 --policies full,snapkv --budgets 32 "
                       "--max-new-tokens 16' bash ci/slurm/nightly.sbatch");
  };
  const fs::path db = dir / "nightly.db";

  // Night 1: the first shard only writes its shard; the second (last) merges, finds no previous
  // night to compare with (exit 0 with a note) and writes the report.
  auto [rc0, out0] = task(0, "night-1");
  ASSERT_EQ(rc0, 0) << out0;
  EXPECT_TRUE(fs::exists(dir / "shards-night-1" / "shard-0.db"));
  EXPECT_FALSE(fs::exists(db)) << "merged before every shard was done";
  auto [rc1, out1] = task(1, "night-1");
  ASSERT_EQ(rc1, 0) << out1;
  EXPECT_TRUE(contains(out1, "no baseline run to compare with")) << out1;
  ASSERT_TRUE(fs::exists(db));
  {
    kvb::results::Store s(db.string(), kvb::results::Store::Mode::kReadOnly);
    auto runs = s.runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].name, "night-1");
    EXPECT_FALSE(runs[0].finished_at.empty()) << "both shards' parts finished";
    EXPECT_EQ(s.samples().size(), 3u * 2u) << "3 examples x (full, snapkv@32), from both shards";
    auto parts = s.query("SELECT shard_index, shard_count FROM run_parts ORDER BY 1");
    EXPECT_EQ(parts, (std::vector<std::vector<std::string>>{{"0", "2"}, {"1", "2"}}));
  }
  EXPECT_TRUE(fs::exists(dir / "report-night-1" / "index.html"));

  // Night 2, same build and settings: merged into the same database, compared with night 1.
  auto [rc2, out2] = task(0, "night-2");
  ASSERT_EQ(rc2, 0) << out2;
  auto [rc3, out3] = task(1, "night-2");
  ASSERT_EQ(rc3, 0) << out3;
  const std::string cmp = kvb::read_file((dir / "compare.txt").string());
  EXPECT_TRUE(contains(cmp, "baseline run 1 vs candidate run 2")) << cmp;
  EXPECT_TRUE(contains(cmp, "2 cells compared, 0 regression(s)")) << cmp;
  const std::string md = kvb::read_file((dir / "report-night-2" / "report.md").string());
  EXPECT_TRUE(contains(md, "## smollm2-135m-instruct — smoke")) << md;
  EXPECT_TRUE(fs::exists(dir / "report-night-2" / "cells.csv"));
  fs::remove_all(dir);
}

// Outside an array job the script says what it needs instead of running anything.
TEST(CiSlurm, RefusesToRunWithoutArrayVariables) {
  auto [rc, out] =
      run_command("cd " + kSrc + " && env -u SLURM_ARRAY_TASK_ID -u SLURM_ARRAY_TASK_COUNT bash ci/slurm/nightly.sbatch");
  EXPECT_NE(rc, 0);
  EXPECT_TRUE(contains(out, "SLURM_ARRAY_TASK_ID")) << out;
}

// Libraries only some commands need are loaded with dlopen at their first use, not linked
// (docs/architecture.md, "Memory"): GiNaC/CLN (math grading, libkvbench_symbolic.so) and libcurl
// (net/http.cpp). `ldd` lists what the dynamic linker maps at start-up, transitively.
TEST(BinaryFootprint, KvbenchDoesNotLinkGiNaCOrCurl) {
  KVB_REQUIRE_BINARY();
  std::string out;
  ASSERT_EQ(run_command("ldd " + std::string(KVB_BINARY) + " 2>&1", &out), 0) << out;
  EXPECT_TRUE(contains(out, "libstdc++")) << out;  // the listing is real
  for (const char* lib : {"libginac", "libcln", "libgmp", "libcurl"})
    EXPECT_FALSE(contains(out, lib)) << lib << "\n" << out;
}

// `kvbench --version` (and every result row) carries the commit the binary was built from, taken
// at build time with "+dirty" when tracked files differ from it (cmake/git_sha.cmake): after a
// commit, an incremental build must not keep the configure-time sha.
TEST(BuildInfo, VersionNamesTheCheckedOutCommit) {
  KVB_REQUIRE_BINARY();
  std::string head, status, out;
  ASSERT_EQ(run_command("git -C " + std::string(kSrc) + " rev-parse --short=12 HEAD 2>&1", &head), 0) << head;
  ASSERT_EQ(run_command("git -C " + std::string(kSrc) + " status --porcelain --untracked-files=no 2>&1", &status), 0)
      << status;
  ASSERT_EQ(run_command(std::string(KVB_BINARY) + " --version 2>&1", &out), 0) << out;
  while (!head.empty() && (head.back() == '\n' || head.back() == '\r')) head.pop_back();
  ASSERT_EQ(head.size(), 12u) << head;
  const std::string want = "(" + head + (status.empty() ? ")" : "+dirty)");
  EXPECT_TRUE(contains(out, want)) << "want " << want << " in: " << out;
}

// Sources cite the repository's own docs/ pages, never the reference notes that sit beside a
// checkout in ../shared (a clone does not carry them). Scans every shipped source, script,
// build file and doc page; the one exception is the generator that READS a note as its input
// data (its path is an argument, not a citation).
TEST(RepositoryLayout, NoSourceCitesTheNotesOutsideTheRepository) {
  static const std::regex kCitation(
      R"((\.\./shared/(reference|DESIGN))|\bDESIGN\.md\b|\bseed-[a-z-]+\.md\b|\bdatasets-graders\.md\b|\bpeers-harnesses\.md\b)");
  static const std::set<std::string> kExts = {".cpp", ".h",    ".inc", ".cu", ".cuh", ".py",
                                              ".sh",  ".yaml", ".yml", ".md", ".txt", ".cmake"};
  static const std::set<std::string> kReadsNoteAsData = {"tools/gen_longmemeval_judge_goldens.py"};
  std::vector<fs::path> roots;
  for (const char* d :
       {"engine", "harness", "graders", "tasks", "datasets", "results", "net", "fuzz", "tools", "docs", "ci", "cmake"})
    if (fs::exists(fs::path(kSrc) / d)) roots.push_back(fs::path(kSrc) / d);
  std::vector<std::string> offenders;
  auto scan = [&](const fs::path& p) {
    const std::string rel = fs::relative(p, kSrc).generic_string();
    if (kReadsNoteAsData.count(rel)) return;
    std::istringstream in(kvb::read_file(p.string()));
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      if (std::regex_search(line, kCitation)) offenders.push_back(rel + ":" + std::to_string(n) + ": " + line);
    }
  };
  size_t scanned = 0;
  for (const auto& root : roots)
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() && kExts.count(e.path().extension().string())) {
        scan(e.path());
        ++scanned;
      }
  for (const char* f : {"README.md", "CMakeLists.txt"}) {
    scan(fs::path(kSrc) / f);
    ++scanned;
  }
  EXPECT_GT(scanned, 200u);
  std::string all;
  for (const auto& o : offenders) all += o + "\n";
  EXPECT_TRUE(offenders.empty()) << all;
}

// --- The README as a front door (issue 32) ----------------------------------------------------

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

/// The lines of the fenced ```sh blocks of a Markdown text, in order.
std::vector<std::string> sh_block_lines(const std::string& md) {
  std::vector<std::string> out;
  bool in = false;
  for (const auto& l : lines_of(md)) {
    if (l.rfind("```", 0) == 0) {
      in = !in && l == "```sh";
      continue;
    }
    if (in) out.push_back(l);
  }
  return out;
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to '-', punctuation other than '-'
/// and '_' dropped.
std::string anchor_of(const std::string& heading) {
  std::string a;
  for (unsigned char c : heading) {
    if (std::isalnum(c) || c == '-' || c == '_' || c >= 0x80) a += static_cast<char>(std::tolower(c));
    else if (c == ' ') a += '-';
  }
  return a;
}

}  // namespace

TEST(FrontDoor, ReadmeIsShortAndItsTestCommandIsWhatCiRuns) {
  const std::string readme = kvb::read_file(kSrc + "/README.md");
  EXPECT_LE(lines_of(readme).size(), 250u) << "README.md is the front door: measurements and history go to docs/";
  const auto sh = sh_block_lines(readme);
  ASSERT_GE(sh.size(), 2u);
  EXPECT_EQ(sh[0], "./bootstrap.sh && ./build/kvbench run") << "the main-job command";
  const std::string test_cmd = sh[1];
  EXPECT_NE(test_cmd.find("ctest"), std::string::npos) << test_cmd;
  bool found = false;
  for (const auto& l : lines_of(kvb::read_file(kSrc + "/.ci/run"))) found = found || l == test_cmd;
  EXPECT_TRUE(found) << "README's test command is not a line of .ci/run: " << test_cmd;
  // bootstrap.sh's options the two commands use exist.
  const std::string boot = kvb::read_file(kSrc + "/bootstrap.sh");
  EXPECT_NE(boot.find("--tests) TESTS=1"), std::string::npos);
  EXPECT_NE(boot.find("--target kvbench"), std::string::npos) << "the main job builds kvbench first";
}

// Every relative link of the README and of docs/*.md names a file that exists, and an anchor
// into a Markdown file names one of its headings.
TEST(FrontDoor, RelativeLinksAndAnchorsResolve) {
  std::vector<fs::path> pages = {fs::path(kSrc) / "README.md"};
  for (const auto& e : fs::directory_iterator(fs::path(kSrc) / "docs"))
    if (e.path().extension() == ".md") pages.push_back(e.path());
  static const std::regex kLink(R"(\]\(([^)\s]+)\))");
  size_t checked = 0;
  for (const auto& page : pages) {
    const std::string text = kvb::read_file(page.string());
    for (std::sregex_iterator m(text.begin(), text.end(), kLink), end; m != end; ++m) {
      std::string target = (*m)[1].str();
      if (target.rfind("http", 0) == 0 || target.rfind("mailto:", 0) == 0) continue;
      std::string anchor;
      if (auto h = target.find('#'); h != std::string::npos) {
        anchor = target.substr(h + 1);
        target = target.substr(0, h);
      }
      const fs::path file = target.empty() ? page : page.parent_path() / target;
      ++checked;
      ASSERT_TRUE(fs::exists(file)) << page.filename() << ": link to missing " << (*m)[1].str();
      if (anchor.empty() || file.extension() != ".md") continue;
      std::set<std::string> anchors;
      for (const auto& l : lines_of(kvb::read_file(file.string())))
        if (l.rfind("#", 0) == 0) anchors.insert(anchor_of(l.substr(l.find_first_not_of('#'))).substr(1));
      EXPECT_TRUE(anchors.count(anchor)) << page.filename() << ": no heading for #" << anchor << " in " << target;
    }
  }
  EXPECT_GT(checked, 20u);
}

// The README's tour names only commands and options the binary has.
TEST(FrontDoor, ReadmeTourNamesExistingCommandsAndOptions) {
  require_binary();
  std::string shell;
  for (const auto& l : sh_block_lines(kvb::read_file(kSrc + "/README.md"))) shell += l + "\n";
  const auto invs = kvbench_invocations(shell);
  EXPECT_GE(invs.size(), 10u);
  expect_known(invs, "README.md");
}

// The `nightly` label (tests/ci/test_ci_nightly.cpp, the real 1.5B model) is excluded from
// .ci/run's Release ctest by name, not skipped, and run by tools/ci_full.sh after fetching its
// model; CMake gives the test that label.
TEST(CiLabels, NightlyLabelIsLeftOutOfCiVisiblyAndRunByTheFullRun) {
  const std::string ci = kvb::read_file(kSrc + "/.ci/run");
  EXPECT_TRUE(contains(ci, "ctest --test-dir build --output-on-failure -j2 -LE nightly")) << ci;
  const std::string full = kvb::read_file(kSrc + "/tools/ci_full.sh");
  const auto fetch = full.find("./build/kvbench models --fetch qwen2.5-coder-1.5b-instruct");
  const auto run = full.find("ctest --test-dir build --output-on-failure -L nightly");
  EXPECT_NE(run, std::string::npos) << full;
  EXPECT_LT(fetch, run) << full;
  const std::string cmake = kvb::read_file(kSrc + "/tests/ci/CMakeLists.txt");
  EXPECT_TRUE(std::regex_search(cmake, std::regex("gtest_discover_tests\\(test_ci_nightly[^)]*LABELS nightly"))) << cmake;
}

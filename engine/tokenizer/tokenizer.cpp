// kvb::tok::Tokenizer: the tokenizer.json pipeline of Hugging Face `tokenizers`
// (tokenizers/src/tokenizer/mod.rs): added-token splitting (added_vocabulary.rs), normalizer,
// pre-tokenizer, model (bpe.h), post-processor, decoder. See tokenizer.h.
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <functional>
#include <unordered_map>

#include <re2/re2.h>

#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/split.h"
#include "engine/tokenizer/unicode.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb::tok {

using nlohmann::json;

namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

/// Normalizer: rewrites one segment of text in place.
using NormalizeFn = std::function<void(std::string&)>;
/// Pre-tokenizer: splits/rewrites the pieces of one segment. `at_text_start` is true when the
/// segment starts at byte 0 of the input (Metaspace's prepend_scheme "first").
using PreTokenizeFn = std::function<void(std::vector<std::string>&, bool at_text_start)>;
/// Decoder: rewrites the list of token strings (HF Decoder::decode_chain).
using DecodeFn = std::function<void(std::vector<std::string>&)>;

/// One added token (tokenizer.json `added_tokens[]`).
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, normalized = false, single_word = false;
};

/// Reads a child of a JSON object with a field path for errors.
class Obj {
 public:
  Obj(const json& j, std::string origin, std::string path) : j_(j), origin_(std::move(origin)), path_(std::move(path)) {
    if (!j_.is_object()) fail_at(origin_, path_, "must be an object, got {}", j_.type_name());
  }
  std::string field(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }
  const json& at(const std::string& key) const {
    if (!has(key)) fail_at(origin_, field(key), "missing");
    return j_[key];
  }
  std::string str(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_string()) fail_at(origin_, field(key), "must be a string, got {}", v.type_name());
    return v.get<std::string>();
  }
  std::string str_or(const std::string& key, const std::string& def) const { return has(key) ? str(key) : def; }
  bool boolean_or(const std::string& key, bool def) const {
    if (!has(key)) return def;
    if (!j_[key].is_boolean()) fail_at(origin_, field(key), "must be a boolean, got {}", j_[key].type_name());
    return j_[key].get<bool>();
  }
  int64_t integer_or(const std::string& key, int64_t def) const {
    if (!has(key)) return def;
    if (!j_[key].is_number_integer()) fail_at(origin_, field(key), "must be an integer");
    return j_[key].get<int64_t>();
  }
  const json& array(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_array()) fail_at(origin_, field(key), "must be an array, got {}", v.type_name());
    return v;
  }
  const std::string& origin() const { return origin_; }
  const std::string& path() const { return path_; }

 private:
  const json& j_;
  std::string origin_, path_;
};

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit = s.find(from); hit != std::string::npos; hit = s.find(from, pos)) {
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// A `pattern` object of Replace/Split: {"String": s} or {"Regex": r}. Returns a function that
// replaces every match in a string with `content`.
std::function<void(std::string&)> make_replacer(const Obj& o, const std::string& content) {
  Obj pat(o.at("pattern"), o.origin(), o.field("pattern"));
  if (pat.has("String")) {
    std::string from = pat.str("String");
    return [from, content](std::string& s) { replace_all(s, from, content); };
  }
  if (pat.has("Regex")) {
    RE2::Options opts;
    opts.set_log_errors(false);
    auto re = std::make_shared<RE2>(pat.str("Regex"), opts);
    if (!re->ok()) fail_at(o.origin(), pat.field("Regex"), "unsupported regex: {}", re->error());
    std::string rewrite;  // escape backslashes: the content is literal
    for (char c : content) {
      if (c == '\\') rewrite += '\\';
      rewrite += c;
    }
    return [re, rewrite](std::string& s) { RE2::GlobalReplace(&s, *re, rewrite); };
  }
  fail_at(o.origin(), o.field("pattern"), "must have a \"String\" or \"Regex\" key");
}

// ---------------------------------------------------------------------------------------------
// Normalizers (tokenizers/src/normalizers).

NormalizeFn make_normalizer(const json& j, const std::string& origin, const std::string& path) {
  Obj o(j, origin, path);
  const std::string type = o.str("type");
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
    return [type](std::string& s) { s = uni::normalize(s, type); };
  if (type == "Lowercase") return [](std::string& s) { s = uni::to_lower(s); };
  if (type == "Prepend") {
    std::string prefix = o.str("prepend");
    return [prefix](std::string& s) {
      if (!s.empty()) s.insert(0, prefix);
    };
  }
  if (type == "Replace") return make_replacer(o, o.str("content"));
  if (type == "Strip") {
    const bool left = o.boolean_or("strip_left", true), right = o.boolean_or("strip_right", true);
    return [left, right](std::string& s) {
      size_t a = 0, b = s.size(), len = 0;
      while (left && a < b && uni::is_space(uni::decode_utf8(s, a, &len))) a += len;
      while (right && b > a) {
        size_t k = b - 1;
        while (k > a && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
        if (!uni::is_space(uni::decode_utf8(s, k, &len))) break;
        b = k;
      }
      s = s.substr(a, b - a);
    };
  }
  if (type == "Sequence") {
    const json& list = o.array("normalizers");
    std::vector<NormalizeFn> fns;
    for (size_t i = 0; i < list.size(); ++i)
      fns.push_back(make_normalizer(list[i], origin, fmt::format("{}[{}]", o.field("normalizers"), i)));
    return [fns](std::string& s) {
      for (const auto& f : fns) f(s);
    };
  }
  fail_at(origin, o.field("type"),
          "unsupported normalizer type {:?} (supported: NFC, NFD, NFKC, NFKD, "
          "Lowercase, Prepend, Replace, Strip, Sequence)",
          type);
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers (tokenizers/src/pre_tokenizers).

SplitBehavior parse_behavior(const Obj& o) {
  const std::string b = o.str_or("behavior", "Isolated");
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  fail_at(o.origin(), o.field("behavior"), "unknown split behavior {:?}", b);
}

// Applies `pattern` to every piece.
PreTokenizeFn make_splitter(std::shared_ptr<SplitPattern> pattern, SplitBehavior behavior, bool invert) {
  return [pattern, behavior, invert](std::vector<std::string>& pieces, bool) {
    thread_local std::vector<Span> matches;
    std::vector<std::string> out;
    out.reserve(pieces.size() * 4);
    for (const std::string& p : pieces) {
      matches.clear();
      pattern->find_matches(p, matches);
      split_by_matches(p, matches, behavior, invert, out);
    }
    pieces.swap(out);
  };
}

PreTokenizeFn make_pre_tokenizer(const json& j, const std::string& origin, const std::string& path) {
  Obj o(j, origin, path);
  const std::string type = o.str("type");
  if (type == "Split") {
    Obj pat(o.at("pattern"), origin, o.field("pattern"));
    std::shared_ptr<SplitPattern> p;
    if (pat.has("String")) p = std::make_shared<SplitPattern>(SplitPattern::literal(pat.str("String")));
    else if (pat.has("Regex"))
      p = std::make_shared<SplitPattern>(SplitPattern::regex(pat.str("Regex"), origin, pat.field("Regex")));
    else fail_at(origin, o.field("pattern"), "must have a \"String\" or \"Regex\" key");
    return make_splitter(p, parse_behavior(o), o.boolean_or("invert", false));
  }
  if (type == "ByteLevel") {
    const bool prefix_space = o.boolean_or("add_prefix_space", true);
    const bool use_regex = o.boolean_or("use_regex", true);
    std::shared_ptr<SplitPattern> gpt2;
    if (use_regex) gpt2 = std::make_shared<SplitPattern>(SplitPattern::regex(std::string(kGpt2Pattern), origin, path));
    return [prefix_space, gpt2](std::vector<std::string>& pieces, bool) {
      if (prefix_space)
        for (std::string& p : pieces)
          if (p.empty() || p[0] != ' ') p.insert(0, " ");
      if (gpt2) {
        thread_local std::vector<Span> matches;
        std::vector<std::string> out;
        for (const std::string& p : pieces) {
          matches.clear();
          gpt2->find_matches(p, matches);
          split_by_matches(p, matches, SplitBehavior::kIsolated, false, out);
        }
        pieces.swap(out);
      }
      for (std::string& p : pieces) {
        std::string mapped;
        mapped.reserve(p.size() * 2);
        for (char c : p) mapped += uni::byte_to_unicode(static_cast<uint8_t>(c));
        p.swap(mapped);
      }
    };
  }
  if (type == "Metaspace") {
    const std::string rep = o.str_or("replacement", "\xE2\x96\x81");
    std::string scheme = o.str_or("prepend_scheme", "");
    if (scheme.empty()) scheme = o.boolean_or("add_prefix_space", true) ? "always" : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never")
      fail_at(origin, o.field("prepend_scheme"), "unknown prepend scheme {:?}", scheme);
    const bool split = o.boolean_or("split", true);
    auto pattern = std::make_shared<SplitPattern>(SplitPattern::literal(rep));
    return [rep, scheme, split, pattern](std::vector<std::string>& pieces, bool at_text_start) {
      std::vector<std::string> out;
      for (size_t i = 0; i < pieces.size(); ++i) {
        std::string p = pieces[i];
        replace_all(p, " ", rep);
        const bool starts = p.compare(0, rep.size(), rep) == 0;
        if (!starts && (scheme == "always" || (scheme == "first" && at_text_start && i == 0))) p.insert(0, rep);
        if (!split) {
          out.push_back(std::move(p));
          continue;
        }
        std::vector<Span> matches;
        pattern->find_matches(p, matches);
        split_by_matches(p, matches, SplitBehavior::kMergedWithNext, false, out);
      }
      pieces.swap(out);
    };
  }
  if (type == "Digits") {
    const bool individual = o.boolean_or("individual_digits", false);
    return [individual](std::vector<std::string>& pieces, bool) {
      std::vector<std::string> out;
      for (const std::string& p : pieces) {
        std::vector<Span> matches;  // \p{Nd}-ish: HF uses char::is_numeric (Unicode N*)
        size_t len;
        for (size_t i = 0; i < p.size(); i += len) {
          const char32_t cp = uni::decode_utf8(p, i, &len);
          if (uni::is_number(cp)) {
            if (!individual && !matches.empty() && matches.back().second == i) matches.back().second = i + len;
            else matches.emplace_back(i, i + len);
          }
        }
        split_by_matches(p, matches, SplitBehavior::kIsolated, false, out);
      }
      pieces.swap(out);
    };
  }
  if (type == "WhitespaceSplit") {
    return [](std::vector<std::string>& pieces, bool) {
      std::vector<std::string> out;
      for (const std::string& p : pieces) {
        std::vector<Span> matches;
        size_t len;
        for (size_t i = 0; i < p.size(); i += len)
          if (uni::is_space(uni::decode_utf8(p, i, &len))) matches.emplace_back(i, i + len);
        split_by_matches(p, matches, SplitBehavior::kRemoved, false, out);
      }
      pieces.swap(out);
    };
  }
  if (type == "Sequence") {
    const json& list = o.array("pretokenizers");
    std::vector<PreTokenizeFn> fns;
    for (size_t i = 0; i < list.size(); ++i)
      fns.push_back(make_pre_tokenizer(list[i], origin, fmt::format("{}[{}]", o.field("pretokenizers"), i)));
    return [fns](std::vector<std::string>& pieces, bool at_text_start) {
      for (const auto& f : fns) f(pieces, at_text_start);
    };
  }
  fail_at(origin, o.field("type"),
          "unsupported pre-tokenizer type {:?} (supported: Split, ByteLevel, "
          "Metaspace, Digits, WhitespaceSplit, Sequence)",
          type);
}

// ---------------------------------------------------------------------------------------------
// Decoders (tokenizers/src/decoders).

DecodeFn make_decoder(const json& j, const std::string& origin, const std::string& path) {
  Obj o(j, origin, path);
  const std::string type = o.str("type");
  if (type == "ByteLevel") {
    return [](std::vector<std::string>& toks) {
      std::string bytes;
      for (const std::string& t : toks) {
        const size_t start = bytes.size();
        bool all = true;
        size_t len;
        for (size_t i = 0; i < t.size() && all; i += len) {
          const int b = uni::unicode_to_byte(uni::decode_utf8(t, i, &len));
          if (b < 0) all = false;
          else bytes += static_cast<char>(b);
        }
        if (!all) {  // a token outside the byte alphabet is kept as its own UTF-8 bytes
          bytes.resize(start);
          bytes += t;
        }
      }
      toks.assign(1, uni::utf8_lossy(bytes));
    };
  }
  if (type == "Replace") {
    auto fn = make_replacer(o, o.str("content"));
    return [fn](std::vector<std::string>& toks) {
      for (std::string& t : toks) fn(t);
    };
  }
  if (type == "ByteFallback") {
    return [](std::vector<std::string>& toks) {
      std::vector<std::string> out;
      std::string pending;
      auto flush = [&] {
        if (pending.empty()) return;
        if (uni::is_valid_utf8(pending)) out.push_back(pending);
        else
          for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(kReplacementChar);
        pending.clear();
      };
      for (std::string& t : toks) {
        auto hex = [](char c) -> int {
          if (c >= '0' && c <= '9') return c - '0';
          if (c >= 'A' && c <= 'F') return c - 'A' + 10;
          if (c >= 'a' && c <= 'f') return c - 'a' + 10;
          return -1;
        };
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) >= 0 && hex(t[4]) >= 0) {
          pending += static_cast<char>(hex(t[3]) * 16 + hex(t[4]));
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      toks.swap(out);
    };
  }
  if (type == "Fuse") {
    return [](std::vector<std::string>& toks) {
      std::string all;
      for (const std::string& t : toks) all += t;
      toks.assign(1, std::move(all));
    };
  }
  if (type == "Strip") {
    const std::string content = o.str("content");
    const int64_t start = o.integer_or("start", 0), stop = o.integer_or("stop", 0);
    return [content, start, stop](std::vector<std::string>& toks) {
      for (std::string& t : toks) {
        size_t a = 0, b = t.size();
        for (int64_t k = 0; k < start && t.compare(a, content.size(), content) == 0 && a < b; ++k) a += content.size();
        for (int64_t k = 0;
             k < stop && b >= a + content.size() && t.compare(b - content.size(), content.size(), content) == 0; ++k)
          b -= content.size();
        t = t.substr(a, b - a);
      }
    };
  }
  if (type == "Metaspace") {
    const std::string rep = o.str_or("replacement", "\xE2\x96\x81");
    std::string scheme = o.str_or("prepend_scheme", "");
    if (scheme.empty()) scheme = o.boolean_or("add_prefix_space", true) ? "always" : "never";
    const bool drop_first = scheme != "never";
    return [rep, drop_first](std::vector<std::string>& toks) {
      for (size_t i = 0; i < toks.size(); ++i) replace_all(toks[i], rep, i == 0 && drop_first ? "" : " ");
    };
  }
  if (type == "Sequence") {
    const json& list = o.array("decoders");
    std::vector<DecodeFn> fns;
    for (size_t i = 0; i < list.size(); ++i)
      fns.push_back(make_decoder(list[i], origin, fmt::format("{}[{}]", o.field("decoders"), i)));
    return [fns](std::vector<std::string>& toks) {
      for (const auto& f : fns) f(toks);
    };
  }
  fail_at(origin, o.field("type"),
          "unsupported decoder type {:?} (supported: ByteLevel, Replace, "
          "ByteFallback, Fuse, Strip, Metaspace, Sequence)",
          type);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

/// Everything a Tokenizer holds.
class TokenizerImpl {
 public:
  std::string origin;
  NormalizeFn normalizer;       // may be empty
  PreTokenizeFn pre_tokenizer;  // may be empty
  std::unique_ptr<BpeModel> model;
  DecodeFn decoder;                               // may be empty (tokens joined with spaces)
  std::vector<int32_t> post_prefix, post_suffix;  // added around the ids with add_special_tokens
  std::vector<AddedToken> added;
  std::unordered_map<int32_t, size_t> added_by_id;
  VocabMap added_by_content;
  // Added tokens bucketed by first byte, longest first: [0] not normalized, [1] normalized.
  std::array<std::array<std::vector<size_t>, 256>, 2> buckets;
  std::vector<std::string> pieces;  // id -> token string (model vocab, then added tokens)
  std::vector<uint8_t> special;     // id -> special added token
  std::vector<uint8_t> present;     // id -> has a token string
  std::optional<int32_t> bos, eos;

  static Tokenizer make(std::unique_ptr<TokenizerImpl> impl) { return Tokenizer(std::move(impl)); }

  /// A segment of text: either plain text or one added token.
  struct Segment {
    size_t a, b;
    int32_t id;  // -1 = text
  };

  /// HF AddedVocabulary::find_matches: leftmost-longest matches of the added tokens of one
  /// kind in `s`, with single_word / lstrip / rstrip handling.
  void split_added(std::string_view s, int normalized, std::vector<Segment>& out) const {
    const auto& bk = buckets[normalized];
    size_t start_offset = 0;
    for (size_t pos = 0; pos < s.size();) {
      const auto& cands = bk[static_cast<uint8_t>(s[pos])];
      const AddedToken* hit = nullptr;
      for (size_t idx : cands) {
        const AddedToken& t = added[idx];
        if (s.compare(pos, t.content.size(), t.content) == 0) {
          hit = &t;
          break;
        }
      }
      if (!hit) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + hit->content.size();
      pos = stop;
      if (hit->single_word) {
        auto word_char = [](char32_t c) { return uni::is_letter(c) || uni::is_number(c) || c == '_'; };
        bool start_ok = true, stop_ok = true;
        if (start > 0) {
          size_t k = start - 1, len;
          while (k > 0 && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
          start_ok = !word_char(uni::decode_utf8(s, k, &len));
        }
        if (stop < s.size()) {
          size_t len;
          stop_ok = !word_char(uni::decode_utf8(s, stop, &len));
        }
        if (!start_ok || !stop_ok) continue;
      }
      if (hit->lstrip) {
        size_t k = start;
        while (k > 0) {
          size_t j = k - 1, len;
          while (j > 0 && (static_cast<uint8_t>(s[j]) & 0xC0) == 0x80) --j;
          if (!uni::is_space(uni::decode_utf8(s, j, &len))) break;
          k = j;
        }
        start = std::max(k, start_offset);
      }
      if (hit->rstrip) {
        size_t len;
        while (stop < s.size() && uni::is_space(uni::decode_utf8(s, stop, &len))) stop += len;
      }
      if (start_offset < start) out.push_back({start_offset, start, -1});
      out.push_back({start, stop, hit->id});
      start_offset = stop;
    }
    if (start_offset < s.size()) out.push_back({start_offset, s.size(), -1});
  }

  void encode_text(std::string_view text, bool at_text_start, std::vector<int32_t>& ids) const {
    std::vector<std::string> pieces_list;
    pieces_list.emplace_back(text);
    if (pre_tokenizer) pre_tokenizer(pieces_list, at_text_start);
    for (const std::string& p : pieces_list) model->tokenize(p, ids);
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special) const {
    std::vector<int32_t> ids;
    if (add_special) ids = post_prefix;
    std::vector<Segment> raw, norm;
    split_added(text, 0, raw);
    for (const Segment& seg : raw) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
        continue;
      }
      std::string s(text.substr(seg.a, seg.b - seg.a));
      if (normalizer) normalizer(s);
      norm.clear();
      split_added(s, 1, norm);
      for (const Segment& sub : norm) {
        if (sub.id >= 0) ids.push_back(sub.id);
        else encode_text(std::string_view(s).substr(sub.a, sub.b - sub.a), seg.a == 0 && sub.a == 0, ids);
      }
    }
    if (add_special) ids.insert(ids.end(), post_suffix.begin(), post_suffix.end());
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special) const {
    std::vector<std::string> toks;
    toks.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 0 || static_cast<size_t>(id) >= pieces.size()) continue;
      if (skip_special && special[id]) continue;
      if (!present[id]) continue;  // an id hole in the vocabulary
      toks.push_back(pieces[id]);
    }
    if (!decoder) {
      std::string out;
      for (size_t i = 0; i < toks.size(); ++i) {
        if (i) out += ' ';
        out += toks[i];
      }
      return out;
    }
    decoder(toks);
    std::string out;
    for (const std::string& t : toks) out += t;
    return out;
  }

  /// Parses the post_processor object into post_prefix / post_suffix.
  void parse_post_processor(const json& j, const std::string& path) {
    Obj o(j, origin, path);
    const std::string type = o.str("type");
    if (type == "ByteLevel") return;  // only adjusts offsets
    if (type == "Sequence") {
      const json& list = o.array("processors");
      for (size_t i = 0; i < list.size(); ++i)
        parse_post_processor(list[i], fmt::format("{}[{}]", o.field("processors"), i));
      return;
    }
    if (type == "TemplateProcessing") {
      const json& single = o.array("single");
      const json empty = json::object();
      const json& specials = o.has("special_tokens") ? o.at("special_tokens") : empty;
      std::vector<int32_t> before, after;
      bool seen_seq = false;
      for (size_t i = 0; i < single.size(); ++i) {
        const std::string f = fmt::format("{}[{}]", o.field("single"), i);
        Obj item(single[i], origin, f);
        if (item.has("Sequence")) {
          seen_seq = true;
          continue;
        }
        if (!item.has("SpecialToken")) fail_at(origin, f, "must hold \"Sequence\" or \"SpecialToken\"");
        Obj st(item.at("SpecialToken"), origin, f + ".SpecialToken");
        const std::string name = st.str("id");
        if (!specials.is_object() || !specials.contains(name))
          fail_at(origin, o.field("special_tokens"), "has no entry for {:?}", name);
        Obj entry(specials[name], origin, o.field("special_tokens") + "." + name);
        for (const json& id : entry.array("ids")) {
          if (!id.is_number_integer()) fail_at(origin, entry.field("ids"), "must hold integers");
          (seen_seq ? after : before).push_back(id.get<int32_t>());
        }
      }
      post_prefix.insert(post_prefix.end(), before.begin(), before.end());
      post_suffix.insert(post_suffix.end(), after.begin(), after.end());
      return;
    }
    if (type == "RobertaProcessing" || type == "BertProcessing") {
      auto tok_id = [&](const std::string& key) {
        const json& v = o.at(key);
        if (!v.is_array() || v.size() != 2 || !v[1].is_number_integer())
          fail_at(origin, o.field(key), "must be [token, id]");
        return v[1].get<int32_t>();
      };
      post_prefix.push_back(tok_id("cls"));
      post_suffix.push_back(tok_id("sep"));
      return;
    }
    fail_at(origin, o.field("type"),
            "unsupported post-processor type {:?} (supported: TemplateProcessing, "
            "ByteLevel, RobertaProcessing, BertProcessing, Sequence)",
            type);
  }
};

namespace {

// bos_token / eos_token of tokenizer_config.json: a string, {"content": ...}, or null.
std::optional<std::string> config_token(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(const json& tj, const std::string& origin, const json& tokenizer_config) {
  auto impl = std::make_unique<TokenizerImpl>();
  impl->origin = origin;
  Obj root(tj, origin, "");
  if (!root.has("model")) fail_at(origin, "model", "missing");
  Obj model(root.at("model"), origin, "model");
  std::string type = model.str_or("type", "");
  if (type.empty() && model.has("merges")) type = "BPE";
  if (type != "BPE")
    fail_at(origin, "model.type", "unsupported model type {:?} (supported: BPE)", type.empty() ? "<missing>" : type);
  impl->model = std::make_unique<BpeModel>(root.at("model"), origin);

  if (root.has("normalizer")) impl->normalizer = make_normalizer(root.at("normalizer"), origin, "normalizer");
  if (root.has("pre_tokenizer"))
    impl->pre_tokenizer = make_pre_tokenizer(root.at("pre_tokenizer"), origin, "pre_tokenizer");
  if (root.has("post_processor")) impl->parse_post_processor(root.at("post_processor"), "post_processor");
  if (root.has("decoder")) impl->decoder = make_decoder(root.at("decoder"), origin, "decoder");

  if (root.has("added_tokens")) {
    const json& list = root.array("added_tokens");
    for (size_t i = 0; i < list.size(); ++i) {
      Obj a(list[i], origin, fmt::format("added_tokens[{}]", i));
      AddedToken t;
      t.content = a.str("content");
      if (a.has("id") && (a.integer_or("id", -1) < 0 || a.integer_or("id", -1) > INT32_MAX))
        fail_at(origin, a.field("id"), "out of range");
      if (t.content.empty()) continue;  // HF ignores empty added tokens
      t.special = a.boolean_or("special", false);
      t.lstrip = a.boolean_or("lstrip", false);
      t.rstrip = a.boolean_or("rstrip", false);
      t.single_word = a.boolean_or("single_word", false);
      t.normalized = a.boolean_or("normalized", !t.special);
      // Ids follow HF AddedVocabulary::add_tokens, not the "id" field: an already added token
      // keeps its id, a token of the model vocabulary takes that id, any other token gets the
      // next id after the vocabulary (or after the highest added id beyond it).
      if (auto it = impl->added_by_content.find(t.content); it != impl->added_by_content.end()) {
        t.id = it->second;
      } else if (auto mid = impl->model->token_to_id(t.content)) {
        t.id = *mid;
      } else {
        const int64_t vsize = static_cast<int64_t>(impl->model->vocab().size());
        int64_t max_added = -1;
        for (const AddedToken& o : impl->added) max_added = std::max<int64_t>(max_added, o.id);
        const int64_t id = max_added < 0 ? vsize : (max_added >= vsize || vsize == 0 ? max_added + 1 : vsize);
        // The next id after an added token at INT32_MAX does not fit a token id.
        if (id > INT32_MAX)
          fail_at(origin, fmt::format("added_tokens[{}]", i),
                  "token {:?} would get id {}, beyond the largest token id {}", t.content, id, INT32_MAX);
        t.id = static_cast<int32_t>(id);
      }
      impl->added_by_content[t.content] = t.id;
      if (auto it = impl->added_by_id.find(t.id); it != impl->added_by_id.end()) {
        impl->added[it->second] = std::move(t);  // same id: the later definition wins
      } else {
        impl->added_by_id[t.id] = impl->added.size();
        impl->added.push_back(std::move(t));
      }
    }
  }
  for (size_t i = 0; i < impl->added.size(); ++i) {
    const AddedToken& t = impl->added[i];
    impl->buckets[t.normalized ? 1 : 0][static_cast<uint8_t>(t.content[0])].push_back(i);
  }
  for (auto& kind : impl->buckets)
    for (auto& b : kind)
      std::stable_sort(b.begin(), b.end(), [&](size_t x, size_t y) {
        return impl->added[x].content.size() > impl->added[y].content.size();
      });

  int32_t max_id = -1;
  std::string max_token;
  bool max_is_added = false;
  for (const auto& [tok, id] : impl->model->vocab())
    if (id > max_id) max_id = id, max_token = tok;
  for (const AddedToken& t : impl->added)
    if (t.id > max_id) max_id = t.id, max_token = t.content, max_is_added = true;
  // The id -> token tables below are indexed by id, so their size is the largest id: an id far
  // beyond the number of tokens the file defines (2147483647 in a 10 KB file) would allocate
  // gigabytes for nothing. Real vocabularies are dense (ids 0..n-1, a few reserved gaps); four
  // times the token count plus 65536 leaves room for any of those.
  const int64_t n_tokens = static_cast<int64_t>(impl->model->vocab().size() + impl->added.size());
  const int64_t id_limit = 4 * n_tokens + 65536;
  if (max_id >= id_limit)
    fail_at(origin, max_is_added ? "added_tokens" : "model.vocab",
            "token {:?} has id {}, beyond what {} tokens can use (ids must be below {}; the id -> token table is "
            "sized by the largest id)",
            max_token, max_id, n_tokens, id_limit);
  impl->pieces.assign(static_cast<size_t>(max_id + 1), std::string());
  impl->special.assign(static_cast<size_t>(max_id + 1), 0);
  impl->present.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [tok, id] : impl->model->vocab()) {
    impl->pieces[id] = tok;
    impl->present[id] = 1;
  }
  for (const AddedToken& t : impl->added) {
    impl->pieces[t.id] = t.content;
    impl->present[t.id] = 1;
    impl->special[t.id] = t.special;
  }
  for (int32_t id : impl->post_prefix)
    if (id < 0 || id > max_id) fail_at(origin, "post_processor", "special token id {} is out of the vocabulary", id);
  for (int32_t id : impl->post_suffix)
    if (id < 0 || id > max_id) fail_at(origin, "post_processor", "special token id {} is out of the vocabulary", id);

  Tokenizer tok(std::move(impl));
  TokenizerImpl& im = *tok.impl_;
  if (!im.post_prefix.empty()) im.bos = im.post_prefix.front();
  else if (auto b = config_token(tokenizer_config, "bos_token")) im.bos = tok.piece_to_id(*b);
  if (auto e = config_token(tokenizer_config, "eos_token")) im.eos = tok.piece_to_id(*e);
  return tok;
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_json(parse_json_file(path, InputKind::kTokenizer), path);
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  const std::string tj = dir + "/tokenizer.json";
  if (!file_exists(tj)) fail_at(tj, "", "not found (the model folder needs a tokenizer.json)");
  const std::string cfg_path = dir + "/tokenizer_config.json";
  json cfg = json::object();
  if (file_exists(cfg_path)) cfg = parse_json_file(cfg_path);
  return from_json(parse_json_file(tj, InputKind::kTokenizer), tj, cfg);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->encode(text, add_special_tokens);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->pieces.size()) return {};
  return impl_->pieces[id];
}

std::optional<int32_t> Tokenizer::piece_to_id(std::string_view piece) const {
  if (auto it = impl_->added_by_content.find(piece); it != impl_->added_by_content.end()) return it->second;
  return impl_->model->token_to_id(piece);
}

size_t Tokenizer::vocab_size() const { return impl_->pieces.size(); }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id];
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }

// ---------------------------------------------------------------------------------------------
// StreamDecoder: the windowed incremental detokenisation of HF `DecodeStream` (and TGI): decode
// the ids since `prefix_offset_` with and without the new ones and emit the difference, unless
// the new text ends in U+FFFD (an incomplete character that later ids may complete).

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(&tok), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  std::span<const int32_t> all(ids_);
  const std::string text = tok_->decode(all.subspan(prefix_offset_), skip_special_);
  if (text.size() <= emitted_.size() || text.compare(0, emitted_.size(), emitted_) != 0 ||
      std::string_view(text).ends_with(kReplacementChar))
    return {};
  std::string out = text.substr(emitted_.size());
  // Slide the window: the next decodes start at the ids decoded before this push.
  const size_t new_prefix = read_offset_;
  read_offset_ = ids_.size();
  emitted_ = tok_->decode(all.subspan(new_prefix, read_offset_ - new_prefix), skip_special_);
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(new_prefix));
  read_offset_ -= new_prefix;
  prefix_offset_ = 0;
  return out;
}

std::string StreamDecoder::flush() {
  std::span<const int32_t> all(ids_);
  const std::string text = tok_->decode(all.subspan(prefix_offset_), skip_special_);
  std::string out;
  if (text.size() > emitted_.size() && text.compare(0, emitted_.size(), emitted_) == 0)
    out = text.substr(emitted_.size());
  ids_.clear();
  emitted_.clear();
  prefix_offset_ = read_offset_ = 0;
  return out;
}

}  // namespace kvb::tok

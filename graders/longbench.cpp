// LongBench v1 metrics and LongBench-v2 choice extraction. See graders/longbench.h.
#include "graders/longbench.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include <re2/re2.h>

#include "engine/util/error.h"
#include "graders/pytext.h"

namespace kvb::graders {
namespace {

std::vector<std::string> split_ws(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    size_t j = i;
    while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string r;
  for (size_t i = 0; i < v.size(); ++i) r += (i ? sep : "") + v[i];
  return r;
}

template <typename T>
double bag_f1(const std::vector<T>& pred, const std::vector<T>& gold) {
  std::map<T, int> cp, cg;
  for (const auto& t : pred) ++cp[t];
  for (const auto& t : gold) ++cg[t];
  int same = 0;
  for (const auto& [t, n] : cp)
    if (auto it = cg.find(t); it != cg.end()) same += std::min(n, it->second);
  if (same == 0) return 0.0;
  double p = static_cast<double>(same) / static_cast<double>(pred.size());
  double r = static_cast<double>(same) / static_cast<double>(gold.size());
  return 2 * p * r / (p + r);
}

// UTF-8 → code points (invalid bytes pass through as single units).
std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + static_cast<size_t>(n) > s.size()) n = 1;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return out;
}

std::vector<std::string> all_ints(std::string_view s) {
  static const RE2 num("(\\p{Nd}+)");  // Python re's \d on str: any Unicode decimal digit
  std::vector<std::string> out;
  re2::StringPiece in(s.data(), s.size());
  std::string m;
  while (RE2::FindAndConsume(&in, num, &m)) out.push_back(m);
  return out;
}

}  // namespace

std::string normalize_answer(std::string_view in) {
  std::string s;
  for (char c : in) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && std::ispunct(u)) continue;
    s += static_cast<char>(u < 0x80 ? std::tolower(u) : u);
  }
  static const RE2 articles("\\b(a|an|the)\\b");
  RE2::GlobalReplace(&s, articles, " ");
  return join(split_ws(s), " ");
}

double qa_f1(std::string_view prediction, std::string_view ground_truth) {
  return bag_f1(split_ws(normalize_answer(prediction)), split_ws(normalize_answer(ground_truth)));
}

double qa_f1_chars(std::string_view prediction, std::string_view ground_truth) {
  static const std::u32string cjk_punct =
      U"！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏.";
  auto norm = [&](std::string_view s) {  // str.lower(), then punctuation, then str.split() whitespace
    std::vector<char32_t> out;
    for (char32_t c : py::decode(py::lower(s))) {
      if (c < 0x80 && std::ispunct(static_cast<int>(c))) continue;
      if (cjk_punct.find(c) != std::u32string::npos) continue;
      if (py::is_space(c)) continue;
      out.push_back(c);
    }
    return out;
  };
  return bag_f1(norm(prediction), norm(ground_truth));
}

namespace {

// pltrdy rouge: text → sentences (split on '.', drop empty pieces, collapse whitespace).
std::vector<std::string> rouge_sentences(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '.') {
      std::string piece(text.substr(start, i - start));
      if (!piece.empty()) out.push_back(py::collapse_ws(piece));  // " ".join(piece.split()), Unicode
      start = i + 1;
    }
  }
  return out;
}

std::vector<std::string> split_space(const std::string& s) {  // Python s.split(" ")
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == ' ') {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// Word ids of the LCS of x and y (ids: equal words, equal ids), reconstructed with the
// package's tie-breaking: from (n, m) back, a match goes diagonally, else up when
// table[i-1][j] > table[i][j-1], else left. Only that comparison is kept, one bit per cell
// (the package's dict of (n+1)(m+1) entries, or a table of ints, took 2.6 GB for 26,000 words a
// side); the table itself lives in two rows.
// Appends the ids to `out`; the buffers are reused across calls (one sentence pair each).
void recon_lcs(const std::vector<int>& x, const std::vector<int>& y, std::vector<int>& out) {
  const size_t n = x.size(), m = y.size(), w = m + 1;
  thread_local std::vector<uint64_t> up;  // bit (i*w + j): table[i-1][j] > table[i][j-1]
  thread_local std::vector<int> prev, cur;
  up.assign((n + 1) * w / 64 + 1, 0);
  prev.assign(m + 1, 0);
  cur.assign(m + 1, 0);
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = 0;
    for (size_t j = 1; j <= m; ++j) {
      if (x[i - 1] == y[j - 1]) {
        cur[j] = prev[j - 1] + 1;
      } else {
        const bool u = prev[j] > cur[j - 1];
        cur[j] = u ? prev[j] : cur[j - 1];
        if (u) up[(i * w + j) / 64] |= uint64_t{1} << ((i * w + j) % 64);
      }
    }
    std::swap(prev, cur);
  }
  size_t i = n, j = m;
  while (i > 0 && j > 0) {
    if (x[i - 1] == y[j - 1]) {
      out.push_back(x[i - 1]);
      --i;
      --j;
    } else if ((up[(i * w + j) / 64] >> ((i * w + j) % 64)) & 1) {
      --i;
    } else {
      --j;
    }
  }
}

}  // namespace

double rouge_l(std::string_view prediction, std::string_view ground_truth) {
  auto hyp = rouge_sentences(prediction);
  auto ref = rouge_sentences(ground_truth);
  if (hyp.empty() || ref.empty()) return 0.0;
  std::map<std::string, int> ids;  // word -> id, so that the LCS compares ints
  auto words = [&](const std::vector<std::string>& sentences, std::set<int>& all, size_t& count) {
    std::vector<std::vector<int>> out;
    for (const auto& s : sentences) {
      out.emplace_back();
      for (auto& word : split_space(s)) {
        const int id = ids.emplace(std::move(word), static_cast<int>(ids.size())).first->second;
        out.back().push_back(id);
        all.insert(id);
      }
      count += out.back().size();
    }
    return out;
  };
  std::set<int> hset, rset;
  size_t hn = 0, rn = 0;
  auto hw = words(hyp, hset, hn);
  auto rw = words(ref, rset, rn);
  if (hn > kRougeMaxWords || rn > kRougeMaxWords) return 0.0;  // see kRougeMaxWords
  std::vector<char> in_union(ids.size(), 0);
  std::vector<int> l;
  size_t llcs_count = 0;
  for (const auto& r : rw)
    for (const auto& h : hw) {
      l.clear();
      recon_lcs(r, h, l);
      for (int id : l) llcs_count += in_union[id] ? 0 : (in_union[id] = 1);
    }
  double llcs = static_cast<double>(llcs_count);
  double rr = llcs / static_cast<double>(rset.size());
  double p = llcs / static_cast<double>(hset.size());
  return 2.0 * ((p * rr) / (p + rr + 1e-8));
}

double rouge_l_chars(std::string_view prediction, std::string_view ground_truth) {
  auto spaced = [](std::string_view t) {  // Python " ".join(list(t))
    std::string out;
    for (char32_t c : py::decode(t)) {
      if (!out.empty()) out += ' ';
      out += py::encode(std::u32string_view(&c, 1));
    }
    return out;
  };
  return rouge_l(spaced(prediction), spaced(ground_truth));
}

double classification_score(std::string_view prediction, std::string_view ground_truth,
                            const std::vector<std::string>& all_classes) {
  std::vector<std::string> em;
  for (const auto& c : all_classes)
    if (prediction.find(c) != std::string_view::npos) em.push_back(c);
  for (size_t k = 0; k < em.size(); ++k) {
    std::string term = em[k];
    if (ground_truth.find(term) != std::string_view::npos && term != ground_truth)
      em.erase(std::find(em.begin(), em.end(), term));  // the next element is skipped, as in Python
  }
  if (std::find(em.begin(), em.end(), std::string(ground_truth)) != em.end())
    return 1.0 / static_cast<double>(em.size());
  return 0.0;
}

double retrieval_score(std::string_view prediction, std::string_view ground_truth, bool chinese) {
  static const RE2 en("Paragraph (\\p{Nd}+)");
  static const RE2 zh("段落(\\p{Nd}+)");
  std::string id;
  re2::StringPiece g(ground_truth.data(), ground_truth.size());
  if (!RE2::PartialMatch(g, chinese ? zh : en, &id))
    fail("retrieval gold '{}' has no {} id", ground_truth, chinese ? "段落N" : "Paragraph N");
  auto nums = all_ints(prediction);
  if (nums.empty()) return 0.0;
  double right = static_cast<double>(std::count(nums.begin(), nums.end(), id));
  return right / static_cast<double>(nums.size());
}

double count_score(std::string_view prediction, std::string_view ground_truth) {
  auto nums = all_ints(prediction);
  if (nums.empty()) return 0.0;
  double right = static_cast<double>(std::count(nums.begin(), nums.end(), std::string(ground_truth)));
  return right / static_cast<double>(nums.size());
}

int fuzz_ratio(std::string_view a, std::string_view b) {
  if (a == b) return 100;
  if (a.empty() || b.empty()) return 0;
  auto x = code_points(a), y = code_points(b);
  if (static_cast<double>(x.size()) * static_cast<double>(y.size()) > kFuzzRatioMaxCells) return 0;
  std::vector<int> prev(y.size() + 1, 0), cur(y.size() + 1, 0);
  for (size_t i = 1; i <= x.size(); ++i) {
    for (size_t j = 1; j <= y.size(); ++j)
      cur[j] = x[i - 1] == y[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    std::swap(prev, cur);
  }
  double lcs = prev[y.size()];
  double ratio = 2.0 * lcs / static_cast<double>(x.size() + y.size());
  return static_cast<int>(std::nearbyint(100.0 * ratio));  // Python round(): half to even
}

double code_sim_score(std::string_view prediction, std::string_view ground_truth) {
  size_t b = 0;
  while (b < prediction.size() && prediction[b] == '\n') ++b;
  std::string_view rest = prediction.substr(b);
  std::string chosen;
  size_t start = 0;
  for (size_t i = 0; i <= rest.size(); ++i) {
    if (i == rest.size() || rest[i] == '\n') {
      std::string_view line = rest.substr(start, i - start);
      if (line.find('`') == std::string_view::npos && line.find('#') == std::string_view::npos &&
          line.find("//") == std::string_view::npos) {
        chosen = std::string(line);
        break;
      }
      start = i + 1;
    }
  }
  return fuzz_ratio(chosen, ground_truth) / 100.0;
}

std::optional<char> extract_choice_v2(std::string_view response) {
  std::string r(response);
  std::erase(r, '*');
  static const RE2 paren("The correct answer is \\(([A-D])\\)");
  static const RE2 bare("The correct answer is ([A-D])");
  std::string m;
  if (RE2::PartialMatch(r, paren, &m) || RE2::PartialMatch(r, bare, &m)) return m[0];
  return std::nullopt;
}

}  // namespace kvb::graders

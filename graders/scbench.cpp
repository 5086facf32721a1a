// SCBench scorers. See graders/scbench.h.
#include "graders/scbench.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include <fmt/format.h>

#include "engine/util/error.h"
#include "graders/grade.h"
#include "graders/longbench.h"
#include "graders/pytext.h"

namespace kvb::graders {

double scbench_kv_retrieval(std::string_view prediction, std::string_view label) {
  return prediction.find(label) != std::string_view::npos ? 1.0 : 0.0;
}

double scbench_string_match_all(std::string_view prediction, const std::vector<std::string>& labels) {
  if (labels.empty()) return 0.0;
  std::string p = py::lower(prediction);
  size_t hit = 0;
  for (const auto& r : labels) hit += p.find(py::lower(r)) != std::string::npos;
  // Python round(x, 2): the exact binary value rounded half-to-even, as printf does.
  double x = static_cast<double>(hit) / static_cast<double>(labels.size());
  return std::strtod(fmt::format("{:.2f}", x).c_str(), nullptr);
}

double scbench_qa_eng(std::string_view prediction, const std::vector<std::string>& labels) {
  std::string p = py::upper(py::strip(prediction));
  for (const auto& r : labels)
    if (p.find(py::upper(r)) != std::string::npos) return 1.0;
  return 0.0;
}

double scbench_choice_eng(std::string_view prediction, const std::vector<std::string>& labels) {
  auto in_labels = [&](const std::string& x) { return std::find(labels.begin(), labels.end(), x) != labels.end(); };
  std::u32string p = py::decode(py::strip(prediction));
  if (p.empty()) return 0.0;
  if (p[0] == 'A' || p[0] == 'B' || p[0] == 'C' || p[0] == 'D')
    return in_labels(std::string(1, static_cast<char>(p[0])));
  if (in_labels(py::encode(p))) return 1.0;
  for (auto& c : p)
    if (c == '\n' || c == '"' || c == '\'' || c == '.' || c == ',' || c == '?' || c == '!' || c == '{' || c == '}')
      c = ' ';
  for (size_t at; (at = p.find(U"  ")) != std::u32string::npos;) p.erase(at, 1);
  for (std::u32string prefix : {U"answer is:", U"answer:", U"answer is", U"option is"}) {
    size_t idx = p.find(prefix);
    if (idx == std::u32string::npos) continue;
    if (p.size() < idx + prefix.size() + 1) return 0.0;
    std::string after = py::encode(std::u32string_view(p).substr(idx + prefix.size() + 1));
    for (const auto& s : labels)
      if (py::starts_with(after, s)) return 1.0;
    return 0.0;
  }
  for (const auto& w : py::split_ws(py::encode(p)))
    if (std::string_view("ABCD").find(w) != std::string_view::npos) return in_labels(w) ? 1.0 : 0.0;
  return 0.0;
}

double scbench_qa_chn(std::string_view prediction, const std::vector<std::string>& labels) {
  double best = 0;
  for (const auto& r : labels) best = std::max(best, qa_f1_chars(prediction, r));
  return best;
}

double scbench_math_find(std::string_view prediction, double label, bool label_is_int) {
  // First match of \d+\.\d+|\d+ (ASCII digits).
  size_t i = 0;
  auto dig = [&](size_t k) { return k < prediction.size() && prediction[k] >= '0' && prediction[k] <= '9'; };
  while (i < prediction.size() && !dig(i)) ++i;
  if (i >= prediction.size()) return 0.0;
  size_t e = i;
  while (dig(e)) ++e;
  if (e < prediction.size() && prediction[e] == '.' && dig(e + 1)) {
    ++e;
    while (dig(e)) ++e;
  }
  double x = std::strtod(std::string(prediction.substr(i, e - i)).c_str(), nullptr);
  if (label_is_int) return std::trunc(x) == label ? 1.0 : 0.0;
  return x == label ? 1.0 : 0.0;
}

double scbench_passkey(std::string_view prediction, std::string_view label) {
  size_t i = 0;
  while (i < prediction.size() && !(prediction[i] >= '0' && prediction[i] <= '9')) ++i;
  size_t e = i;
  while (e < prediction.size() && prediction[e] >= '0' && prediction[e] <= '9') ++e;
  return prediction.substr(i, e - i) == label ? 1.0 : 0.0;
}

namespace {

// rouge_score tokenize: lowercase, non-[a-z0-9] → space, split, keep [a-z0-9]+ tokens.
std::vector<std::string> rouge_tokens(std::string_view text) {
  std::string low = py::lower(text);
  std::vector<std::string> out;
  std::string cur;
  for (char c : low) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      cur.push_back(c);
    } else if (!cur.empty()) {
      out.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

// Indices of `ref` in the LCS with `can` (rouge_score _lcs_table + _backtrack_norec).
std::vector<size_t> lcs_ind(const std::vector<std::string>& ref, const std::vector<std::string>& can) {
  size_t R = ref.size(), C = can.size();
  std::vector<uint32_t> t((R + 1) * (C + 1), 0);
  auto at = [&](size_t i, size_t j) -> uint32_t& { return t[i * (C + 1) + j]; };
  for (size_t i = 1; i <= R; ++i)
    for (size_t j = 1; j <= C; ++j)
      at(i, j) = ref[i - 1] == can[j - 1] ? at(i - 1, j - 1) + 1 : std::max(at(i - 1, j), at(i, j - 1));
  std::vector<size_t> out;
  size_t i = R, j = C;
  while (i > 0 && j > 0) {
    if (ref[i - 1] == can[j - 1]) {
      out.push_back(i - 1);
      --i;
      --j;
    } else if (at(i, j - 1) > at(i - 1, j)) {
      --j;
    } else {
      --i;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

double scbench_rouge_lsum(std::string_view prediction, std::string_view reference) {
  auto sents = [](std::string_view text) {
    std::vector<std::vector<std::string>> out;
    for (const auto& s : py::split(text, "\n"))
      if (!s.empty()) out.push_back(rouge_tokens(s));
    return out;
  };
  auto ref = sents(reference), can = sents(prediction);
  if (ref.empty() || can.empty()) return 0.0;
  size_t m = 0, n = 0;
  std::map<std::string, long> cr, cc;
  for (const auto& s : ref) {
    m += s.size();
    for (const auto& t : s) ++cr[t];
  }
  for (const auto& s : can) {
    n += s.size();
    for (const auto& t : s) ++cc[t];
  }
  if (!m || !n) return 0.0;
  size_t hits = 0;
  for (const auto& r : ref) {
    std::vector<size_t> u;
    for (const auto& c : can) {
      auto ind = lcs_ind(r, c);
      u.insert(u.end(), ind.begin(), ind.end());
    }
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    for (size_t i : u) {
      const std::string& tok = r[i];
      if (cc[tok] > 0 && cr[tok] > 0) {
        ++hits;
        --cc[tok];
        --cr[tok];
      }
    }
  }
  double recall = static_cast<double>(hits) / static_cast<double>(m);
  double precision = static_cast<double>(hits) / static_cast<double>(n);
  return precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
}

namespace {

// re.split(r"\s+", text.strip())
std::vector<std::string> bleu_tokens(std::string_view text) {
  std::string s = py::strip(text);
  if (s.empty()) return {""};
  return py::split_ws(s);
}

}  // namespace

double scbench_function_bleu(std::string_view candidate, std::string_view reference) {
  auto hyp = bleu_tokens(candidate), ref = bleu_tokens(reference);
  double num[4], den[4];
  for (size_t n = 1; n <= 4; ++n) {
    std::map<std::vector<std::string>, long> hc, rc;
    if (hyp.size() >= n)
      for (size_t i = 0; i + n <= hyp.size(); ++i) ++hc[std::vector<std::string>(hyp.begin() + i, hyp.begin() + i + n)];
    if (ref.size() >= n)
      for (size_t i = 0; i + n <= ref.size(); ++i) ++rc[std::vector<std::string>(ref.begin() + i, ref.begin() + i + n)];
    long clipped = 0, total = 0;
    for (const auto& [g, c] : hc) {
      total += c;
      auto it = rc.find(g);
      clipped += std::min(c, it == rc.end() ? 0L : it->second);
    }
    num[n - 1] = static_cast<double>(clipped);
    den[n - 1] = static_cast<double>(std::max(1L, total));
  }
  if (num[0] == 0) return 0.0;
  double hyp_len = static_cast<double>(hyp.size()), ref_len = static_cast<double>(ref.size());
  double bp = hyp_len > ref_len ? 1.0 : hyp_len == 0 ? 0.0 : std::exp(1 - ref_len / hyp_len);
  // SmoothingFunction().method4 (k = 5), then sum of 0.25·log(p_n) over positive p_n.
  double p[4];
  int incvnt = 1;
  for (int i = 0; i < 4; ++i) {
    p[i] = num[i] / den[i];
    if (num[i] == 0 && hyp.size() > 1) {
      p[i] = (1.0 / (std::pow(2.0, incvnt) * 5.0 / std::log(hyp_len))) / den[i];
      ++incvnt;
    }
  }
  long double s = 0;
  for (double x : p)
    if (x > 0) s += 0.25L * std::log(static_cast<long double>(x));
  return bp * std::exp(static_cast<double>(s));
}

std::string scbench_repoqa_sanitize(std::string_view model_output) {
  std::string s = py::strip(model_output);
  std::u32string u = py::decode(s);
  auto fence_at = [&](size_t q) { return (q == 0 || u[q - 1] == '\n') && u.compare(q, 3, U"```") == 0; };
  for (size_t p = 0; p + 3 <= u.size(); ++p) {
    if (!fence_at(p)) continue;
    size_t i = p + 3;
    while (i < u.size() && py::is_word(u[i])) ++i;
    size_t j = i;
    while (j < u.size() && py::is_space(u[j])) ++j;
    size_t k = std::u32string::npos;  // last '\n' of the whitespace run (greedy \s*, then \n)
    for (size_t x = i; x < j; ++x)
      if (u[x] == '\n') k = x;
    if (k == std::u32string::npos) continue;
    for (size_t q = k + 1; q + 3 <= u.size(); ++q)
      if (fence_at(q)) return py::encode(std::u32string_view(u).substr(k + 1, q - k - 1));
  }
  return s;
}

RepoQaResult scbench_repoqa(std::string_view model_output, std::string_view target_name,
                            const std::vector<RepoQaNeedle>& needles, double threshold) {
  RepoQaResult r;
  r.sanitized = scbench_repoqa_sanitize(model_output);
  for (const auto& n : needles) {
    double sim = scbench_function_bleu(r.sanitized, n.code);
    if (sim > r.best_similarity) {
      r.best_similarity = sim;
      r.best_name = n.name;
    }
  }
  r.pass = !r.best_name.empty() && r.best_name == target_name && r.best_similarity >= threshold;
  return r;
}

// ------------------------------------------------------------------ registry

namespace detail {
namespace {

Grade simple(double score, std::string_view pred, const std::vector<std::string>& refs, std::string what) {
  Grade g;
  g.score = score;
  g.extracted = std::string(pred);
  g.pred_norm = std::string(pred);
  g.gold_norm = py::join(refs, " | ");
  g.reason = fmt::format("{} = {:g}", what, score);
  return g;
}

}  // namespace

void register_scbench_graders(std::vector<GraderInfo>& v) {
  v.push_back({"scbench_kv_retrieval", "SCBench kv/prefix_suffix: 1 iff the label is a substring of the output",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 double s = 0;
                 std::string hit;
                 for (const auto& r : refs)
                   if (scbench_kv_retrieval(p, r) > 0) {
                     s = 1;
                     hit = r;
                     break;
                   }
                 Grade g = simple(s, p, refs, "kv_retrieval");
                 g.reason = s ? fmt::format("label '{}' found in the output", hit) : "label not found in the output";
                 return g;
               }});
  v.push_back({"scbench_string_match_all", "SCBench vt: fraction of labels found (case-insensitive), rounded to 0.01",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 double s = scbench_string_match_all(p, refs);
                 Grade g = simple(s, p, refs, "string_match_all");
                 g.reason = fmt::format("{:g} of {} labels found", s * static_cast<double>(refs.size()), refs.size());
                 return g;
               }});
  v.push_back({"scbench_qa_eng", "SCBench qa_eng/many_shot: some label.upper() is a substring of output.strip().upper()",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 Grade g = simple(scbench_qa_eng(p, refs), p, refs, "longdialogue_qa_eng");
                 g.pred_norm = py::upper(py::strip(p));
                 g.reason = g.score ? "a label occurs in the output (case-insensitive)" : "no label occurs in the output";
                 return g;
               }});
  v.push_back({"scbench_choice_eng", "SCBench choice_eng: InfiniteBench longbook_choice_eng ([option text, letter])",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 Grade g = simple(scbench_choice_eng(p, refs), p, refs, "longbook_choice_eng");
                 g.extracted = py::strip(p);
                 return g;
               }});
  v.push_back({"scbench_qa_chn", "SCBench qa_chn: character-level F1 (normalize_zh_answer), max over labels",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 return simple(scbench_qa_chn(p, refs), p, refs, "qa_f1_zh (chars)");
               }});
  v.push_back({"scbench_math_find", "SCBench mf: first number of the output equals the label (int(float(x)) for ints)",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json& meta) {
                 double label = 0;
                 bool is_int = true;
                 if (meta.is_object() && meta.contains("label") && meta["label"].is_number()) {
                   label = meta["label"].get<double>();
                   is_int = meta["label"].is_number_integer();
                 } else {
                   char* end = nullptr;
                   label = std::strtod(refs.front().c_str(), &end);
                   if (end == refs.front().c_str())
                     fail("scbench_math_find: reference '{}' is not a number", refs.front());
                   is_int = refs.front().find_first_of(".eE") == std::string::npos;
                 }
                 if (!std::isfinite(label))  // "1e400", "inf": no output could equal it
                   fail("scbench_math_find: label '{}' is not a finite number",
                        meta.is_object() && meta.contains("label") ? meta["label"].dump() : refs.front());
                 Grade g = simple(scbench_math_find(p, label, is_int), p, refs, "math_find");
                 g.reason = fmt::format("first number of the output vs label {:g}: {}", label,
                                        g.score ? "equal" : "different/none");
                 return g;
               }});
  v.push_back({"scbench_passkey", "SCBench passkey (summary_with_needles): first digit run equals the label",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 Grade g = simple(scbench_passkey(p, refs.front()), p, refs, "passkey");
                 size_t i = p.find_first_of("0123456789");
                 g.extracted = i == std::string_view::npos
                                   ? ""
                                   : std::string(p.substr(i, p.find_first_not_of("0123456789", i) - i));
                 g.pred_norm = g.extracted;
                 return g;
               }});
  v.push_back({"scbench_rouge_lsum", "SCBench summary: rouge_score rougeLsum F (newline sentences, no stemming)",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 double best = 0;
                 for (const auto& r : refs) best = std::max(best, scbench_rouge_lsum(p, r));
                 return simple(best, p, refs, "rougeLsum F");
               }});
  v.push_back({"scbench_repoqa",
               "SCBench repoqa: BLEU (nltk method4) vs every needle; target best and >= 0.8 (meta.name, meta.needles)",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json& meta) {
                 std::string target = meta.is_object() && meta.contains("name") && meta["name"].is_string()
                                          ? meta["name"].get<std::string>()
                                          : "";
                 std::vector<RepoQaNeedle> needles;
                 if (meta.is_object() && meta.contains("needles")) {
                   const auto& ns = meta["needles"];
                   if (!ns.is_array()) fail("scbench_repoqa: metadata 'needles' must be a list of {{name, needle}}");
                   for (size_t i = 0; i < ns.size(); ++i) {
                     if (!ns[i].is_object() || !ns[i].contains("name") || !ns[i].contains("needle") ||
                         !ns[i]["name"].is_string() || !ns[i]["needle"].is_string())
                       fail("scbench_repoqa: metadata needles[{}]: expected {{\"name\": str, \"needle\": str}}", i);
                     needles.push_back({ns[i]["name"].get<std::string>(), ns[i]["needle"].get<std::string>()});
                   }
                 }
                 if (needles.empty()) {  // no repository needle list: the gold function alone
                   if (target.empty()) target = "target";
                   needles.push_back({target, refs.front()});
                 }
                 if (target.empty()) fail("scbench_repoqa: metadata 'name' (the target function) is missing");
                 RepoQaResult r = scbench_repoqa(p, target, needles);
                 Grade g;
                 g.score = r.pass ? 1.0 : 0.0;
                 g.extracted = r.sanitized;
                 g.pred_norm = r.sanitized;
                 g.gold_norm = refs.front();
                 g.reason = fmt::format("best needle '{}' BLEU {:.4f} (target '{}', {} needles, threshold 0.8)",
                                        r.best_name, r.best_similarity, target, needles.size());
                 return g;
               }});
}

}  // namespace detail

}  // namespace kvb::graders

#include "results/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb::results {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string md_esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '|') o += "\\|";
    else o += c;
  }
  return o;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.3g} {}", b, units[u]);
}

std::string pct(double v) { return fmt::format("{:.1f}", 100 * v); }

std::string budget_str(int64_t b) { return b == kNoBudget ? "full" : std::to_string(b); }

/// True for a cell stored without a budget that is not the full cache (budget_kind=threshold,
/// whose keep-sets a score threshold decides) and that measured its realised tokens per head
/// (Cell::kv_tokens_mean, schema v5): the report places it by what it realised.
bool realised_budget(const Cell* c) { return c->key.budget == kNoBudget && c->policy != "full" && c->kv_tokens_mean; }

/// A cell's position on the budget axis (tokens per head): its budget, or its realised mean
/// tokens per head (realised_budget); nullopt for the full cache (drawn as the reference line)
/// and an unbudgeted cell without the measurement.
std::optional<double> budget_x(const Cell* c) {
  if (c->key.budget != kNoBudget) return static_cast<double>(c->key.budget);
  if (realised_budget(c)) return *c->kv_tokens_mean;
  return std::nullopt;
}

/// A cell's budget as the tables print it: the budget, "full" for the full cache, and
/// "~N realised" for a cell placed by its realised tokens per head.
std::string cell_budget_str(const Cell* c) {
  return realised_budget(c) ? fmt::format("~{:.0f} realised", *c->kv_tokens_mean) : budget_str(c->key.budget);
}

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                          "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};

struct Pt {
  double x, y, lo, hi;
  std::string tip;
  bool pareto = false;
};

struct Series {
  std::string name, color;
  std::vector<Pt> pts;
  bool reference = false;  // drawn as a square marker
};

struct Chart {
  std::string title, xlabel;
  bool log_x = false;
  bool bytes_x = false;
  std::vector<Series> series;
  // Full cache reference line (y with CI band); NaN when absent.
  double ref_y = NAN, ref_lo = NAN, ref_hi = NAN;
};

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (hi <= lo) hi = lo + 1;
  double span = hi - lo, raw = span / target;
  double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) t.push_back(v);
  return t;
}

std::string fmt_tick(double v, bool bytes) {
  if (bytes) return human_bytes(v);
  if (std::fabs(v) >= 1e4) return fmt::format("{:.3g}", v);
  return fmt::format("{:g}", v);
}

std::string render_svg(const Chart& c) {
  const double W = 460, H = 320, L = 56, R = 14, T = 30, B = 46;
  double xmin = INFINITY, xmax = -INFINITY, ymax = 0.05;
  for (const auto& s : c.series)
    for (const auto& p : s.pts) {
      xmin = std::min(xmin, p.x);
      xmax = std::max(xmax, p.x);
      ymax = std::max(ymax, std::isnan(p.hi) ? p.y : p.hi);
    }
  if (!std::isnan(c.ref_hi)) ymax = std::max(ymax, c.ref_hi);
  ymax = std::min(1.0, ymax * 1.08);
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<text x=\"{2}\" y=\"16\" font-size=\"13\" "
      "font-weight=\"bold\">{3}</text>\n",
      W, H, L, esc(c.title));
  if (!std::isfinite(xmin)) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\">no data</text></svg>\n", W / 2 - 20, H / 2);
    return svg;
  }
  bool logx = c.log_x && xmin > 0 && xmax / xmin > 4;
  auto tx = [&](double v) { return logx ? std::log2(v) : v; };
  double a = tx(xmin), b = tx(xmax);
  if (b - a < 1e-12) {
    double pad = logx ? 1 : std::max(1e-9, std::fabs(a) * 0.1 + 1e-9);
    a -= pad;
    b += pad;
  } else {
    double pad = (b - a) * 0.06;
    a -= pad;
    b += pad;
    if (!logx && a < 0 && xmin >= 0) a = 0;
  }
  auto X = [&](double v) { return L + (tx(v) - a) / (b - a) * (W - L - R); };
  auto Y = [&](double v) { return T + (1 - v / ymax) * (H - T - B); };
  // Axes and grid.
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n", L, T,
                     W - L - R, H - T - B);
  for (double yt : nice_ticks(0, ymax, 5)) {
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        L, W - R, Y(yt), L - 4, Y(yt) + 4, fmt::format("{:g}", 100 * yt));
  }
  std::vector<double> xt;
  if (logx) {
    for (double e = std::ceil(a); e <= b; e += std::max(1.0, std::ceil((b - a) / 6))) xt.push_back(std::pow(2, e));
  } else {
    xt = nice_ticks(a, b, 5);
  }
  for (double v : xt) {
    double px = X(v);
    if (px < L - 0.5 || px > W - R + 0.5) continue;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        px, T, H - B, H - B + 14, esc(fmt_tick(v, c.bytes_x)));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}{}</text>\n", (L + W - R) / 2, H - 8,
                     esc(c.xlabel), logx ? " (log scale)" : "");
  svg += fmt::format(
      "<text transform=\"translate(14,{}) rotate(-90)\" text-anchor=\"middle\">"
      "pass@1 (%)</text>\n",
      (T + H - B) / 2);
  // Full-cache reference.
  if (!std::isnan(c.ref_y)) {
    if (!std::isnan(c.ref_lo))
      svg += fmt::format(
          "<rect x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"#000\" "
          "fill-opacity=\"0.06\"/>\n",
          L, Y(std::min(ymax, c.ref_hi)), W - L - R,
          std::max(0.0, Y(std::max(0.0, c.ref_lo)) - Y(std::min(ymax, c.ref_hi))));
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#000\" "
        "stroke-dasharray=\"6 4\"><title>full cache: {3}%</title></line>"
        "<text x=\"{1}\" y=\"{4:.1f}\" text-anchor=\"end\" fill=\"#444\">full cache</text>\n",
        L, W - R - 2, Y(c.ref_y), pct(c.ref_y), Y(c.ref_y) - 4);
  }
  // Pareto frontier over all points of the chart.
  std::vector<std::pair<double, double>> fpts;
  for (const auto& s : c.series)
    for (const auto& p : s.pts)
      if (p.pareto) fpts.push_back({p.x, p.y});
  std::sort(fpts.begin(), fpts.end());
  if (fpts.size() > 1) {
    std::string d;
    for (const auto& [x, y] : fpts) d += fmt::format("{}{:.1f},{:.1f}", d.empty() ? "M" : " L", X(x), Y(y));
    svg += fmt::format(
        "<path d=\"{}\" fill=\"none\" stroke=\"#555\" stroke-width=\"1\" "
        "stroke-dasharray=\"2 3\"><title>Pareto frontier</title></path>\n",
        d);
  }
  // Series.
  for (const auto& s : c.series) {
    auto pts = s.pts;
    std::sort(pts.begin(), pts.end(), [](const Pt& p, const Pt& q) { return p.x < q.x; });
    if (pts.size() > 1) {
      std::string d;
      for (const auto& p : pts) d += fmt::format("{}{:.1f},{:.1f}", d.empty() ? "M" : " L", X(p.x), Y(p.y));
      svg += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"/>\n", d, s.color);
    }
    for (const auto& p : pts) {
      if (!std::isnan(p.lo))
        svg += fmt::format(
            "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" "
            "stroke=\"{3}\" stroke-opacity=\"0.6\"/>\n",
            X(p.x), Y(std::max(0.0, p.lo)), Y(std::min(1.0, p.hi)), s.color);
      if (p.pareto)
        svg += fmt::format(
            "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"7\" fill=\"none\" stroke=\"#000\" "
            "stroke-width=\"1.5\"/>\n",
            X(p.x), Y(p.y));
      if (s.reference)
        svg += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"8\" height=\"8\" fill=\"{}\">"
            "<title>{}</title></rect>\n",
            X(p.x) - 4, Y(p.y) - 4, s.color, esc(p.tip));
      else
        svg += fmt::format(
            "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"><title>{}</title>"
            "</circle>\n",
            X(p.x), Y(p.y), s.color, esc(p.tip));
    }
  }
  svg += "</svg>\n";
  return svg;
}

void write_text(const std::string& path, const std::string& text) { write_output_file(path, text); }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += '"';
    o += c;
  }
  return o + "\"";
}

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : ""; }

}  // namespace

std::vector<size_t> pareto_front(const std::vector<std::pair<double, double>>& pts, bool x_lower_better) {
  std::vector<size_t> out;
  for (size_t i = 0; i < pts.size(); ++i) {
    bool dominated = false;
    for (size_t j = 0; j < pts.size() && !dominated; ++j) {
      if (i == j) continue;
      double xi = x_lower_better ? -pts[i].first : pts[i].first;
      double xj = x_lower_better ? -pts[j].first : pts[j].first;
      bool ge = xj >= xi && pts[j].second >= pts[i].second;
      bool gt = xj > xi || pts[j].second > pts[i].second;
      dominated = ge && gt;
    }
    if (!dominated) out.push_back(i);
  }
  std::sort(out.begin(), out.end(), [&](size_t p, size_t q) { return pts[p] < pts[q]; });
  return out;
}

std::string cells_csv(const std::vector<Cell>& cells) {
  std::string o =
      "run_id,model,task,policy,policy_label,budget,n_samples,n_graded,n_ungraded,n_examples,"
      "pass1,pass1_lo,pass1_hi,delta_vs_full,delta_lo,delta_hi,paired_examples,pass_at_k_max_k,"
      "pass_at_k,maj_at_k,decode_tok_s,prefill_tok_s,ttft_s_mean,kv_bytes_peak_mean,"
      "kv_bytes_peak_max,kv_bytes_final_mean,device_peak_bytes,evictions_mean,evicted_frac,"
      "truncated_frac,is_reference,kv_bytes_read_step_mean,decode_tok_s_agg,kv_bytes_steady_mean,kv_tokens_mean,"
      "kv_tokens_peak,memory_gib,decode_batch_mean,preemptions\n";
  for (const auto& c : cells) {
    int kmax = c.pass_at_k.empty() ? 0 : c.pass_at_k.rbegin()->first;
    o += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},"
        "{}\n",
        c.key.run_id, csv_field(c.key.model_id), csv_field(c.key.task), csv_field(c.policy),
        csv_field(c.key.policy_label), c.key.budget, c.n_samples, c.n_graded, c.n_ungraded, c.n_examples,
        c.pass1 ? num(c.pass1->mean) : "", c.pass1 ? num(c.pass1->lo) : "", c.pass1 ? num(c.pass1->hi) : "",
        c.delta_vs_reference ? num(c.delta_vs_reference->mean) : "",
        c.delta_vs_reference ? num(c.delta_vs_reference->lo) : "",
        c.delta_vs_reference ? num(c.delta_vs_reference->hi) : "", c.paired_examples, kmax,
        kmax ? num(c.pass_at_k.at(kmax)) : "", kmax ? num(c.maj_at_k.at(kmax)) : "", num(c.decode_tok_s),
        num(c.prefill_tok_s), num(c.ttft_s_mean), num(c.kv_bytes_peak_mean), c.kv_bytes_peak_max,
        num(c.kv_bytes_final_mean), c.device_peak_bytes, num(c.evictions_mean), num(c.evicted_frac),
        num(c.truncated_frac), c.is_reference ? 1 : 0, c.kv_bytes_read_step_mean ? num(*c.kv_bytes_read_step_mean) : "",
        c.decode_tok_s_agg ? num(*c.decode_tok_s_agg) : "", c.kv_bytes_steady_mean ? num(*c.kv_bytes_steady_mean) : "",
        c.kv_tokens_mean ? num(*c.kv_tokens_mean) : "", c.kv_tokens_peak ? std::to_string(*c.kv_tokens_peak) : "",
        c.memory_gib ? num(*c.memory_gib) : "", c.decode_batch_mean ? num(*c.decode_batch_mean) : "",
        c.memory_gib ? std::to_string(c.preemptions) : "");
  }
  return o;
}

std::map<std::string, std::string> display_model_names(const std::set<std::string>& ids) {
  auto is_path = [](const std::string& id) {
    if (id.empty()) return false;
    if (id[0] == '/' || id[0] == '.' || id[0] == '~') return true;
    if (id.size() > 5 && id.compare(id.size() - 5, 5, ".gguf") == 0) return true;
    return std::count(id.begin(), id.end(), '/') > 1;
  };
  // Path components, last first, without empty and "." parts.
  auto parts = [](const std::string& id) {
    std::vector<std::string> out;
    size_t end = id.size();
    while (end > 0) {
      size_t b = id.rfind('/', end - 1);
      size_t start = b == std::string::npos ? 0 : b + 1;
      std::string part = id.substr(start, end - start);
      if (!part.empty() && part != ".") out.push_back(part);
      if (b == std::string::npos) break;
      end = b;
    }
    return out;
  };
  std::map<std::string, std::string> out;
  std::map<std::string, std::vector<std::string>> comps;
  for (const auto& id : ids) {
    if (is_path(id) && !parts(id).empty()) comps[id] = parts(id);
    else out[id] = id;
  }
  // Grow each path's suffix until no other id (path or not) shows the same name.
  std::map<std::string, size_t> depth;
  for (const auto& [id, c] : comps) depth[id] = 1;
  auto name_of = [&](const std::string& id) {
    const auto& c = comps[id];
    std::string n;
    for (size_t i = std::min(depth[id], c.size()); i-- > 0;) n += (n.empty() ? "" : "/") + c[i];
    return n;
  };
  for (bool clash = true; clash;) {
    clash = false;
    std::map<std::string, std::vector<std::string>> by_name;
    for (const auto& [id, c] : comps) by_name[name_of(id)].push_back(id);
    for (const auto& [id, n] : out) by_name[n];  // plain ids keep their names
    for (auto& entry : by_name) {
      const std::string& n = entry.first;  // a plain name: lambdas cannot capture structured bindings in clang 14
      const std::vector<std::string>& v = entry.second;
      bool taken = v.size() > 1 || std::any_of(out.begin(), out.end(), [&](const auto& o) { return o.second == n; });
      if (!taken) continue;
      for (const auto& id : v)
        if (depth[id] < comps[id].size()) {
          ++depth[id];
          clash = true;
        }
    }
  }
  for (const auto& [id, c] : comps) {
    std::string n = name_of(id);
    // Still equal to another name after using every component: show the id itself.
    bool dup = std::count_if(comps.begin(), comps.end(), [&](const auto& o) { return name_of(o.first) == n; }) > 1 ||
               std::any_of(out.begin(), out.end(), [&](const auto& o) { return o.second == n; });
    out[id] = dup ? id : n;
  }
  return out;
}

namespace {

/// The "Runs" section: one row per run that has cells (provenance: version, git, host, device,
/// backend, times, models with revision and weights hash, datasets with hash), HTML and Markdown.
void render_runs(Store& store, const std::vector<RunRow>& all_runs, const std::set<int64_t>& used_runs,
                 const std::map<std::string, std::string>& model_name, std::string& html, std::string& md) {
  html +=
      "<h2>Runs</h2>\n<table><tr><th>id</th><th class=l>name</th><th class=l>kvbench</th>"
      "<th class=l>git</th><th class=l>machine (host: device)</th><th class=l>backend</th>"
      "<th class=l>started</th><th class=l>finished</th><th class=l>models (revision, weights sha256)</th>"
      "<th class=l>datasets (sha256)</th></tr>\n";
  md +=
      "## Runs\n\n| id | name | kvbench | git | machine (host: device) | backend | started | finished | models |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : all_runs) {
    if (!used_runs.count(r.run_id)) continue;
    std::string models, md_models, datasets;
    for (const auto& m : store.query(fmt::format(
             "SELECT model_id, revision, weights_sha256 FROM run_models WHERE run_id={} ORDER BY 1", r.run_id))) {
      models += "<span title=\"" + esc(m[0]) + "\">" + esc(model_name.at(m[0])) + "</span> (<code>" +
                esc(m[1].substr(0, 12)) + "</code>, <code>" + esc(m[2].substr(0, 12)) + "</code>)<br>";
      md_models += (md_models.empty() ? "" : ", ") + md_esc(model_name.at(m[0]));
    }
    for (const auto& d :
         store.query(fmt::format("SELECT task, sha256 FROM run_datasets WHERE run_id={} ORDER BY 1", r.run_id)))
      datasets += esc(d[0]) + " <code>" + esc(d[1].substr(0, 12)) + "</code><br>";
    html += fmt::format(
        "<tr><td>{}</td><td class=l>{}</td><td class=l>{}</td><td class=l>{}</td>"
        "<td class=l>{}: {}</td><td class=l>{}</td><td class=l>{}</td>"
        "<td class=l>{}</td><td class=l>{}</td><td class=l>{}</td></tr>\n",
        r.run_id, esc(r.name), esc(r.kvbench_version), esc(r.git_sha), esc(r.host), esc(r.device), esc(r.backend),
        esc(r.started_at), r.finished_at.empty() ? "(unfinished)" : esc(r.finished_at), models, datasets);
    md += fmt::format("| {} | {} | {} | {} | {}: {} | {} | {} | {} | {} |\n", r.run_id, md_esc(r.name),
                      md_esc(r.kvbench_version), md_esc(r.git_sha), md_esc(r.host), md_esc(r.device), md_esc(r.backend),
                      r.started_at, r.finished_at.empty() ? "(unfinished)" : r.finished_at, md_models);
  }
  html += "</table>\n";
  md += "\n";
}

/// One (model, task) group of cells arranged for its charts and its table: a series per policy
/// label (and run, when several runs are shown) in first-seen order with its colour, the
/// full-cache reference cell, and the Pareto frontier of each chart.
struct GroupView {
  std::map<std::string, std::vector<const Cell*>> by_series;
  std::vector<std::string> order;
  std::map<std::string, std::string> color;
  const Cell* ref = nullptr;
  std::set<const Cell*> f_budget, f_bytes, f_speed, f_read, f_steady;
  /// Cells run under a `--memory` pool with an aggregate decode rate, by memory (GiB), and the
  /// Pareto frontier of pass@1 against that rate among the cells of the same memory.
  std::map<double, std::vector<const Cell*>> by_memory;
  std::set<const Cell*> f_memory;
  bool any_read = false;    ///< some cell measured its KV bytes read per decode step
  bool any_steady = false;  ///< some cell measured its steady KV footprint (schema v4)
};

/// The mean K+V bytes read per decode step of a cell (0 when not measured: stored before schema v3).
double read_of(const Cell* c) { return c->kv_bytes_read_step_mean.value_or(0.0); }
/// The mean steady KV bytes after compression of a cell (0 when not measured: stored before v4).
double steady_of(const Cell* c) { return c->kv_bytes_steady_mean.value_or(0.0); }

GroupView group_view(const std::vector<const Cell*>& gcells, bool multi_run, std::map<int64_t, std::string>& run_name) {
  GroupView v;
  // Series per (policy label [, run]).
  for (const auto* c : gcells) {
    std::string name = c->key.policy_label + (multi_run ? " [" + run_name[c->key.run_id] + "]" : "");
    if (!v.by_series.count(name)) v.order.push_back(name);
    v.by_series[name].push_back(c);
  }
  for (size_t i = 0; i < v.order.size(); ++i) v.color[v.order[i]] = kPalette[i % 10];

  for (const auto* c : gcells)
    if (c->is_reference && !v.ref) v.ref = c;

  // Pareto flags per chart, over cells with accuracy.
  std::vector<const Cell*> acc_cells;
  for (const auto* c : gcells)
    if (c->pass1) acc_cells.push_back(c);
  auto front = [&](auto xfn, bool lower, bool skip_unbudgeted, bool read_only = false) {
    std::vector<std::pair<double, double>> pts;
    std::vector<const Cell*> idx;
    for (const auto* c : acc_cells) {
      if (skip_unbudgeted && !budget_x(c)) continue;
      if (read_only && !c->kv_bytes_read_step_mean) continue;
      pts.push_back({xfn(c), c->pass1->mean});
      idx.push_back(c);
    }
    std::set<const Cell*> on;
    for (size_t i : pareto_front(pts, lower)) on.insert(idx[i]);
    return on;
  };
  v.f_budget = front([](const Cell* c) { return budget_x(c).value_or(0.0); }, true, true);
  v.f_bytes = front([](const Cell* c) { return c->kv_bytes_peak_mean; }, true, false);
  v.f_speed = front([](const Cell* c) { return c->decode_tok_s; }, false, false);
  // Bytes read per decode step: cells stored before schema v3 have no measurement and stay out.
  v.f_read = front(read_of, true, false, true);
  for (const auto* c : acc_cells) v.any_read = v.any_read || c->kv_bytes_read_step_mean.has_value();
  // Steady footprint after compression: cells stored before schema v4 have none and stay out.
  std::vector<std::pair<double, double>> pts;
  std::vector<const Cell*> idx;
  for (const auto* c : acc_cells)
    if (c->kv_bytes_steady_mean) {
      pts.push_back({*c->kv_bytes_steady_mean, c->pass1->mean});
      idx.push_back(c);
    }
  for (size_t i : pareto_front(pts, true)) v.f_steady.insert(idx[i]);
  v.any_steady = !pts.empty();
  // Accuracy against aggregate throughput at equal memory: one frontier per --memory value.
  for (const auto* c : acc_cells)
    if (c->memory_gib && c->decode_tok_s_agg) v.by_memory[*c->memory_gib].push_back(c);
  for (const auto& [mem, cs] : v.by_memory) {
    std::vector<std::pair<double, double>> mp;
    for (const auto* c : cs) mp.push_back({*c->decode_tok_s_agg, c->pass1->mean});
    for (size_t i : pareto_front(mp, false)) v.f_memory.insert(cs[i]);
  }
  return v;
}

/// A group's heading, legend and charts (pass@1 against budget, KV bytes held, KV bytes read
/// when measured, decode speed) as inline SVG.
void render_group_charts(const GroupView& v, const std::string& model, const std::string& task,
                         const std::map<std::string, std::string>& model_name, std::string& html) {
  auto tip = [&](const Cell* c) {
    std::string t = fmt::format("{} budget {}: pass@1 {}%", c->key.policy_label, cell_budget_str(c),
                                c->pass1 ? pct(c->pass1->mean) : "n/a");
    if (c->pass1) t += fmt::format(" [{}, {}]", pct(c->pass1->lo), pct(c->pass1->hi));
    if (c->delta_vs_reference)
      t += fmt::format("; vs full {:+.1f} [{:+.1f}, {:+.1f}] pts", 100 * c->delta_vs_reference->mean,
                       100 * c->delta_vs_reference->lo, 100 * c->delta_vs_reference->hi);
    t += fmt::format("; KV peak {}", human_bytes(c->kv_bytes_peak_mean));
    if (c->kv_bytes_steady_mean) t += fmt::format("; KV steady {}", human_bytes(*c->kv_bytes_steady_mean));
    if (c->kv_tokens_mean && c->kv_tokens_peak)
      t += fmt::format("; KV tokens/head mean {:.1f}, peak {}", *c->kv_tokens_mean, *c->kv_tokens_peak);
    if (c->kv_bytes_read_step_mean) t += fmt::format("; KV read/step {}", human_bytes(*c->kv_bytes_read_step_mean));
    t += fmt::format("; decode {:.1f} tok/s per sequence", c->decode_tok_s);
    if (c->memory_gib) {
      t += fmt::format("; --memory {:g} GiB", *c->memory_gib);
      if (c->decode_tok_s_agg) t += fmt::format(": {:.1f} tok/s aggregate", *c->decode_tok_s_agg);
      if (c->decode_batch_mean) t += fmt::format(", mean decode batch {:.2f}", *c->decode_batch_mean);
      t += fmt::format(", {} preemptions", c->preemptions);
    }
    t += fmt::format("; n={}", c->n_samples);
    return t;
  };
  auto chart = [&](const std::string& title, const std::string& xlabel, bool logx, bool bytes, auto xfn,
                   const std::set<const Cell*>& front_set, bool budget_chart, bool read_chart = false,
                   bool steady_chart = false, const std::vector<const Cell*>* only = nullptr) {
    Chart ch;
    ch.title = title;
    ch.xlabel = xlabel;
    ch.log_x = logx;
    ch.bytes_x = bytes;
    if (v.ref && v.ref->pass1) {
      ch.ref_y = v.ref->pass1->mean;
      if (v.ref->pass1->n > 1) {
        ch.ref_lo = v.ref->pass1->lo;
        ch.ref_hi = v.ref->pass1->hi;
      }
    }
    for (const auto& name : v.order) {
      Series s;
      s.name = name;
      s.color = v.color.at(name);
      for (const auto* c : v.by_series.at(name)) {
        if (!c->pass1) continue;
        if (budget_chart && !budget_x(c)) continue;               // the reference line (or not measured)
        if (read_chart && !c->kv_bytes_read_step_mean) continue;  // not measured (before v3)
        if (steady_chart && !c->kv_bytes_steady_mean) continue;   // not measured (before v4)
        if (only && std::find(only->begin(), only->end(), c) == only->end()) continue;  // another --memory
        s.reference = c->key.budget == kNoBudget && !realised_budget(c);
        Pt p{xfn(c), c->pass1->mean,        c->pass1->n > 1 ? c->pass1->lo : NAN, c->pass1->n > 1 ? c->pass1->hi : NAN,
             tip(c), front_set.count(c) > 0};
        s.pts.push_back(p);
      }
      if (!s.pts.empty()) ch.series.push_back(std::move(s));
    }
    return render_svg(ch);
  };

  html += fmt::format("<h2 title=\"{}\">{} &mdash; {}</h2>\n<div class=legend>", esc(model), esc(model_name.at(model)),
                      esc(task));
  for (const auto& name : v.order)
    html += fmt::format("<span><i class=sw style=\"background:{}\"></i>{}</span>", v.color.at(name), esc(name));
  html +=
      "<span>&#9711; Pareto frontier</span><span>- - full cache (band: 95% CI)</span></div>\n"
      "<div class=charts>\n";
  html += chart(
      "pass@1 vs budget", "budget (tokens kept per head; threshold cells: realised mean)", true, false,
      [](const Cell* c) { return budget_x(c).value_or(0.0); }, v.f_budget, true);
  html += chart(
      "pass@1 vs realised KV bytes", "KV-cache bytes per sequence (mean high-water mark)", true, true,
      [](const Cell* c) { return c->kv_bytes_peak_mean; }, v.f_bytes, false);
  if (v.any_steady)
    html += chart("pass@1 vs steady KV bytes", "KV-cache bytes per sequence after compression (mean steady)", true,
                  true, steady_of, v.f_steady, false, false, true);
  if (v.any_read)
    html += chart("pass@1 vs KV bytes read", "KV bytes read per decode step (mean; all layers and heads)", true, true,
                  read_of, v.f_read, false, true);
  html += chart(
      "pass@1 vs decode speed", "decode tokens/s per sequence", false, false,
      [](const Cell* c) { return c->decode_tok_s; }, v.f_speed, false);
  // The seeds' systems claim: at one KV memory, a compressing policy decodes more sequences
  // together. The full cache's reference line stays: its own point is in the chart too.
  for (const auto& [mem, cs] : v.by_memory)
    html += chart(
        fmt::format("pass@1 vs throughput at --memory {:g} GiB", mem),
        "aggregate decode tokens/s (all sequences of the pool together)", false, false,
        [](const Cell* c) { return *c->decode_tok_s_agg; }, v.f_memory, false, false, false, &cs);
  html += "</div>\n";
}

/// A group's table of cells (accuracy with CIs, the paired difference from the full cache,
/// pass@k, maj@k, speed, KV bytes, Pareto membership), HTML and Markdown.
void render_group_table(const GroupView& v, const std::string& model, const std::string& task,
                        const std::map<std::string, std::string>& model_name, std::string& html, std::string& md) {
  html +=
      "<table><tr><th class=l>policy</th><th>budget</th><th>n</th><th>pass@1 %</th>"
      "<th>95% CI</th><th>&Delta; vs full (pts)</th><th>paired 95% CI</th><th>pass@k %</th>"
      "<th>maj@k %</th><th>decode tok/s/seq</th><th>decode tok/s agg</th><th>memory GiB</th><th>decode batch</th>"
      "<th>preempted</th><th>prefill tok/s</th><th>TTFT s</th>"
      "<th>KV peak</th><th>KV steady</th><th>KV final</th><th>KV read/step</th><th>evicted %</th>"
      "<th>truncated %</th><th>Pareto</th></tr>\n";
  md += fmt::format(
      "## {} — {}\n\n| policy | budget | n | pass@1 % | 95% CI | Δ vs full (pts) | paired 95% CI "
      "| pass@k % | maj@k % | decode tok/s/seq | decode tok/s agg | memory GiB | decode batch | preempted "
      "| prefill tok/s | TTFT s | KV peak | KV steady | KV read/step | Pareto |\n"
      "|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
      md_esc(model_name.at(model)), md_esc(task));
  for (const auto& name : v.order) {
    auto cs = v.by_series.at(name);
    std::sort(cs.begin(), cs.end(), [](auto* a, auto* b) { return a->key.budget < b->key.budget; });
    for (const auto* c : cs) {
      std::string ci = c->pass1 && c->pass1->n > 1 ? fmt::format("[{}, {}]", pct(c->pass1->lo), pct(c->pass1->hi)) : "";
      std::string d, dci, dcls;
      if (c->delta_vs_reference) {
        d = fmt::format("{:+.1f}", 100 * c->delta_vs_reference->mean);
        dci = fmt::format("[{:+.1f}, {:+.1f}]", 100 * c->delta_vs_reference->lo, 100 * c->delta_vs_reference->hi);
        dcls = c->delta_vs_reference->hi < 0 ? "neg" : c->delta_vs_reference->lo > 0 ? "pos" : "";
      } else if (c->is_reference) {
        d = "ref";
      }
      std::string pk, mk;
      if (!c->pass_at_k.empty()) {
        auto [k, v] = *c->pass_at_k.rbegin();
        pk = fmt::format("{} (k={})", pct(v), k);
        mk = fmt::format("{} (k={})", pct(c->maj_at_k.at(k)), k);
      }
      std::string pf;
      if (v.f_budget.count(c)) pf += "budget ";
      if (v.f_bytes.count(c)) pf += "bytes ";
      if (v.f_speed.count(c)) pf += "speed ";
      if (v.f_read.count(c)) pf += "read ";
      if (v.f_steady.count(c)) pf += "steady ";
      if (v.f_memory.count(c)) pf += "memory";
      while (!pf.empty() && pf.back() == ' ') pf.pop_back();
      const std::string rd = c->kv_bytes_read_step_mean ? human_bytes(*c->kv_bytes_read_step_mean) : "";
      const std::string st = c->kv_bytes_steady_mean ? human_bytes(*c->kv_bytes_steady_mean) : "";
      const std::string agg = c->decode_tok_s_agg ? fmt::format("{:.1f}", *c->decode_tok_s_agg) : "";
      const std::string mem = c->memory_gib ? fmt::format("{:g}", *c->memory_gib) : "";
      const std::string bat = c->decode_batch_mean ? fmt::format("{:.2f}", *c->decode_batch_mean) : "";
      const std::string pre = c->memory_gib ? std::to_string(c->preemptions) : "";
      html += fmt::format(
          "<tr><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td>"
          "<td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{:.1f}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{:.1f}</td><td>{:.3f}</td>"
          "<td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{:.0f}</td><td>{:.0f}</td><td class=l>{}</td></tr>\n",
          esc(name), cell_budget_str(c), c->n_samples, c->pass1 ? pct(c->pass1->mean) : "n/a", ci, dcls, d, dcls, dci, pk,
          mk, c->decode_tok_s, agg, mem, bat, pre, c->prefill_tok_s, c->ttft_s_mean, human_bytes(c->kv_bytes_peak_mean),
          st, human_bytes(c->kv_bytes_final_mean), rd, 100 * c->evicted_frac, 100 * c->truncated_frac, pf);
      md += fmt::format(
          "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1f} | {} | {} | {} | {} | {:.1f} | {:.3f} | {} | {} | {} "
          "| {} |\n",
          md_esc(name), cell_budget_str(c), c->n_samples, c->pass1 ? pct(c->pass1->mean) : "n/a", ci, d, dci, pk, mk,
          c->decode_tok_s, agg, mem, bat, pre, c->prefill_tok_s, c->ttft_s_mean, human_bytes(c->kv_bytes_peak_mean), st,
          rd, pf);
    }
  }
  html += "</table>\n";
  md += "\n";
}

/// The "Methods" paragraph (HTML entities): how every number of the report is computed.
std::string methods_text(const CellOptions& cells) {
  return fmt::format(
      "pass@1 is the mean over examples of each example's mean score over its samples; its 95% CI is "
      "the Wilson score interval of that mean over n = the number of examples (examples are the independent "
      "units; it never leaves [0, 1]). &Delta; vs full is the mean over examples of "
      "(cell score &minus; full-cache score) on samples paired by example and sample index (same prompt "
      "and seed); its 95% CI is a percentile paired bootstrap over examples with {} resamples "
      "(splitmix64, seed {:#x}). pass@k is the unbiased estimator of Chen et al. 2021 for the largest "
      "k = 2^j &le; samples; maj@k votes on normalised answers. A cell is on a Pareto frontier when no "
      "other cell of the same model and task has at least its accuracy with at most its budget "
      "(resp. KV peak, KV steady, KV bytes read, or at least its decode tok/s per sequence) and is strictly "
      "better in one. KV peak is the mean per-sequence high-water mark of the KV pages held, counted at "
      "allocation with a step's compressions taking effect at the step's end (under compress=prompt_end it "
      "is at least the prompt's full-cache bytes, whatever the prefill chunk); KV steady is the most a "
      "sequence holds at the end of a step from the prompt end on (budget + buffer per head after "
      "compression, page-rounded); KV read/step is the mean over sequences and their "
      "decode steps of the K+V bytes the attention read, summed over layers and kv heads (a policy that "
      "holds N tokens reads N; Quest reads only its selected pages). decode tok/s/seq is generated tokens "
      "over the seconds of the decode steps each sequence took part in; decode tok/s agg is generated "
      "tokens over the decode steps' wall time (all sequences of a batch together); prefill tok/s is prompt "
      "tokens over the seconds of each sequence's prefill steps; TTFT s is the mean time from a request's "
      "start to its first token. A run with --memory admits sequences by KV pages into one pool of that size: "
      "its cells get a chart of pass@1 against decode tok/s agg whose frontier is over the cells of the same "
      "--memory; decode batch is the mean over sequences of the sequences decoding together in each one's "
      "decode steps, preempted the sequences' preemptions (pages freed, recomputed later). See docs/results.md.",
      cells.resamples, cells.seed);
}

}  // namespace

ReportFiles write_report(Store& store, const ReportOptions& opt) {
  if (opt.out_dir.empty()) fail("report: --out DIR is required");
  std::error_code ec;
  if (std::filesystem::exists(opt.out_dir, ec) && !std::filesystem::is_directory(opt.out_dir, ec))
    fail("--out {}: exists and is not a directory", opt.out_dir);
  std::filesystem::create_directories(opt.out_dir, ec);
  if (ec) throw Error(opt.out_dir + ": cannot create directory: " + ec.message(), ErrorKind::kRuntime);
  // The files are replaced by a rename inside --out (a symlink there is replaced, never written
  // through to a file elsewhere); none may be the database being read.
  for (const char* name : {"index.html", "report.md", "cells.csv"}) {
    const std::string path = opt.out_dir + "/" + name;
    check_output_not_input(path, "--out", {store.path()});
    std::error_code lec;
    if (std::filesystem::is_symlink(std::filesystem::symlink_status(path, lec)))
      fail(
          "{}: a symbolic link (to {}): kvbench writes only regular files inside --out; remove it or name "
          "another --out",
          path, std::filesystem::read_symlink(path, lec).string());
  }
  auto rows = store.samples(opt.run_ids);
  if (rows.empty()) fail("{}: no generations stored for the selected runs", store.path());
  auto all_runs = store.runs();
  CellOptions cell_opt = opt.cells;
  cell_opt.run_memory_gib = run_memory_gib(all_runs);
  auto cells = compute_cells(rows, cell_opt);
  std::set<int64_t> used_runs;
  for (const auto& c : cells) used_runs.insert(c.key.run_id);
  bool multi_run = used_runs.size() > 1;
  std::map<int64_t, std::string> run_name;
  for (const auto& r : all_runs) run_name[r.run_id] = r.name.empty() ? "run " + std::to_string(r.run_id) : r.name;

  // Group cells by (model, task).
  std::map<std::pair<std::string, std::string>, std::vector<const Cell*>> groups;
  for (const auto& c : cells) groups[{c.key.model_id, c.key.task}].push_back(&c);
  std::set<std::string> model_ids;
  for (const auto& c : cells) model_ids.insert(c.key.model_id);
  for (const auto& r : store.query("SELECT DISTINCT model_id FROM run_models")) model_ids.insert(r[0]);
  const auto model_name = display_model_names(model_ids);

  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{0}</title>\n"
      "<style>body{{font-family:sans-serif;margin:24px;color:#222}}table{{border-collapse:collapse;"
      "font-size:12px;margin:8px 0 20px}}td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}"
      "td.l,th.l{{text-align:left}}.charts{{display:flex;flex-wrap:wrap;gap:12px}}.legend span{{"
      "margin-right:14px}}.sw{{display:inline-block;width:12px;height:12px;margin-right:4px;"
      "vertical-align:middle}}.neg{{color:#b00}}.pos{{color:#070}}code{{font-size:11px}}</style>"
      "</head><body>\n<h1>{0}</h1>\n",
      esc(opt.title));
  std::string md = "# " + opt.title + "\n\n";

  render_runs(store, all_runs, used_runs, model_name, html, md);
  for (const auto& [gk, gcells] : groups) {
    const auto& [model, task] = gk;
    const GroupView v = group_view(gcells, multi_run, run_name);
    render_group_charts(v, model, task, model_name, html);
    render_group_table(v, model, task, model_name, html, md);
  }
  const std::string methods = methods_text(opt.cells);
  html += "<h2>Methods</h2><p style=\"max-width:900px\">" + methods + "</p>\n</body></html>\n";
  std::string md_methods = methods;
  for (auto [from, to] : {std::pair<std::string, std::string>{"&Delta;", "Δ"}, {"&minus;", "−"}, {"&le;", "≤"}}) {
    for (size_t pos; (pos = md_methods.find(from)) != std::string::npos;) md_methods.replace(pos, from.size(), to);
  }
  md += "## Methods\n\n" + md_methods + "\n";

  ReportFiles files{opt.out_dir + "/index.html", opt.out_dir + "/report.md", opt.out_dir + "/cells.csv"};
  write_text(files.html, html);
  write_text(files.markdown, md);
  write_text(files.csv, cells_csv(cells));
  return files;
}

}  // namespace kvb::results

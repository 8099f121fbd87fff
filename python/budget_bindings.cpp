// The budget rule in Python (qvg/budget.h, qvg/budget_trial.h): qvg.choose
// and the configuration behind qvg.Codec(spec, bits=..., tokens=..., dim=...).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <string>

#include "convert.h"
#include "dlpack.h"
#include "qvg/budget.h"
#include "qvg/budget_trial.h"
#include "qvg/methods.h"

namespace qvg::python {

namespace {

py::dict choice_dict(const CodecConfig& c, const BudgetChoice& b, int64_t tokens) {
  py::dict d;
  d["spec"] = codec_spec(b.config);
  d["description"] = describe(span_config(b.config, tokens));
  d["bits"] = b.bits;
  d["reachable"] = b.reachable;
  d["method"] = c.name;
  return d;
}

}  // namespace

CodecConfig budget_config(const std::string& spec, double bits, int64_t tokens, int64_t dim) {
  const CodecConfig c = parse_codec_spec(spec);
  const BudgetChoice b = choose_for_budget_any_format(c, bits, tokens, dim);
  if (!b.reachable) {
    char m[512];
    std::snprintf(m, sizeof m,
                  "%s cannot reach %.4g bits per value on spans of %lld tokens, dim %lld: its family's cheapest "
                  "configuration, %s, stores %.3f (the limit is the budget + 3 %%)",
                  spec.c_str(), bits, static_cast<long long>(tokens), static_cast<long long>(dim),
                  describe(span_config(b.config, tokens)).c_str(), b.bits);
    throw Error(m);
  }
  return b.config;
}

void bind_budget(py::module_& m) {
  m.def(
      "choose",
      [](const std::string& spec, double bits, py::object tokens, py::object dim, py::object k, py::object v,
         int sample_heads, double max_seconds, const std::string& layout) {
        const CodecConfig c = parse_codec_spec(spec);
        if (!k.is_none() || !v.is_none()) {
          if (k.is_none() || v.is_none()) throw Error("choose: give both k and v (or neither)");
          const KvLayout l = parse_layout(layout);
          const HeadTensor hk = host_input(k, l, "k", "choose"), hv = host_input(v, l, "v", "choose");
          BudgetTrialOptions opt;
          opt.sample_heads = sample_heads;
          opt.max_seconds = max_seconds;
          MeasuredBudgetChoice r;
          {
            py::gil_scoped_release unlocked;
            r = choose_for_budget_on_data(c, bits, hk, hv, opt);
          }
          py::dict d = choice_dict(c, r.choice, hk.tokens);
          py::list trials;
          for (const BudgetTrial& t : r.trials) {
            py::dict x;
            x["description"] = describe(t.candidate.config);
            x["spec"] = codec_spec(t.candidate.config);
            x["bits"] = t.candidate.bits;
            x["expected_error"] = t.candidate.distortion;
            x["error"] = t.measured;  // NaN: untried
            trials.append(x);
          }
          d["trials"] = trials;
          return d;
        }
        if (tokens.is_none() || dim.is_none())
          throw Error("choose: give the span's shape (tokens=, dim=) or its data (k=, v=)");
        const int64_t n = tokens.cast<int64_t>(), d = dim.cast<int64_t>();
        return choice_dict(c, choose_for_budget_any_format(c, bits, n, d), n);
      },
      py::arg("spec"), py::arg("bits"), py::kw_only(), py::arg("tokens") = py::none(), py::arg("dim") = py::none(),
      py::arg("k") = py::none(), py::arg("v") = py::none(), py::arg("sample_heads") = 2,
      py::arg("max_seconds") = 120.0, py::arg("layout") = "htd",
      "The budget rule: the configuration of spec's family with the lowest expected error within `bits` bits "
      "per value (at most 3 % above), for spans of `tokens` tokens of head dim `dim` (a quality model of the "
      "shape), or, given k and v (arrays [heads, tokens, dim], one span), by trial encodes of sample_heads of "
      "their heads (at most max_seconds). Returns a dict: spec (canonical, for qvg.Codec), description, bits, "
      "reachable (False: spec is its family's cheapest, above the budget), method; with k and v also trials "
      "(each candidate's description, spec, bits, expected_error, measured error; NaN where untried).");
}

}  // namespace qvg::python

#include "db/report_data.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/format.hpp"
#include "core/primitive_name.hpp"

namespace shapetune::report_data {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool positive(double v) { return std::isfinite(v) && v > 0; }

bool timed(const CandidateRecord& c) {
  return c.status == CandidateStatus::ok && c.timing && positive(c.timing->median_us);
}

bool faulted(const CandidateRecord& c) {
  return c.status == CandidateStatus::crashed || c.status == CandidateStatus::timeout;
}

std::string family_of(const std::string& primitive) {
  const auto name = PrimitiveName::parse(primitive);
  return name ? name->family : primitive;
}

bool compute_bound(const WinnerFacts& f) { return f.has_cost() && f.intensity() >= kComputeBoundIntensity; }

bool tensor_dtype(DType d) { return d == DType::f16 || d == DType::bf16 || d == DType::tf32; }

std::string family_dtype(const std::string& family, DType dtype) { return family + "/" + std::string(dtype_name(dtype)); }

// Raises a roof to a library's measured rate where the library ran faster than the ceiling.
void raise(Roof& roof, double rate, const CandidateRecord& library, const char* unit) {
  if (!(rate > roof.value)) return;
  roof.value = rate;
  roof.raised_by = library.variant + " on " + library.problem.key() + " (" + fmt_quantity(rate, unit) + ")";
}

}  // namespace

const char* baseline_kind_name(BaselineKind kind) {
  switch (kind) {
    case BaselineKind::library: return "library";
    case BaselineKind::own_chain: return "unfused chain";
    case BaselineKind::unknown: return "baseline";
  }
  return "baseline";
}

bool WinnerFacts::has_cost() const {
  return std::isfinite(winner->cost.bytes) && std::isfinite(winner->cost.flops) && winner->cost.bytes > 0 &&
         positive(winner->timing.median_us);
}

double WinnerFacts::intensity() const { return has_cost() ? winner->cost.flops / winner->cost.bytes : kNaN; }

double WinnerFacts::flops_per_s() const {
  return has_cost() ? winner->cost.flops / (winner->timing.median_us * 1e-6) : kNaN;
}

double WinnerFacts::bytes_per_s() const {
  return has_cost() ? winner->cost.bytes / (winner->timing.median_us * 1e-6) : kNaN;
}

std::optional<std::string> own_vs_library(const WinnerFacts& f) {
  if (!f.best_own || !f.best_library) return std::nullopt;
  const std::string verdict = compare_verdict(f.best_own->timing->median_us, f.best_own->timing->median_ci_rel,
                                              f.best_library->timing->median_us, f.best_library->timing->median_ci_rel);
  if (verdict == "faster") return "own faster";
  if (verdict == "slower") return "library faster";
  if (verdict == "same") return "same";
  return std::nullopt;
}

const Roof* DeviceRoofs::compute_roof(const std::string& family, DType dtype) const {
  const auto tensor = tensor_families.find(family_dtype(family, dtype));
  const std::string name = tensor != tensor_families.end() && tensor->second
                               ? "tensor_" + std::string(dtype_name(dtype))
                               : std::string("fp32_fma");
  const auto it = compute.find(name);
  return it == compute.end() ? nullptr : &it->second;
}

std::optional<double> DeviceRoofs::roof_at(const WinnerFacts& f) const {
  if (!f.has_cost()) return std::nullopt;
  if (f.winner->cost.flops <= 0) {
    if (!copy) return std::nullopt;
    return copy->value;
  }
  const Roof* c = compute_roof(f.family, f.winner->problem.dtype);
  const double memory = copy ? copy->value * f.intensity() : INFINITY;
  // A memory-bound problem needs only the copy roof; a compute-bound one needs its compute roof.
  if (!c) return compute_bound(f) || !copy ? std::nullopt : std::optional<double>(memory);
  return std::min(c->value, memory);
}

std::optional<double> DeviceRoofs::fraction_of_roof(const WinnerFacts& f) const {
  const auto roof = roof_at(f);
  if (!roof || !positive(*roof)) return std::nullopt;
  return (f.winner->cost.flops > 0 ? f.flops_per_s() : f.bytes_per_s()) / *roof;
}

DeviceRoofs device_roofs(const std::vector<CeilingRecord>& ceilings, const std::string& device_key,
                         const std::vector<WinnerFacts>& facts) {
  DeviceRoofs roofs;
  for (const auto& c : ceilings) {
    if (c.device_key != device_key || !positive(c.value)) continue;
    if (c.name == "dram_copy_best" && c.unit == "B/s") roofs.copy = Roof{c.name, c.value, c.method, ""};
    if (c.unit != "FLOP/s") continue;
    // fp32_fma, or a variant of it (fp32_fma_peak): the largest stands for all.
    const std::string name = c.name.rfind("fp32_fma", 0) == 0 ? "fp32_fma" : c.name;
    if (name != "fp32_fma" && name.rfind("tensor_", 0) != 0) continue;  // sgemm_fp32 is a reference, not a roof
    auto [it, added] = roofs.compute.try_emplace(name, Roof{c.name, c.value, c.method, ""});
    if (!added && c.value > it->second.value) it->second = Roof{c.name, c.value, c.method, ""};
  }
  for (const auto& f : facts)
    if (f.winner->device_key == device_key && tensor_dtype(f.winner->problem.dtype) && compute_bound(f))
      roofs.tensor_families[family_dtype(f.family, f.winner->problem.dtype)] = true;
  // The best library rate on each roof, so that no library stands above its own ceiling.
  for (const auto& f : facts) {
    if (f.winner->device_key != device_key || !f.best_library || !f.has_cost()) continue;
    const double seconds = f.best_library->timing->median_us * 1e-6;
    if (compute_bound(f)) {
      const Roof* c = roofs.compute_roof(f.family, f.winner->problem.dtype);
      if (c) raise(roofs.compute.at(c->name.rfind("fp32_fma", 0) == 0 ? "fp32_fma" : c->name),
                   f.winner->cost.flops / seconds, *f.best_library, "FLOP/s");
    } else if (roofs.copy) {
      raise(*roofs.copy, f.winner->cost.bytes / seconds, *f.best_library, "B/s");
    }
  }
  return roofs;
}

DbContents read_db(const std::string& path, const BaselineKindFn& kind_of) {
  auto kind = [&](const std::string& primitive, const std::string& variant) {
    return kind_of ? kind_of(primitive, variant) : BaselineKind::unknown;
  };
  DbContents db;
  db.path = path;
  try {
    db.schema_found = Store::file_schema_version(path);
    const auto store = Store::open(path, OpenMode::read_only);
    db.schema_version = store->schema_version();
    db.devices = store->devices();
    db.sweeps = store->sweeps();
    db.winners = store->winners();
    db.ceilings = store->ceilings();
    for (const auto& w : db.winners) {
      WinnerFacts f;
      f.winner = &w;
      f.family = family_of(w.problem.primitive);
      if (!w.best_baseline.empty()) f.baseline_kind = kind(w.problem.primitive, w.best_baseline);
      std::vector<std::string> timed_baselines;
      for (auto& c : store->candidates(w.sweep_id, w.problem.key())) {
        if (faulted(c)) f.faults.push_back(c);
        if (!timed(c)) {
          if (c.baseline) f.lost_baselines.push_back(std::move(c));
          continue;
        }
        if (c.baseline) timed_baselines.push_back(c.variant);
        // An unfused chain is neither one of the tuned variants nor a library: it is left out here.
        if (c.baseline && kind(c.problem.primitive, c.variant) != BaselineKind::library) continue;
        auto& best = c.baseline ? f.best_library : f.best_own;
        if (!best || c.timing->median_us < best->timing->median_us) best = std::move(c);
      }
      // A baseline refused in one config but timed in another still ran.
      std::erase_if(f.lost_baselines, [&](const CandidateRecord& lost) {
        return std::find(timed_baselines.begin(), timed_baselines.end(), lost.variant) != timed_baselines.end();
      });
      f.counters = store->counter_values(w.sweep_id, w.problem.key(), w.variant, w.config.key());
      db.facts.push_back(std::move(f));
    }
    for (const auto& sweep : db.sweeps)
      if (auto reason = store->counters_unavailable(sweep.id)) db.counters_unavailable.emplace_back(sweep.id, *reason);
  } catch (const StoreError& e) {
    throw ReportError(e.what());
  }
  return db;
}

double geomean(const std::vector<double>& values) {
  double log_sum = 0;
  int n = 0;
  for (const double v : values)
    if (positive(v)) log_sum += std::log(v), ++n;
  return n ? std::exp(log_sum / n) : kNaN;
}

}  // namespace shapetune::report_data

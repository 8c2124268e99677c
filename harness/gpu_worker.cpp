#include "harness/gpu_worker.hpp"

#include <algorithm>
#include <map>

#include "core/wire.hpp"
#include "harness/child_process.hpp"
#include "harness/cuda_check.hpp"
#include "harness/nvtx.hpp"
#include "harness/problem_data.hpp"

namespace shapetune {
namespace {

constexpr const char* kRole = "gpu-worker";

enum class Op : std::uint8_t { start, open, measure, describe, counters_start, profile, counters_off };
enum class Code : std::uint8_t { ok, error, context_lost, unknown_metric, unavailable };

// --- the encoding of what crosses between the two processes --------------------------------

void put(wire::Writer& w, const MeasureOptions& o) {
  w.boolean(o.flush_l2).i64(o.stop.min_samples).i64(o.stop.max_samples).f64(o.stop.target_ci_rel);
  w.f64(o.stop.time_cap_s).f64(o.batch_below_us).i64(o.warmup_launches);
}
MeasureOptions get_options(wire::Reader& r) {
  MeasureOptions o;
  o.flush_l2 = r.boolean();
  o.stop.min_samples = r.i32();
  o.stop.max_samples = r.i32();
  o.stop.target_ci_rel = r.f64();
  o.stop.time_cap_s = r.f64();
  o.batch_below_us = r.f64();
  o.warmup_launches = r.i32();
  return o;
}

void put(wire::Writer& w, const MeasureSteps& s) {
  w.boolean(s.verify).boolean(s.time).i64(s.fixed_samples).f64(s.time_cap_s);
  w.boolean(s.mode.has_value()).u8(s.mode ? static_cast<std::uint8_t>(*s.mode) : 0).str(s.library_algo);
}
MeasureSteps get_steps(wire::Reader& r) {
  MeasureSteps s;
  s.verify = r.boolean();
  s.time = r.boolean();
  s.fixed_samples = r.i32();
  s.time_cap_s = r.f64();
  const bool has_mode = r.boolean();
  const std::uint8_t mode = r.u8();
  if (has_mode) {
    if (mode > static_cast<std::uint8_t>(TimingMode::batch)) throw wire::WireError("unknown timing mode");
    s.mode = static_cast<TimingMode>(mode);
  }
  s.library_algo = r.str();
  return s;
}

void put(wire::Writer& w, const CandidateOutcome& o) {
  w.u8(static_cast<std::uint8_t>(o.status)).str(o.reason).boolean(o.context_lost);
  w.boolean(o.accuracy.has_value());
  if (o.accuracy) {
    const AccuracyReport& a = *o.accuracy;
    w.f64(a.max_abs_error).f64(a.max_rel_error).i64(a.mismatches).i64(a.checked).str(a.first_mismatch);
  }
  w.boolean(o.timing.has_value());
  if (o.timing) {
    const TimingStats& t = *o.timing;
    w.f64(t.median_us).f64(t.p10_us).f64(t.p90_us).f64(t.min_us).f64(t.median_ci_rel).i64(t.samples);
    w.u8(static_cast<std::uint8_t>(t.mode)).i64(t.launches_per_sample).i64(t.input_sets).boolean(t.state_restored);
    w.str(t.stop_reason);
  }
}
CandidateOutcome get_outcome(wire::Reader& r) {
  CandidateOutcome o;
  const std::uint8_t status = r.u8();
  if (status >= kCandidateStatusCount) throw wire::WireError("unknown candidate status");
  o.status = static_cast<CandidateStatus>(status);
  o.reason = r.str();
  o.context_lost = r.boolean();
  if (r.boolean()) {
    AccuracyReport a;
    a.max_abs_error = r.f64();
    a.max_rel_error = r.f64();
    a.mismatches = r.i64();
    a.checked = r.i64();
    a.first_mismatch = r.str();
    o.accuracy = a;
  }
  if (r.boolean()) {
    TimingStats t;
    t.median_us = r.f64();
    t.p10_us = r.f64();
    t.p90_us = r.f64();
    t.min_us = r.f64();
    t.median_ci_rel = r.f64();
    t.samples = r.i32();
    const std::uint8_t mode = r.u8();
    if (mode > static_cast<std::uint8_t>(TimingMode::batch)) throw wire::WireError("unknown timing mode");
    t.mode = static_cast<TimingMode>(mode);
    t.launches_per_sample = r.i32();
    t.input_sets = r.i32();
    t.state_restored = r.boolean();
    t.stop_reason = r.str();
    o.timing = t;
  }
  return o;
}

void put(wire::Writer& w, const DeviceInfo& d) {
  const DeviceFingerprint& f = d.fingerprint;
  w.i64(d.ordinal).str(f.name).i64(f.compute_capability).i64(f.sm_count).i64(f.l2_bytes).i64(f.memory_bytes);
  w.str(f.driver_version).str(f.runtime_version).str(f.cublas_version).str(f.cudnn_version);
  const DeviceLimits& l = d.limits;
  w.i64(l.compute_capability).i64(l.sm_count).i64(l.max_threads_per_block).i64(l.shared_memory_per_block_optin);
  w.i64(l.l2_bytes).i64(l.global_memory_bytes);
  w.str(d.pci_bus_id).f64(d.memory_clock_mhz).i64(d.memory_bus_bits);
}
DeviceInfo get_device(wire::Reader& r) {
  DeviceInfo d;
  d.ordinal = r.i32();
  DeviceFingerprint& f = d.fingerprint;
  f.name = r.str();
  f.compute_capability = r.i32();
  f.sm_count = r.i32();
  f.l2_bytes = r.i64();
  f.memory_bytes = r.i64();
  f.driver_version = r.str();
  f.runtime_version = r.str();
  f.cublas_version = r.str();
  f.cudnn_version = r.str();
  DeviceLimits& l = d.limits;
  l.compute_capability = r.i32();
  l.sm_count = r.i32();
  l.max_threads_per_block = r.i32();
  l.shared_memory_per_block_optin = r.i64();
  l.l2_bytes = r.i64();
  l.global_memory_bytes = r.i64();
  d.pci_bus_id = r.str();
  d.memory_clock_mhz = r.f64();
  d.memory_bus_bits = r.i32();
  return d;
}

void put_names(wire::Writer& w, const std::vector<std::string>& names) {
  w.i64(static_cast<std::int64_t>(names.size()));
  for (const auto& n : names) w.str(n);
}
std::vector<std::string> get_names(wire::Reader& r) {
  const std::int64_t n = r.i64();
  if (n < 0 || n > 100000) throw wire::WireError("garbled name list");
  std::vector<std::string> names;
  for (std::int64_t i = 0; i < n; ++i) names.push_back(r.str());
  return names;
}

void put_candidate(wire::Writer& w, const Variant& v, const Config& c) {
  w.str(v.primitive).str(v.name).str(c.key());
}

// "softmax/f32/rows=7,cols=4097 warp_online{block=128} verify": a timeline read without the sweep's log
// beside it still says what ran.
std::string range_name(const Problem& problem, const Variant& v, const Config& config, const std::string& phase) {
  const std::string candidate = config.values().empty() ? v.name : v.name + "{" + config.key() + "}";
  return problem.key() + " " + candidate + " " + phase;
}

std::string phase_name(const MeasureSteps& steps) {
  if (steps.verify && steps.time) return "verify+time";
  if (steps.verify) return "verify";
  if (steps.fixed_samples > 0) return "race " + std::to_string(steps.fixed_samples) + " samples";
  return "time";
}

// --- the worker's side ------------------------------------------------------------------------

class Worker {
 public:
  int serve(MessageChannel& channel) {
    while (auto message = channel.read()) {
      wire::Writer reply;
      try {
        wire::Reader r(*message);
        const auto op = static_cast<Op>(r.u8());
        handle(op, r, reply);
      } catch (const UnknownMetricError& e) {
        reply = wire::Writer();
        reply.u8(static_cast<std::uint8_t>(Code::unknown_metric)).str(e.what());
      } catch (const CudaError& e) {
        reply = wire::Writer();
        reply.u8(static_cast<std::uint8_t>(e.context_lost() ? Code::context_lost : Code::error)).str(e.what());
      } catch (const std::exception& e) {
        reply = wire::Writer();
        reply.u8(static_cast<std::uint8_t>(Code::error)).str(e.what());
      }
      if (!channel.write(reply.bytes())) break;
    }
    return 0;
  }

 private:
  static wire::Writer& ok(wire::Writer& w) { return w.u8(static_cast<std::uint8_t>(Code::ok)); }

  void handle(Op op, wire::Reader& r, wire::Writer& out) {
    switch (op) {
      case Op::start: {
        const int ordinal = r.i32();
        default_options_ = get_options(r);
        r.expect_done();
        if (auto why = cuda_unavailable_reason()) {
          out.u8(static_cast<std::uint8_t>(Code::unavailable)).str(*why);
          return;
        }
        device_ = use_device(ordinal);
        Measurer& m = measurer(default_options_);
        put(ok(out), *device_);
        out.i64(m.reserved_device_bytes());
        return;
      }
      case Op::open: {
        const Problem problem = Problem::parse_key(r.str());
        const auto seed = static_cast<std::uint64_t>(r.i64());
        r.expect_done();
        data_.reset();  // the last problem's buffers go before the next one's are allocated
        // The problem's range stays open over its candidates' requests, until the next problem.
        problem_range_.reset();
        problem_range_.emplace("problem " + problem.key());
        const NvtxRange setup("setup " + problem.key() + ": inputs and float64 reference");
        const Primitive* primitive = catalogue().find_primitive(problem.primitive);
        if (!primitive) throw std::runtime_error("primitive " + problem.primitive + " is not in the worker's catalogue");
        if (auto why = cannot_hold(footprint(*primitive, problem), measurer(default_options_).reserved_device_bytes())) {
          out.u8(static_cast<std::uint8_t>(Code::error)).str(*why);
          return;
        }
        data_ = std::make_unique<ProblemData>(*primitive, problem, seed);
        ok(out);
        return;
      }
      case Op::measure: {
        const Variant& v = variant(r);
        const Config config = Config::parse_key(r.str());
        Tolerance tolerance;
        tolerance.atol = r.f64();
        tolerance.rtol = r.f64();
        const MeasureSteps steps = get_steps(r);
        const MeasureOptions options = get_options(r);
        r.expect_done();
        ProblemData& data = problem_data();
        const NvtxRange range(range_name(data.problem(), v, config, phase_name(steps)));
        const CandidateOutcome outcome = measurer(options).measure(v, config, data, tolerance, steps);
        put(ok(out), outcome);
        return;
      }
      case Op::describe: {
        const Variant& v = variant(r);
        const Config config = Config::parse_key(r.str());
        r.expect_done();
        if (!v.describe_algorithm) throw std::runtime_error(v.name + " has no library algorithm to describe");
        ok(out).str(v.describe_algorithm(problem_data().problem(), config, measurer(default_options_).libraries()));
        return;
      }
      case Op::counters_start: {
        const std::vector<std::string> metrics = get_names(r);
        r.expect_done();
        counters_ = std::make_unique<CounterSession>(metrics);
        ok(out).boolean(counters_->available()).str(counters_->unavailable_reason().value_or(""));
        out.str(counters_->chip()).i64(static_cast<std::int64_t>(counters_->passes()));
        put_names(out, counters_->metrics());
        return;
      }
      case Op::profile: {
        const Variant& v = variant(r);
        const Config config = Config::parse_key(r.str());
        r.expect_done();
        if (!counters_) throw std::runtime_error("no counter session in the worker");
        Measurer& m = measurer(default_options_);
        const NvtxRange range(range_name(problem_data().problem(), v, config, "counters"));
        CounterProfile profile;
        try {
          profile = counters_->profile(m.single_launch(v, config, problem_data()), m.stream(), [&] { m.flush_l2(); });
        } catch (const CudaError& e) {
          if (e.context_lost()) throw;
          profile.error = e.what();
        } catch (const std::exception& e) {
          profile.error = e.what();
        }
        ok(out).i64(profile.kernels).str(profile.error).boolean(counters_->available());
        out.str(counters_->unavailable_reason().value_or(""));
        out.i64(static_cast<std::int64_t>(profile.values.size()));
        for (const auto& [name, value] : profile.values) out.str(name).f64(value);
        return;
      }
      case Op::counters_off: {
        r.expect_done();
        if (counters_) counters_->disable();
        ok(out);
        return;
      }
    }
    throw std::runtime_error("unknown request " + std::to_string(static_cast<int>(op)));
  }

  const Variant& variant(wire::Reader& r) {
    const std::string primitive = r.str(), name = r.str();
    const Variant* v = catalogue().find_variant(primitive, name);
    if (!v) throw std::runtime_error("variant " + name + " of " + primitive + " is not in the worker's catalogue");
    return *v;
  }

  ProblemData& problem_data() {
    if (!data_) throw std::runtime_error("no problem is open in the worker");
    return *data_;
  }

  Measurer& measurer(const MeasureOptions& options) {
    if (!device_) throw std::runtime_error("the worker has no device yet");
    wire::Writer key;
    put(key, options);
    auto& slot = measurers_[key.bytes()];
    if (!slot) slot = std::make_unique<Measurer>(*device_, options);
    return *slot;
  }

  std::optional<DeviceInfo> device_;
  MeasureOptions default_options_;
  std::map<std::string, std::unique_ptr<Measurer>> measurers_;
  std::unique_ptr<ProblemData> data_;
  std::optional<NvtxRange> problem_range_;
  std::unique_ptr<CounterSession> counters_;
};

}  // namespace

void serve_gpu_worker_if_asked() {
  serve_child_if_asked(kRole, [](MessageChannel& channel) { return Worker().serve(channel); });
}

// --- the parent's side ------------------------------------------------------------------------

double candidate_time_limit_s(const MeasureOptions& options, const Cost& cost, double baseline_us) {
  if (options.candidate_timeout_s > 0) return options.candidate_timeout_s;
  const double modest_s = cost.bytes / 100e9 + cost.flops / 1e12;
  const double launch_s = 20 * std::max(modest_s, baseline_us * 1e-6);
  const int launches = options.stop.min_samples + options.warmup_launches + 8;  // + verify, estimate, re-check
  return kCandidateTimeoutFloorS + 2 * options.stop.time_cap_s + launch_s * launches + cost.bytes / 1e9;
}

struct GpuWorker::Answer {
  bool ok = false;    // the worker replied
  Code code = Code::error;
  std::string text;   // the error text, or what ended the worker
  bool timed_out = false;
  std::string payload;
};

// Reads a reply's payload with `read`, which must consume all of it.
template <typename Read>
void parse(const std::string& payload, Read read) {
  try {
    wire::Reader r(payload);
    read(r);
    r.expect_done();
  } catch (const wire::WireError& e) {
    throw WorkerError(std::string("the GPU worker's reply is garbled: ") + e.what());
  }
}

GpuWorker::GpuWorker(int device_ordinal, MeasureOptions default_options)
    : ordinal_(device_ordinal), default_options_(default_options) {}

GpuWorker::~GpuWorker() = default;

// One request and its reply. A worker that dies or overruns is gone afterwards (ensure_running
// starts the next); one that lost its CUDA context is killed here, for the same reason.
GpuWorker::Answer GpuWorker::request(const std::string& message, double timeout_s) {
  Answer a;
  const ChildProcess::Reply reply = child_->call(message, timeout_s);
  if (reply.kind != ChildProcess::Reply::Kind::ok) {
    a.timed_out = reply.kind == ChildProcess::Reply::Kind::timed_out;
    a.text = "the GPU worker " + reply.death;
    if (const std::string last = child_->last_output_line(); !last.empty() && !a.timed_out)
      a.text += "; its last output: " + last;
    child_.reset();
    return a;
  }
  a.ok = true;
  try {
    wire::Reader r(reply.message);
    const std::uint8_t code = r.u8();
    if (code > static_cast<std::uint8_t>(Code::unavailable)) throw wire::WireError("unknown reply code");
    a.code = static_cast<Code>(code);
    if (a.code != Code::ok) {
      a.text = r.str();
      r.expect_done();
    } else {
      a.payload = reply.message.substr(1);
    }
  } catch (const wire::WireError& e) {
    child_->kill();
    child_.reset();
    throw WorkerError(std::string("the GPU worker's reply is garbled: ") + e.what());
  }
  if (a.code == Code::context_lost) {
    child_->kill();
    child_.reset();
  }
  return a;
}

std::optional<std::string> GpuWorker::launch_and_start() {
  child_ = ChildProcess::exec_self(kRole);
  wire::Writer w;
  w.u8(static_cast<std::uint8_t>(Op::start)).i64(ordinal_);
  put(w, default_options_);
  const Answer a = request(w.bytes(), kWorkerStartTimeoutS);
  if (!a.ok) throw WorkerError("the GPU worker did not start: " + a.text);
  if (a.code != Code::ok) {
    child_.reset();
    if (a.code == Code::unavailable) return a.text;
    throw WorkerError("cannot use CUDA device " + std::to_string(ordinal_) + ": " + a.text);
  }
  parse(a.payload, [&](wire::Reader& r) {
    device_ = get_device(r);
    reserved_device_bytes_ = r.i64();
  });
  return std::nullopt;
}

std::optional<std::string> GpuWorker::start() {
  if (auto why = launch_and_start()) return why;
  started_ = true;
  return std::nullopt;
}

// After a crash: a fresh worker with what the last one had set up (device, counter session, the
// open problem from the same seed). Failing that, nothing more can be measured: WorkerError.
void GpuWorker::ensure_running() {
  if (child_) return;
  if (!started_) throw WorkerError("the GPU worker was never started");
  ++restarts_;
  try {
    const DeviceInfo before = device_;
    if (auto why = launch_and_start()) throw WorkerError("the restarted worker finds no usable device: " + *why);
    if (!(device_.fingerprint.key() == before.fingerprint.key()))
      throw WorkerError("the restarted worker sees another device (" + device_.fingerprint.key() + ")");
    if (counter_metrics_) {
      const auto metrics = *counter_metrics_;
      start_counters(metrics);
    }
    if (open_) {
      const auto [problem, seed] = *open_;
      if (auto why = open_problem(problem, seed)) throw WorkerError("reopening " + problem.key() + ": " + *why);
    }
  } catch (const UnknownMetricError& e) {
    throw WorkerError(std::string("the restarted worker refused the counter metrics: ") + e.what());
  }
}

std::optional<std::string> GpuWorker::open_problem(const Problem& problem, std::uint64_t seed) {
  ensure_running();
  open_.reset();
  wire::Writer w;
  w.u8(static_cast<std::uint8_t>(Op::open)).str(problem.key()).i64(static_cast<std::int64_t>(seed));
  const Answer a = request(w.bytes(), kWorkerSetupTimeoutS);
  if (!a.ok) return "preparing the inputs: " + a.text;
  if (a.code != Code::ok) return a.text;
  open_ = std::make_pair(problem, seed);
  return std::nullopt;
}

CandidateOutcome GpuWorker::measure(const Variant& v, const Config& config, Tolerance tolerance,
                                    const MeasureSteps& steps, double timeout_s, const MeasureOptions* options) {
  ensure_running();
  wire::Writer w;
  w.u8(static_cast<std::uint8_t>(Op::measure));
  put_candidate(w, v, config);
  w.f64(tolerance.atol).f64(tolerance.rtol);
  put(w, steps);
  put(w, options ? *options : default_options_);
  const Answer a = request(w.bytes(), timeout_s);
  CandidateOutcome out;
  if (!a.ok) {
    out.status = a.timed_out ? CandidateStatus::timeout : CandidateStatus::crashed;
    out.reason = a.text;
    return out;
  }
  if (a.code != Code::ok) {
    out.status = a.code == Code::context_lost ? CandidateStatus::crashed : CandidateStatus::error;
    out.reason = a.text;
    return out;
  }
  parse(a.payload, [&](wire::Reader& r) { out = get_outcome(r); });
  if (out.context_lost) {
    // The candidate broke the worker's CUDA context: what it did is recorded, the worker goes.
    out.status = CandidateStatus::crashed;
    out.context_lost = false;
    out.timing.reset();
    child_->kill();
    child_.reset();
  }
  return out;
}

std::string GpuWorker::describe_algorithm(const Variant& v, const Config& config) {
  ensure_running();
  wire::Writer w;
  w.u8(static_cast<std::uint8_t>(Op::describe));
  put_candidate(w, v, config);
  const Answer a = request(w.bytes(), kWorkerStartTimeoutS);
  if (!a.ok || a.code != Code::ok) throw std::runtime_error(a.text);
  std::string text;
  parse(a.payload, [&](wire::Reader& r) { text = r.str(); });
  return text;
}

WorkerCounterStatus GpuWorker::start_counters(const std::vector<std::string>& metrics) {
  ensure_running();
  wire::Writer w;
  w.u8(static_cast<std::uint8_t>(Op::counters_start));
  put_names(w, metrics);
  const Answer a = request(w.bytes(), kWorkerStartTimeoutS);
  WorkerCounterStatus status;
  if (a.ok && a.code == Code::unknown_metric) throw UnknownMetricError(a.text);
  if (!a.ok || a.code != Code::ok) {
    status.unavailable_reason = "the GPU worker could not start a counter session: " + a.text;
  } else {
    parse(a.payload, [&](wire::Reader& r) {
      status.available = r.boolean();
      status.unavailable_reason = r.str();
      status.chip = r.str();
      status.passes = static_cast<std::size_t>(r.i64());
      status.metrics = get_names(r);
    });
  }
  counter_metrics_ = metrics;
  counter_status_ = status;
  return status;
}

CounterProfile GpuWorker::profile(const Variant& v, const Config& config, double timeout_s, bool* crashed) {
  if (crashed) *crashed = false;
  ensure_running();
  wire::Writer w;
  w.u8(static_cast<std::uint8_t>(Op::profile));
  put_candidate(w, v, config);
  const Answer a = request(w.bytes(), timeout_s);
  CounterProfile profile;
  if (!a.ok || a.code == Code::context_lost) {
    if (crashed) *crashed = true;
    profile.error = a.text;
    return profile;
  }
  if (a.code != Code::ok) {
    profile.error = a.text;
    return profile;
  }
  parse(a.payload, [&](wire::Reader& r) {
    profile.kernels = r.i32();
    profile.error = r.str();
    counter_status_.available = r.boolean();
    counter_status_.unavailable_reason = r.str();
    const std::int64_t n = r.i64();
    if (n < 0 || n > 100000) throw wire::WireError("a counter list of " + std::to_string(n));
    for (std::int64_t i = 0; i < n; ++i) {
      std::string name = r.str();
      profile.values[name] = r.f64();
    }
  });
  return profile;
}

void GpuWorker::disable_counters() {
  if (!child_) return;  // a restarted worker starts with its profiler off
  wire::Writer w;
  w.u8(static_cast<std::uint8_t>(Op::counters_off));
  request(w.bytes(), kWorkerStartTimeoutS);
}

}  // namespace shapetune

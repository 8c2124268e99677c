#include "models/runner.hpp"

#include <algorithm>
#include <iomanip>
#include <ostream>

namespace shapetune {
namespace {

// variant{config}, as the resolution table and the per-op times name what an op launches.
std::string variant_text(const OpResolution& r) { return r.config.empty() ? r.variant : r.variant + "{" + r.config + "}"; }

}  // namespace

std::string_view dispatch_mode_name(DispatchMode mode) { return mode == DispatchMode::tuned ? "tuned" : "library"; }

std::optional<DispatchMode> parse_dispatch_mode(std::string_view text) {
  if (text == "tuned") return DispatchMode::tuned;
  if (text == "library") return DispatchMode::library;
  return std::nullopt;
}

void BoundOp::launch(cudaStream_t stream, LibraryHandles& libraries, LaunchPart part) const {
  const LaunchArgs args{resolution.op.problem, config,           tensors,
                        stream,                libraries,        workspace.get(),
                        workspace.bytes(),     std::span<const double>(scalars), resolution.library_algo};
  const auto& half = part == LaunchPart::forward_half ? variant->forward_half : variant->backward_half;
  const auto fail = [&](const std::string& why) {
    throw std::runtime_error(resolution.op.name + " (" + resolution.op.problem.key() + ", " + variant->name + "): " + why);
  };
  if (part != LaunchPart::whole && !half) fail("the variant does not launch in halves");
  const LaunchStatus status = part == LaunchPart::whole ? variant->launch(args) : half(args, half_outputs);
  if (!status.ok) fail(status.message);
}

Resolver::Resolver(const std::string& db_path, const DeviceInfo& device, DispatchMode mode)
    : dispatcher_(db_path.empty() ? Dispatcher(device.limits)
                                  : Dispatcher(db_path, device.fingerprint.key(), device.limits)),
      limits_(device.limits),
      mode_(mode) {}

std::optional<double> Resolver::tuned_median_us(const Problem& problem) const {
  for (const auto& row : dispatcher_.table().rows())
    if (row.problem == problem) return row.timing.median_us;
  return std::nullopt;
}

std::pair<const Variant*, OpResolution> Resolver::resolve(const ModelOp& op) const {
  OpResolution r;
  r.op = op;
  const Catalogue& cat = catalogue();
  const Variant* chosen = nullptr;
  Config config;
  if (mode_ == DispatchMode::library) {
    // The baseline that won among baselines in the sweep of this very problem, else the first
    // baseline that runs it; primitives no library has fall back to the default variant.
    for (const auto& row : dispatcher_.table().rows())
      if (row.problem == op.problem && !row.best_baseline.empty())
        if (const Variant* v = cat.find_variant(op.problem.primitive, row.best_baseline);
            v && v->supports(op.problem, v->default_config, limits_).ok) {
          chosen = v;
          r.source = "library: fastest baseline in the sweep";
        }
    if (!chosen)
      for (const Variant* v : cat.variants(op.problem.primitive))
        if (v->baseline && v->supports(op.problem, v->default_config, limits_).ok) {
          chosen = v;
          r.source = "library: first baseline that runs it";
          break;
        }
    if (chosen) config = chosen->default_config;
  }
  if (!chosen) {
    const DispatchChoice choice = dispatcher_.lookup(op.problem);
    chosen = &dispatcher_.variant_of(op.problem, choice);
    config = choice.config;
    if (mode_ == DispatchMode::library)
      r.source = "no library has it: default variant";
    else if (choice.source == DispatchSource::nearest)
      r.source = "nearest (" + choice.tuned_problem + ")";
    else
      r.source = std::string(dispatch_source_name(choice.source));
    if (choice.source == DispatchSource::fallback)
      if (const std::vector<std::string> others = dispatcher_.tuned_elsewhere(op.problem); !others.empty()) {
        std::string names;
        for (const std::string& n : others) names += (names.empty() ? "" : ", ") + n;
        r.source += " (this database tunes it only on " + names + ": sweep it on this device)";
      }
    r.library_algo = choice.library_algo;
    if (!r.library_algo.empty()) r.source += ", recorded library algorithm";
    if (!choice.tuned_problem.empty()) r.accuracy_failures = dispatcher_.table().accuracy_failures(choice.tuned_problem);
  }
  for (const auto& [name, value] : op.pinned)
    if (const std::optional<std::int64_t> was = config.find(name); was && *was != value) {
      config.set(name, value);
      r.source += ", " + name + "=" + std::to_string(value) + " pinned by the model";
    }
  if (Support s = chosen->supports(op.problem, config, limits_); !s.ok)
    throw std::runtime_error(op.name + ": " + chosen->name + " cannot run " + op.problem.key() + ": " + s.reason);
  r.variant = chosen->name;
  r.config = config.key();
  return {chosen, r};
}

RunnerCore::RunnerCore(const RunnerOptions& options)
    : device_(use_device(options.device)),
      overlap_launches_(options.overlap_launches && device_.limits.compute_capability >= 90) {
  resolver_ = std::make_unique<Resolver>(options.db_path, device_, options.dispatch);
  SHAPETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

RunnerCore::~RunnerCore() {
  if (stream_) cudaStreamDestroy(stream_);
}

BoundOp RunnerCore::bind(ModelOp op, std::vector<void*> tensors, std::vector<double> scalars, Record record) {
  auto [variant, resolution] = resolver_->resolve(op);
  if (record == Record::yes) resolutions_.push_back(resolution);
  BoundOp b;
  b.resolution = std::move(resolution);
  b.variant = variant;
  b.config = Config::parse_key(b.resolution.config);
  b.tensors = std::move(tensors);
  b.scalars = std::move(scalars);
  if (variant->workspace_bytes)
    if (const std::size_t bytes = variant->workspace_bytes(b.resolution.op.problem, b.config))
      b.workspace = DeviceBuffer(bytes);
  return b;
}

void RunnerCore::resolve(const ModelOp& op) { resolutions_.push_back(resolver_->resolve(op).second); }

std::vector<OpTime> RunnerCore::op_times(const std::vector<OpLaunch>& ops, int warmup, int iterations) {
  std::vector<OpTime> out;
  for (const OpLaunch& op : ops) {
    if (!op.op) {
      out.push_back({op.plain_name, "", "plain kernel", 0});
      continue;
    }
    const OpResolution& r = op.op->resolution;
    const char* half = op.part == LaunchPart::forward_half    ? ": forward half"
                       : op.part == LaunchPart::backward_half ? ": backward half"
                                                              : "";
    out.push_back({r.op.name + half, r.op.problem.key(), variant_text(r), 0});
  }
  if (ops.empty() || iterations < 1) return out;
  struct Events {
    std::vector<cudaEvent_t> all;
    ~Events() {
      for (cudaEvent_t e : all) cudaEventDestroy(e);
    }
  } events;
  for (std::size_t i = 0; i <= ops.size(); ++i) {
    cudaEvent_t e = nullptr;
    SHAPETUNE_CUDA_CHECK(cudaEventCreate(&e));
    events.all.push_back(e);
  }
  // External: captured as event record nodes, which a replay records, rather than as the
  // capture's own ordering.
  const Graph g = capture(stream_, [&] {
    SHAPETUNE_CUDA_CHECK(cudaEventRecordWithFlags(events.all[0], stream_, cudaEventRecordExternal));
    for (std::size_t i = 0; i < ops.size(); ++i) {
      ops[i].launch(stream_, libraries_);
      SHAPETUNE_CUDA_CHECK(cudaEventRecordWithFlags(events.all[i + 1], stream_, cudaEventRecordExternal));
    }
  });
  const GraphExec exec(g);
  std::vector<std::vector<double>> samples(ops.size());
  for (int r = 0; r < warmup + iterations; ++r) {
    exec.launch(stream_);
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (r < warmup) continue;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      float ms = 0;
      SHAPETUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, events.all[i], events.all[i + 1]));
      samples[i].push_back(ms * 1e3);
    }
  }
  for (std::size_t i = 0; i < ops.size(); ++i) {
    std::vector<double>& s = samples[i];
    std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
    out[i].median_us = s[s.size() / 2];
  }
  return out;
}

Graph::~Graph() {
  if (graph_) cudaGraphDestroy(graph_);
}

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    if (graph_) cudaGraphDestroy(graph_);
    graph_ = std::exchange(o.graph_, nullptr);
  }
  return *this;
}

namespace {

bool is_kernel(cudaGraphNode_t node) {
  cudaGraphNodeType type{};
  return cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel;
}

// Whether a kernel node runs one of shapetune's kernels (namespace shapetune, so its mangled name
// starts "_ZN9shapetune"); a library's kernel, or one whose name the runtime cannot give, is not.
bool runs_own_kernel(cudaGraphNode_t node) {
  if (!is_kernel(node)) return false;
  cudaKernelNodeParams params{};
  const char* name = nullptr;
  if (cudaGraphKernelNodeGetParams(node, &params) != cudaSuccess || cudaFuncGetName(&name, params.func) != cudaSuccess ||
      name == nullptr) {
    (void)cudaGetLastError();  // a driver-API kernel (a library's): not an error of the run
    return false;
  }
  return std::string_view(name).starts_with("_ZN9shapetune");
}

}  // namespace

std::size_t overlap_kernel_launches(cudaGraph_t graph) {
  std::size_t count = 0;
  SHAPETUNE_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
  std::vector<cudaGraphNode_t> from(count), to(count);
  std::vector<cudaGraphEdgeData> data(count);
  SHAPETUNE_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &count));
  std::size_t changed = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const cudaGraphEdgeData& plain = data[i];
    if (plain.type != cudaGraphDependencyTypeDefault || plain.from_port != 0 || plain.to_port != 0 ||
        !is_kernel(from[i]) || !runs_own_kernel(to[i]))
      continue;
    // The runtime may keep an edge as it is (cudaErrorNotSupported, met on an H100 in a TF32
    // forward): that edge stays ordinary, and the error is cleared so no later launch reports it.
    if (cudaGraphRemoveDependencies(graph, &from[i], &to[i], &plain, 1) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    cudaGraphEdgeData programmatic{};
    programmatic.from_port = cudaGraphKernelNodePortProgrammatic;
    programmatic.type = cudaGraphDependencyTypeProgrammatic;
    if (cudaGraphAddDependencies(graph, &from[i], &to[i], &programmatic, 1) != cudaSuccess) {
      (void)cudaGetLastError();
      SHAPETUNE_CUDA_CHECK(cudaGraphAddDependencies(graph, &from[i], &to[i], &plain, 1));
      continue;
    }
    ++changed;
  }
  return changed;
}

GraphExec::GraphExec(const Graph& graph) { SHAPETUNE_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph.get(), 0)); }

StepGraph::StepGraph(Graph body, CaptureUpdate capture_update)
    : capture_update_(std::move(capture_update)), graph_(std::move(body)) {
  // The update joins the body's own graph, after its leaves (the nodes nothing depends on), rather
  // than both going in as children of a new graph: a child graph may not hold memory nodes, and a
  // library's captured calls can bring them into the body (cuBLAS's did: `train logreg --dispatch
  // library` failed with cudaErrorNotSupported).
  if (capture_update_) {
    std::size_t count = 0;
    SHAPETUNE_CUDA_CHECK(cudaGraphGetNodes(graph_.get(), nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count), leaves;
    SHAPETUNE_CUDA_CHECK(cudaGraphGetNodes(graph_.get(), nodes.data(), &count));
    for (cudaGraphNode_t node : nodes) {
      std::size_t dependents = 0;
      SHAPETUNE_CUDA_CHECK(cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &dependents));
      if (dependents == 0) leaves.push_back(node);
    }
    SHAPETUNE_CUDA_CHECK(cudaGraphAddChildGraphNode(&update_node_, graph_.get(), leaves.data(), leaves.size(),
                                                    capture_update_(1).get()));
  }
  exec_ = GraphExec(graph_);
}

void StepGraph::prepare() {
  const std::int64_t t = ++steps_;
  if (!capture_update_ || t == 1) return;  // step 1's update is the one built in
  const Graph next = capture_update_(t);
  const cudaError_t e = cudaGraphExecChildGraphNodeSetParams(exec_.get(), update_node_, next.get());
  if (e != cudaSuccess) cudaGetLastError();  // not sticky: keep it from the next launch's check
  SHAPETUNE_CUDA_CHECK(e);
}

GraphExec::~GraphExec() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

GraphExec& GraphExec::operator=(GraphExec&& o) noexcept {
  if (this != &o) {
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}

void GraphExec::launch(cudaStream_t stream) const { SHAPETUNE_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

void print_resolutions(const std::vector<OpResolution>& resolutions, std::ostream& out) {
  std::size_t w_name = 2, w_problem = 7, w_variant = 7;
  for (const auto& r : resolutions) {
    w_name = std::max(w_name, r.op.name.size());
    w_problem = std::max(w_problem, r.op.problem.key().size());
    w_variant = std::max(w_variant, variant_text(r).size());
  }
  out << std::left << std::setw(static_cast<int>(w_name)) << "op" << "  " << std::setw(static_cast<int>(w_problem))
      << "problem" << "  " << std::setw(static_cast<int>(w_variant)) << "variant" << "  resolved by\n";
  for (const auto& r : resolutions) {
    out << std::left << std::setw(static_cast<int>(w_name)) << r.op.name << "  " << std::setw(static_cast<int>(w_problem))
        << r.op.problem.key() << "  " << std::setw(static_cast<int>(w_variant)) << variant_text(r) << "  " << r.source
        << "\n";
    for (const AccuracyFailure& f : r.accuracy_failures)
      out << std::string(w_name + 2, ' ') << "not " << f.variant << ": " << f.configs
          << (f.configs == 1 ? " config" : " configs") << " failed the accuracy gate in the sweep (worst |error| "
          << f.max_abs_error << (f.first_mismatch.empty() ? "" : ", " + f.first_mismatch) << ")\n";
  }
}

void print_op_times(const std::vector<OpTime>& times, int iterations, std::string_view sequence, std::ostream& out) {
  struct Row {
    const OpTime* first;
    int count = 0;
    double us = 0;
  };
  std::vector<Row> rows;
  double total = 0;
  for (const auto& t : times) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) {
      return r.first->name == t.name && r.first->problem == t.problem && r.first->variant == t.variant;
    });
    if (it == rows.end()) it = rows.insert(rows.end(), Row{&t});
    ++it->count;
    it->us += t.median_us;
    total += t.median_us;
  }
  std::size_t w_name = 2, w_variant = 7;
  for (const Row& r : rows) {
    w_name = std::max(w_name, r.first->name.size());
    w_variant = std::max(w_variant, r.first->variant.size());
  }
  out << "where a " << sequence << "'s time goes (medians of " << iterations
      << " replays of these ops with an event after each; the events add a little to each op):\n"
      << std::left << std::setw(static_cast<int>(w_name)) << "op" << "  " << std::setw(static_cast<int>(w_variant))
      << "variant" << "  runs        us  share\n";
  for (const Row& r : rows)
    out << std::left << std::setw(static_cast<int>(w_name)) << r.first->name << "  "
        << std::setw(static_cast<int>(w_variant)) << r.first->variant << "  " << std::right << std::setw(4) << r.count
        << std::fixed << std::setprecision(1) << std::setw(10) << r.us << std::setw(6) << std::setprecision(0)
        << 100 * r.us / total << "%\n" << std::defaultfloat;
  out << std::left << std::setw(static_cast<int>(w_name + w_variant + 8)) << "sum" << std::right << std::fixed
      << std::setprecision(1) << std::setw(10) << total << "\n" << std::defaultfloat;
}

}  // namespace shapetune

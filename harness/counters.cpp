#include "harness/counters.hpp"

#include <cuda.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "harness/cuda_check.hpp"

namespace shapetune {
namespace {

// What a user can do about the failures that are about the host, not about shapetune.
std::string hint_for(CUptiResult result) {
  switch (result) {
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
      return "insufficient privileges: this host lets only administrators read GPU performance counters "
             "(NVreg_RestrictProfilingToAdminUsers=1); run as root or change that driver option";
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
      return "insufficient privileges: profiling is not enabled for this virtual GPU";
    case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
      return "a MIG instance: CUPTI cannot profile MIG devices";
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      return "another profiler is attached (Nsight Compute or Systems, or another CUPTI client)";
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
    case CUPTI_ERROR_NOT_SUPPORTED:
      return "the device or its configuration does not support profiling";
    default:
      return "";
  }
}

// "cuptiRangeProfilerEnable failed: CUPTI_ERROR_... (message)", with a hint where there is one
// first, since the hint is what the user reads the line for.
std::string cupti_failure(const std::string& call, CUptiResult result) {
  const char* name = nullptr;
  std::string text = cuptiGetResultString(result, &name) == CUPTI_SUCCESS && name
                         ? std::string(name)
                         : "CUPTI error " + std::to_string(static_cast<int>(result));
  const char* message = nullptr;
  if (cuptiGetErrorMessage(result, &message) == CUPTI_SUCCESS && message && text != message)
    text += " (" + std::string(message) + ")";
  const std::string hint = hint_for(result);
  return (hint.empty() ? "" : hint + "; ") + call + " failed: " + text;
}

// cuptiProfilerInitialize, once per process and never undone: the process ends soon after a
// sweep, and initialising again after a deinitialise is a path nobody here has verified.
const std::optional<std::string>& initialize_profiler() {
  static std::once_flag once;
  static std::optional<std::string> failure;
  std::call_once(once, [] {
    CUpti_Profiler_Initialize_Params params{};
    params.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE;
    if (const CUptiResult r = cuptiProfilerInitialize(&params); r != CUPTI_SUCCESS)
      failure = cupti_failure("cuptiProfilerInitialize", r);
  });
  return failure;
}

// A driver API function through the runtime, so that shapetune does not link libcuda.so.1: the
// CPU tests and the GPU tests' skip must start on machines that have no driver.
template <typename Function>
Function driver_function(const char* symbol, std::string& error) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &function, 12000, cudaEnableDefault, &status);
  if (e != cudaSuccess || status != cudaDriverEntryPointSuccess || !function) {
    error = std::string("cannot find the driver function ") + symbol + ": " +
            (e != cudaSuccess ? cudaGetErrorString(e) : "not in this driver");
    return nullptr;
  }
  return reinterpret_cast<Function>(function);
}

std::string support_level_text(const CUpti_Profiler_DeviceSupported_Params& p) {
  std::string text;
  auto add = [&](CUpti_Profiler_Support_Level level, const char* what) {
    if (level == CUPTI_PROFILER_CONFIGURATION_SUPPORTED) return;
    text += (text.empty() ? "" : ", ") + std::string(what) +
            (level == CUPTI_PROFILER_CONFIGURATION_DISABLED ? " (disabled by the system)" : "");
  };
  add(p.architecture, "architecture older than Volta");
  add(p.sli, "SLI");
  add(p.vGpu, "virtual GPU");
  add(p.confidentialCompute, "confidential computing");
  add(p.cmp, "mining processor (CMP)");
  add(p.wsl, "WSL");
  return "the device does not support range profiling: " + (text.empty() ? "no reason given" : text);
}

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void deinitialize_host(CUpti_Profiler_Host_Object* host) {
  if (!host) return;
  CUpti_Profiler_Host_Deinitialize_Params params{};
  params.structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE;
  params.pHostObject = host;
  cuptiProfilerHostDeinitialize(&params);  // nothing to do about a failure while tearing down
}

}  // namespace

// ---- host side -------------------------------------------------------------------------------

CounterConfig::CounterConfig(std::string chip, std::vector<std::string> metrics)
    : chip_(std::move(chip)), metrics_(std::move(metrics)) {
  if (metrics_.empty()) throw UnknownMetricError("no metrics to collect");
  for (const auto& name : metrics_) {
    // CUPTI accepts a bare base name when asked about it, but a value needs a rollup; refuse
    // it here rather than after a sweep's worth of profiling.
    if (name.find('.') == std::string::npos)
      throw UnknownMetricError("metric '" + name + "' has no rollup or submetric; add one, e.g. '" + name +
                               ".sum' or '" + name + ".avg.pct_of_peak_sustained_elapsed'");
    names_.push_back(name.c_str());
  }

  if (kCountersBlockedBySanitizer)
    throw CounterError("hardware counters are unavailable in a build with AddressSanitizer: CUPTI loads "
                       "libnvperf_host.so with RTLD_DEEPBIND, which the sanitizer cannot run");
  CUpti_Profiler_Host_Initialize_Params init{};
  init.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE;
  init.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  init.pChipName = chip_.c_str();
  if (const CUptiResult r = cuptiProfilerHostInitialize(&init); r != CUPTI_SUCCESS)
    throw CounterError(cupti_failure("cuptiProfilerHostInitialize (chip " + chip_ + ")", r));
  host_ = init.pHostObject;
  try {
    // One by one first: ConfigAddMetrics refuses the whole list for one bad name, without
    // saying which.
    for (const auto& name : metrics_) {
      CUpti_Profiler_Host_GetMetricProperties_Params properties{};
      properties.structSize = CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE;
      properties.pHostObject = host_;
      properties.pMetricName = name.c_str();
      const CUptiResult r = cuptiProfilerHostGetMetricProperties(&properties);
      if (r == CUPTI_ERROR_INVALID_METRIC_NAME)
        throw UnknownMetricError("unknown metric '" + name + "' on chip " + chip_ +
                                 " (metric names look like dram__bytes_read.sum; `ncu --query-metrics` lists them)");
      if (r != CUPTI_SUCCESS)
        throw CounterError(cupti_failure("cuptiProfilerHostGetMetricProperties (" + name + ")", r));
      additive_.push_back(properties.metricType == CUPTI_METRIC_TYPE_COUNTER && ends_with(name, ".sum"));
    }

    CUpti_Profiler_Host_ConfigAddMetrics_Params add{};
    add.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE;
    add.pHostObject = host_;
    add.ppMetricNames = names_.data();
    add.numMetrics = names_.size();
    if (const CUptiResult r = cuptiProfilerHostConfigAddMetrics(&add); r != CUPTI_SUCCESS)
      throw CounterError(cupti_failure("cuptiProfilerHostConfigAddMetrics", r));

    CUpti_Profiler_Host_GetConfigImageSize_Params size{};
    size.structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE;
    size.pHostObject = host_;
    if (const CUptiResult r = cuptiProfilerHostGetConfigImageSize(&size); r != CUPTI_SUCCESS)
      throw CounterError(cupti_failure("cuptiProfilerHostGetConfigImageSize", r));
    if (size.configImageSize == 0) throw CounterError("cuptiProfilerHostGetConfigImageSize returned 0 bytes");
    image_.assign(size.configImageSize, 0);

    CUpti_Profiler_Host_GetConfigImage_Params get{};
    get.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE;
    get.pHostObject = host_;
    get.configImageSize = image_.size();
    get.pConfigImage = image_.data();
    if (const CUptiResult r = cuptiProfilerHostGetConfigImage(&get); r != CUPTI_SUCCESS)
      throw CounterError(cupti_failure("cuptiProfilerHostGetConfigImage", r));

    CUpti_Profiler_Host_GetNumOfPasses_Params passes{};
    passes.structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE;
    passes.configImageSize = image_.size();
    passes.pConfigImage = image_.data();
    if (const CUptiResult r = cuptiProfilerHostGetNumOfPasses(&passes); r != CUPTI_SUCCESS)
      throw CounterError(cupti_failure("cuptiProfilerHostGetNumOfPasses", r));
    if (passes.numOfPasses == 0) throw CounterError("cuptiProfilerHostGetNumOfPasses returned 0 passes");
    passes_ = passes.numOfPasses;
  } catch (...) {
    deinitialize_host(host_);  // the destructor does not run for a constructor that throws
    host_ = nullptr;
    throw;
  }
}

CounterConfig::~CounterConfig() { deinitialize_host(host_); }

std::vector<double> CounterConfig::evaluate(const std::vector<std::uint8_t>& counter_data, std::size_t range) const {
  std::vector<double> values(metrics_.size(), std::numeric_limits<double>::quiet_NaN());
  CUpti_Profiler_Host_EvaluateToGpuValues_Params params{};
  params.structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE;
  params.pHostObject = host_;
  params.pCounterDataImage = counter_data.data();
  params.counterDataImageSize = counter_data.size();
  params.rangeIndex = range;
  params.ppMetricNames = const_cast<const char**>(names_.data());  // CUPTI only reads them
  params.numMetrics = names_.size();
  params.pMetricValues = values.data();
  if (const CUptiResult r = cuptiProfilerHostEvaluateToGpuValues(&params); r != CUPTI_SUCCESS)
    throw CounterError(cupti_failure("cuptiProfilerHostEvaluateToGpuValues (range " + std::to_string(range) + ")", r));
  return values;
}

// ---- target side -----------------------------------------------------------------------------

CounterSession::CounterSession(std::vector<std::string> metrics) : metrics_(std::move(metrics)) {
  if (const cudaError_t e = cudaGetDevice(&device_); e != cudaSuccess) {
    set_unavailable(std::string("no current CUDA device: ") + cudaGetErrorString(e));
    return;
  }
  // The runtime creates the device's primary context lazily; this makes sure it exists.
  if (const cudaError_t e = cudaFree(nullptr); e != cudaSuccess) {
    set_unavailable(std::string("cannot create the CUDA context: ") + cudaGetErrorString(e));
    return;
  }
  std::string error;
  using GetCurrent = CUresult (*)(CUcontext*);
  using DeviceGet = CUresult (*)(CUdevice*, int);
  const auto get_current = driver_function<GetCurrent>("cuCtxGetCurrent", error);
  const auto device_get = driver_function<DeviceGet>("cuDeviceGet", error);
  if (!get_current || !device_get) {
    set_unavailable(error);
    return;
  }
  CUcontext context = nullptr;
  if (const CUresult r = get_current(&context); r != CUDA_SUCCESS || !context) {
    set_unavailable("cuCtxGetCurrent failed (driver error " + std::to_string(static_cast<int>(r)) + ")");
    return;
  }
  context_ = context;
  CUdevice device = 0;
  if (const CUresult r = device_get(&device, device_); r != CUDA_SUCCESS) {
    set_unavailable("cuDeviceGet failed (driver error " + std::to_string(static_cast<int>(r)) + ")");
    return;
  }

  if (const auto& failure = initialize_profiler()) {
    set_unavailable(*failure);
    return;
  }
  CUpti_Device_GetChipName_Params chip{};
  chip.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE;
  chip.deviceIndex = static_cast<std::size_t>(device_);
  if (const CUptiResult r = cuptiDeviceGetChipName(&chip); r != CUPTI_SUCCESS || !chip.pChipName) {
    set_unavailable(r != CUPTI_SUCCESS ? cupti_failure("cuptiDeviceGetChipName", r)
                                       : "cuptiDeviceGetChipName returned no name");
    return;
  }
  chip_ = chip.pChipName;

  // Metric names before device support: a wrong name is the user's to fix wherever this runs.
  try {
    config_ = std::make_unique<CounterConfig>(chip_, metrics_);
  } catch (const UnknownMetricError&) {
    throw;
  } catch (const CounterError& e) {
    set_unavailable(e.what());
    return;
  }

  CUpti_Profiler_DeviceSupported_Params supported{};
  supported.structSize = CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE;
  supported.cuDevice = device;
  supported.api = CUPTI_PROFILER_RANGE_PROFILING;
  if (const CUptiResult r = cuptiProfilerDeviceSupported(&supported); r != CUPTI_SUCCESS) {
    set_unavailable(cupti_failure("cuptiProfilerDeviceSupported", r));
    return;
  }
  if (supported.isSupported != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) set_unavailable(support_level_text(supported));
}

CounterSession::~CounterSession() { disable(); }

void CounterSession::set_unavailable(std::string reason) {
  if (!unavailable_reason_) unavailable_reason_ = std::move(reason);
  disable();
}

bool CounterSession::enable() {
  if (!available()) return false;
  if (profiler_) return true;
  CUpti_RangeProfiler_Enable_Params params{};
  params.structSize = CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE;
  params.ctx = static_cast<CUcontext>(context_);
  if (const CUptiResult r = cuptiRangeProfilerEnable(&params); r != CUPTI_SUCCESS) {
    set_unavailable(cupti_failure("cuptiRangeProfilerEnable", r));
    return false;
  }
  if (!params.pRangeProfilerObject) {
    set_unavailable("cuptiRangeProfilerEnable returned no profiler object");
    return false;
  }
  profiler_ = params.pRangeProfilerObject;
  return prepare_counter_data();
}

void CounterSession::disable() {
  if (!profiler_) return;
  CUpti_RangeProfiler_Disable_Params params{};
  params.structSize = CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE;
  params.pRangeProfilerObject = profiler_;
  profiler_ = nullptr;  // first: set_unavailable below calls disable() again
  const CUptiResult r = cuptiRangeProfilerDisable(&params);
  // Only now may CUPTI stop writing into it.
  counter_data_.clear();
  counter_data_.shrink_to_fit();
  // Whether the context is still enabled is unknown, and enabling it twice crashes: never again.
  if (r != CUPTI_SUCCESS) set_unavailable(cupti_failure("cuptiRangeProfilerDisable", r));
}

bool CounterSession::prepare_counter_data() {
  CUpti_RangeProfiler_GetCounterDataSize_Params size{};
  size.structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE;
  size.pRangeProfilerObject = profiler_;
  size.pMetricNames = const_cast<const char**>(config_->c_names().data());
  size.numMetrics = config_->c_names().size();
  size.maxNumOfRanges = kMaxProfiledKernels;
  size.maxNumRangeTreeNodes = static_cast<std::uint32_t>(kMaxProfiledKernels);
  if (const CUptiResult r = cuptiRangeProfilerGetCounterDataSize(&size); r != CUPTI_SUCCESS) {
    set_unavailable(cupti_failure("cuptiRangeProfilerGetCounterDataSize", r));
    return false;
  }
  if (size.counterDataSize == 0) {
    set_unavailable("cuptiRangeProfilerGetCounterDataSize returned 0 bytes");
    return false;
  }
  counter_data_.assign(size.counterDataSize, 0);
  return true;
}

CounterProfile CounterSession::profile(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                                       const std::function<void()>& flush_l2) {
  CounterProfile out;
  if (!enable()) {
    out.error = "counters unavailable: " + unavailable_reason_.value_or("unknown reason");
    return out;
  }
  auto failed = [&](const std::string& call, CUptiResult r) {
    set_unavailable(cupti_failure(call, r));
    out.error = *unavailable_reason_;
    return out;
  };

  // Auto ranges take every kernel on the context between Start and Stop: nothing else may be
  // in flight, the flush included (CUPTI does not flush L2 itself).
  SHAPETUNE_CUDA_CHECK(cudaDeviceSynchronize());
  if (flush_l2) {
    flush_l2();
    SHAPETUNE_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // A fresh counter-data image for every profile, so that range 0 is this launch's first kernel.
  CUpti_RangeProfiler_CounterDataImage_Initialize_Params image{};
  image.structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE;
  image.pRangeProfilerObject = profiler_;
  image.counterDataSize = counter_data_.size();
  image.pCounterData = counter_data_.data();
  if (const CUptiResult r = cuptiRangeProfilerCounterDataImageInitialize(&image); r != CUPTI_SUCCESS)
    return failed("cuptiRangeProfilerCounterDataImageInitialize", r);

  // The same config image every time: switching an enabled profiler to another one crashed.
  CUpti_RangeProfiler_SetConfig_Params config{};
  config.structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE;
  config.pRangeProfilerObject = profiler_;
  config.configSize = config_->image().size();
  config.pConfig = config_->image().data();
  config.counterDataImageSize = counter_data_.size();
  config.pCounterDataImage = counter_data_.data();
  config.range = CUPTI_AutoRange;
  config.replayMode = CUPTI_KernelReplay;
  config.maxRangesPerPass = kMaxProfiledKernels;
  config.numNestingLevels = 1;
  config.minNestingLevel = 1;
  config.passIndex = 0;
  config.targetNestingLevel = 1;
  if (const CUptiResult r = cuptiRangeProfilerSetConfig(&config); r != CUPTI_SUCCESS)
    return failed("cuptiRangeProfilerSetConfig", r);

  CUpti_RangeProfiler_Start_Params start{};
  start.structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE;
  start.pRangeProfilerObject = profiler_;
  if (const CUptiResult r = cuptiRangeProfilerStart(&start); r != CUPTI_SUCCESS)
    return failed("cuptiRangeProfilerStart", r);

  CUpti_RangeProfiler_Stop_Params stop{};
  stop.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE;
  stop.pRangeProfilerObject = profiler_;
  try {
    launch(stream);
    SHAPETUNE_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (...) {
    // Leave CUPTI stopped and the context disabled (a later profile enables it afresh), then
    // let the caller see the launch's own error.
    cuptiRangeProfilerStop(&stop);
    disable();
    throw;
  }
  if (const CUptiResult r = cuptiRangeProfilerStop(&stop); r != CUPTI_SUCCESS)
    return failed("cuptiRangeProfilerStop", r);
  if (!stop.isAllPassSubmitted) {
    // Kernel replay finishes every pass inside the launch; a pass still pending means the
    // launch ran no kernel. Start over with a fresh enable next time.
    disable();
    out.error = "kernel replay left passes pending after the launch (did it run a kernel?)";
    return out;
  }

  CUpti_RangeProfiler_DecodeData_Params decode{};
  decode.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE;
  decode.pRangeProfilerObject = profiler_;
  if (const CUptiResult r = cuptiRangeProfilerDecodeData(&decode); r != CUPTI_SUCCESS)
    return failed("cuptiRangeProfilerDecodeData", r);
  if (decode.numOfRangeDropped > 0) {
    out.error = std::to_string(decode.numOfRangeDropped) + " kernels' counters were dropped: the launch ran more than " +
                std::to_string(kMaxProfiledKernels) + " kernels";
    return out;
  }

  CUpti_RangeProfiler_GetCounterDataInfo_Params info{};
  info.structSize = CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE;
  info.pCounterDataImage = counter_data_.data();
  info.counterDataImageSize = counter_data_.size();
  if (const CUptiResult r = cuptiRangeProfilerGetCounterDataInfo(&info); r != CUPTI_SUCCESS)
    return failed("cuptiRangeProfilerGetCounterDataInfo", r);
  if (info.numTotalRanges == 0) {
    out.error = "the profiled launch ran no kernel";
    return out;
  }
  if (info.numTotalRanges > kMaxProfiledKernels) {
    out.error = "the counter data holds " + std::to_string(info.numTotalRanges) + " ranges, more than the " +
                std::to_string(kMaxProfiledKernels) + " it was sized for";
    return out;
  }

  // One kernel: every metric as CUPTI evaluates it. Several (a library call that launches a
  // reduction after its main kernel): the additive metrics summed, the others left out.
  const auto& metrics = config_->metrics();
  std::vector<double> sums(metrics.size(), 0.0);
  try {
    for (std::size_t range = 0; range < info.numTotalRanges; ++range) {
      const std::vector<double> values = config_->evaluate(counter_data_, range);
      for (std::size_t m = 0; m < metrics.size(); ++m) sums[m] += values[m];
    }
  } catch (const CounterError& e) {
    set_unavailable(e.what());
    out.error = e.what();
    return out;
  }
  out.kernels = static_cast<int>(info.numTotalRanges);
  for (std::size_t m = 0; m < metrics.size(); ++m)
    if (out.kernels == 1 || config_->additive(m)) out.values[metrics[m]] = sums[m];
  counters::add_derived(out.values);
  out.values[std::string(counters::kKernels)] = out.kernels;
  return out;
}

}  // namespace shapetune

// Hardware-counter vocabulary shared by the counter session (harness), the store and the
// reports: the default metric set, the values derived from it, and how measured DRAM traffic
// is compared with a cost model. Plain C++: the CUPTI side lives in harness/counters.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shapetune::counters {

// Metric name -> value for one profiled launch (CUPTI's units: bytes, ns, %, instructions).
using Values = std::map<std::string, double>;

// CUPTI metric names, valid on TU104 (T4) and GH100 (H100/H200).
inline constexpr std::string_view kDramBytesRead = "dram__bytes_read.sum";
inline constexpr std::string_view kDramBytesWrite = "dram__bytes_write.sum";
inline constexpr std::string_view kDuration = "gpu__time_duration.sum";  // ns
inline constexpr std::string_view kOccupancy = "sm__warps_active.avg.pct_of_peak_sustained_active";
inline constexpr std::string_view kL2HitRate = "lts__t_sector_hit_rate.pct";
inline constexpr std::string_view kDramThroughput = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
inline constexpr std::string_view kSmThroughput = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
inline constexpr std::string_view kFadd = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum";
inline constexpr std::string_view kFmul = "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum";
inline constexpr std::string_view kFfma = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum";
inline constexpr std::string_view kHadd = "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum";
inline constexpr std::string_view kHmul = "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum";
inline constexpr std::string_view kHfma = "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum";
inline constexpr std::string_view kTensorInstructions = "sm__inst_executed_pipe_tensor.sum";

// Values the session adds to every profile. Their names have no "__", which every CUPTI metric
// name has, so they can share the metric column without ever meaning a hardware counter.
inline constexpr std::string_view kFp32Flops = "fp32_flops";  // fadd + fmul + 2 ffma
inline constexpr std::string_view kFp16Flops = "fp16_flops";  // hadd + hmul + 2 hfma
inline constexpr std::string_view kKernels = "kernels";       // kernels (ranges) in the launch

// The set every sweep collects unless told otherwise (sweep --metrics adds to it).
std::vector<std::string> default_metrics();

// `base` followed by each of `extra` not already in it, in order.
std::vector<std::string> with_extra(std::vector<std::string> base, const std::vector<std::string>& extra);

// Adds fp32_flops / fp16_flops where all three of their instruction counts are present.
void add_derived(Values&);

// Measured DRAM bytes, read plus written; nullopt unless both counters are present.
std::optional<double> dram_bytes(const Values&);

// Measured DRAM bytes over the cost model's minimum ("1.02x model": 2% more than the model
// says must move; re-reads and uncoalesced access show as more). Empty when either is missing.
std::string dram_vs_model_text(const Values&, double model_bytes);

}  // namespace shapetune::counters

// Named NVTX ranges, so that an Nsight Systems timeline of a sweep says which problem, candidate
// and phase each stretch of GPU work belongs to (`nsys profile -t cuda,nvtx build/shapetune sweep
// ...`). The GPU worker pushes them, since every launch happens there.
//
// NVTX v3 is header-only: its calls go through pointers bound on first use to whatever tool was
// injected (NVTX_INJECTION64_PATH, which nsys sets), or to no-ops when none was, so without a
// profiler a range costs an indirect call and the name's string.
#pragma once

#include <nvtx3/nvToolsExt.h>

#include <string>

namespace shapetune {

// A range on the calling thread's stack, in the "shapetune" domain, from construction to
// destruction. Ranges must nest: destroy them in reverse order of construction.
class NvtxRange {
 public:
  explicit NvtxRange(const std::string& name) {
    nvtxEventAttributes_t attributes{};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attributes.message.ascii = name.c_str();
    nvtxDomainRangePushEx(domain(), &attributes);
  }
  ~NvtxRange() { nvtxDomainRangePop(domain()); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  static nvtxDomainHandle_t domain() {
    static const nvtxDomainHandle_t handle = nvtxDomainCreateA("shapetune");
    return handle;
  }
};

}  // namespace shapetune

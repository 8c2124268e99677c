"""How the PyTorch peers time one call, the way shapetune times a candidate: CUDA events around
the call, the L2 evicted before each sample by reading a buffer three times its size (a read
leaves no dirty lines for the timed kernels to write back), median of the samples with p10/p90."""
import statistics

import torch


def l2_flush_buffer():
    """A float32 buffer three times the L2, on the current device."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return torch.empty(3 * l2 // 4, dtype=torch.float32, device="cuda").normal_()


def time_us(fn, flush, samples=30, before=None):
    """(median, p10, p90) in microseconds of fn() after three warm-up calls; before(), if given,
    runs ahead of every call outside the timed region (clearing gradients, say)."""
    for _ in range(3):
        if before:
            before()
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        if before:
            before()
        flush.sum()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) * 1000)
    times.sort()
    return statistics.median(times), times[len(times) // 10], times[len(times) * 9 // 10]

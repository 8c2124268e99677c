"""How the PyTorch peers time one call, the way shapetune times a candidate: CUDA events around
the call, the L2 evicted before each sample by reading a buffer three times its size (a read
leaves no dirty lines for the timed kernels to write back), median of the samples with p10/p90.
As shapetune does, the samples are queued in batches before the host waits for them, each batch
behind a hold on the GPU, so that an event pair times the GPU's work and not the host's dispatch
before it. One sample at a time, any host dispatch slower than the flush read ahead of it lands
inside the timed region: the likely reason PyTorch's SDPA through its default path (p10 181 us)
had a median of 192 us where the same cuDNN kernel forced had 182 (H100, 2026-12-07)."""
import statistics

import torch

# Samples queued before the host waits, and the hold ahead of each batch: about 1 ms at H100 and
# H200 clocks, longer than the host takes to queue a batch of single calls, so that the GPU
# reaches the first sample with the batch behind it. A call that is itself slower on the host than
# on the GPU (an eager training step) still shows its host time: the GPU waits for it between the
# events, as it would in a training loop.
BATCH = 10
HOLD_CYCLES = 2_000_000


def l2_flush_buffer():
    """A float32 buffer three times the L2, on the current device."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return torch.empty(3 * l2 // 4, dtype=torch.float32, device="cuda").normal_()


def hold_gpu():
    """Keeps the current stream busy for HOLD_CYCLES (torch.cuda._sleep: a spin kernel), where this
    PyTorch has it; without it the batch still lets the host run ahead after its first sample."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(HOLD_CYCLES)


def time_us(fn, flush, samples=30, before=None):
    """(median, p10, p90) in microseconds of fn() after three warm-up calls; before(), if given,
    runs ahead of every call outside the timed region (clearing gradients, say)."""
    for _ in range(3):
        if before:
            before()
        fn()
    torch.cuda.synchronize()
    times = []
    while len(times) < samples:
        pairs = []
        hold_gpu()
        for _ in range(min(BATCH, samples - len(times))):
            if before:
                before()
            flush.sum()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            pairs.append((start, stop))
        torch.cuda.synchronize()
        times += [start.elapsed_time(stop) * 1000 for start, stop in pairs]
    times.sort()
    return statistics.median(times), times[len(times) // 10], times[len(times) * 9 // 10]

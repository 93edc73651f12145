// What every CUDA entry of the library shares (ops/cuda/*.cu): the launch
// shape of the streaming kernels, the multi-tensor block map, a stream-ordered
// workspace, and the reporting of values that only the device reads.
//
// The entries take MindSpore's AOT arguments with device pointers and the
// cudaStream_t as `stream` (c.a.stream), and are bound by aot/call.h like the
// CPU ones: counts, dtypes and sizes are checked on the host before anything
// is launched.  Values inside tensors (ks, a layout, indices) live on the
// device and are checked there by the call's first kernels; a failure gates
// every later kernel of the call (no input is changed, the outputs are
// written as refusals: indices -1, values NaN, which a later apply refuses in
// turn) and is recorded in a status record in mapped host memory.  A later
// call of any entry, once the failing kernel has run, or
// msopt_cuda_status(stream), which waits for it, reports the failure as its
// error code and message.
//
// No MindSpore or Python headers here.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "aot/call.h"

namespace msopt {
namespace cuda {

// Streaming kernels: kThreads threads per block, each block kChunk elements
// of one tensor, read in kRounds coalesced rounds (element base + r * kThreads + t).
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRounds = 16;
constexpr int64_t kChunk = int64_t{kThreads} * kRounds;
// Per-tensor kernels (the radix digit choice, scans, norms): one block a tensor.
constexpr int kTensorThreads = 1024;

// ------------------------------------------------------------ device status --

// A value that only the device reads was out of range (details a..d).
enum DeviceError : int {
  kDevOk = 0,
  kDevKsRange,     // a = j, b = ks[j], c = n_j
  kDevKsSum,       // a = sum of the ks, b = entries of idx
  kDevBlocks,      // a = layout[0], b = entries
  kDevFit,         // a = j, b = offset, c = k, d = block
  kDevOverlap,     // a = position in a block, b = one tensor, c = the other
  kDevIndexRange,  // a = j, b = index, c = block, d = n_j
  kDevIndexOrder,  // a = j, b = block, c = entry, d = index
};

// The process's record of the first unreported failure (mapped host memory).
struct DeviceStatus {
  int error;  // DeviceError, kDevOk when none is pending
  int site;   // the failing call's entry (kSites)
  long long a, b, c, d;
};

// Who writes the record (device memory): the first failure claims it; failures
// while it is claimed are counted, not recorded.  Reset by the host when it
// reports the record.
struct DeviceClaim {
  int claimed;
  unsigned int dropped;
};

// The entries, by site number, for messages.
enum Site : int { kSiteSelect, kSitePropose, kSiteTake, kSiteApply };

// Where a kernel reports a failure: the status record, the call's gate (device
// memory, zeroed at the call's start; set, every later kernel of the call
// returns at once) and the call's entry.
struct Report {
  DeviceStatus *status;
  DeviceClaim *claim;
  int *bad;
  int site;
};

__device__ inline bool gated(const Report &r) { return *static_cast<volatile int *>(r.bad) != 0; }

// Records the call's first failure (later ones of the same call are the same
// call's refusal; one of another call while a record is unreported is counted).
__device__ inline void report(const Report &r, int error, long long a, long long b = 0,
                              long long c = 0, long long d = 0) {
  if (atomicCAS(r.bad, 0, 1) != 0) return;
  if (atomicCAS(&r.claim->claimed, 0, 1) != 0) {
    atomicAdd(&r.claim->dropped, 1u);
    return;
  }
  volatile DeviceStatus *s = r.status;
  s->site = r.site;
  s->a = a;
  s->b = b;
  s->c = c;
  s->d = d;
  __threadfence_system();
  s->error = error;
  __threadfence_system();
}

// The status record's device address (and the claim's, in *claim); nullptr
// with msopt_last_error() set when mapped host memory cannot be had.
DeviceStatus *device_status(DeviceClaim **claim = nullptr);

// A Report for a call of `site` whose gate is `bad` (device memory).
inline Report reporter(int *bad, int site) {
  DeviceClaim *claim = nullptr;
  DeviceStatus *status = device_status(&claim);
  return Report{status, claim, bad, site};
}

// kOk, or the pending failure of an earlier call as c's error (then cleared).
int take_device_error(const AotCall &c);

// kOk, or kErrNoMem / kErrInternal naming the CUDA error.
int check_cuda(const AotCall &c, cudaError_t e, const char *what);

// After a call's launches: kOk, or kErrInternal naming the CUDA error the
// thread holds (left for its owner: it may come from earlier work).
int check_launches(const AotCall &c);

// Queues *done (float32) = 0 on `stream`, unless the call is refused.
void mark_done(const Report &r, float *done, cudaStream_t stream);

// Queues, for a refused call only, idx[0..n) = -1 and val[0..n) = NaN (either may
// be null): outputs that no later kernel takes for entries.
void mark_refused(const Report &r, int32_t *idx, float *val, int64_t n, cudaStream_t stream);

// x[base + r * kThreads + threadIdx.x] of every round r, 0 past n, each load
// issued before any is used: kRounds loads in flight per thread, not one.
template <class T>
__device__ inline void load_rounds(const T *x, int64_t base, int64_t n, T (&out)[kRounds]) {
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int64_t i = base + r * kThreads + threadIdx.x;
    out[r] = i < n ? x[i] : T(0);
  }
}

// ------------------------------------------------ programmatic dependent launch --

// On Hopper and later, a kernel launched by launch() with `after_previous` starts
// while the kernel before it in the stream finishes (programmatic dependent launch):
// it must call wait_for_previous_grid() before it reads what that kernel wrote.
// Elsewhere both are no-ops and launches are ordinary.
__device__ inline void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel's CTAs start (they wait for this grid to finish first).
__device__ inline void start_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether the current device takes programmatic dependent launches (compute 9.0+).
bool dependent_launch_supported();

// Launches kernel<<<grid, kThreads, 0, stream>>>(args...), as a programmatic
// dependent launch when `after_previous` and the device supports it.
template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), int64_t grid, cudaStream_t stream,
                   bool after_previous, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  if (after_previous && dependent_launch_supported()) {
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, args...);
}

// ------------------------------------------------------------ multi-tensor --

// Tensor j of a call owns blocks [first[j], first[j + 1]) of a launch
// (ceil(n_j / kChunk) each); first has K + 1 entries.
std::vector<int64_t> block_map(const std::vector<int64_t> &n);

__device__ inline int tensor_of_block(const int64_t *first, int count, int64_t block) {
  int lo = 0, hi = count;  // the last j with first[j] <= block
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (first[mid] <= block) lo = mid; else hi = mid;
  }
  return lo;
}

// ------------------------------------------------------------- workspace --

// Device memory for one call, laid out by reserve() before allocate(), freed
// in stream order when the call returns (cudaMallocAsync; cudaMalloc where the
// device has no memory pools).  Host tables reach it with upload().
class Workspace {
 public:
  explicit Workspace(cudaStream_t stream) : stream_(stream) {}
  ~Workspace();
  Workspace(const Workspace &) = delete;
  Workspace &operator=(const Workspace &) = delete;

  size_t reserve(size_t bytes) {
    const size_t at = size_;
    size_ += (bytes + 255) / 256 * 256;
    return at;
  }
  int allocate(const AotCall &c);
  template <class T>
  T *at(size_t offset) const {
    return reinterpret_cast<T *>(base_ + offset);
  }
  // Copies `bytes` of host memory to offset `at` (stream-ordered).
  int upload(const AotCall &c, size_t at, const void *host, size_t bytes);
  // Zeroes [at, at + bytes) (stream-ordered).
  int zero(const AotCall &c, size_t at, size_t bytes);

 private:
  cudaStream_t stream_;
  char *base_ = nullptr;
  size_t size_ = 0;
  bool pooled_ = true;
};

inline cudaStream_t stream_of(const AotCall &c) { return static_cast<cudaStream_t>(c.a.stream); }

}  // namespace cuda
}  // namespace msopt

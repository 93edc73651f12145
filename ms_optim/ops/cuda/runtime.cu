// The CUDA library's shared host code (runtime.cuh) and what it reports of
// itself: its kernel entries, the device, and pending device-side failures.
#include "cuda/runtime.cuh"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace msopt {
namespace cuda {
namespace {

std::once_flag g_status_once;
DeviceStatus *g_status_host = nullptr;
DeviceStatus *g_status_device = nullptr;
DeviceClaim *g_claim = nullptr;
char g_status_failure[256] = "";
std::mutex g_status_lock;  // reading and clearing the record

// A workspace freed in stream order stays in the device's default pool up to
// this many bytes, instead of going back to the driver at every synchronization.
constexpr uint64_t kPoolKeep = uint64_t{64} << 20;

const char *site_name(int site) {
  switch (site) {
    case kSiteSelect: return "ms_optim_dgc_select_multi";
    case kSitePropose: return "ms_optim_dgc_propose_multi";
    case kSiteTake: return "ms_optim_dgc_take_multi";
    case kSiteApply: return "ms_optim_dgc_apply_multi";
    default: return "an ms_optim CUDA kernel";
  }
}

__global__ void mark_done_kernel(Report r, float *done) {
  if (!gated(r)) *done = 0.0f;
}

__global__ void mark_refused_kernel(Report r, int32_t *idx, float *val, int64_t n) {
  if (!gated(r)) return;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  if (idx != nullptr) idx[i] = -1;
  if (val != nullptr) val[i] = __int_as_float(0x7fc00000);
}

// The pending failure as (code, message), then cleared; kOk when none.
int take_pending(char *message, size_t size) {
  const std::lock_guard<std::mutex> hold(g_status_lock);
  volatile DeviceStatus *s = g_status_host;
  if (s == nullptr || s->error == kDevOk) return kOk;
  const long long a = s->a, b = s->b, c = s->c, d = s->d;
  const int error = s->error, site = s->site;
  char what[256];
  Status code = kErrValue;
  switch (error) {
    case kDevKsRange:
      std::snprintf(what, sizeof what, "ks[%lld] = %lld is outside [1, %lld]", a, b, c);
      break;
    case kDevKsSum:
      code = kErrSize;
      std::snprintf(what, sizeof what, "the ks sum to %lld, idx holds %lld", a, b);
      break;
    case kDevBlocks:
      std::snprintf(what, sizeof what, "layout[0] = %lld blocks do not divide the %lld entries",
                    a, b);
      break;
    case kDevFit:
      std::snprintf(what, sizeof what,
                    "param%lld's entries (offset %lld, k %lld) do not fit a block of %lld", a, b,
                    c, d);
      break;
    case kDevOverlap:
      std::snprintf(what, sizeof what, "entry %lld of a block belongs to param%lld and param%lld",
                    a, b, c);
      break;
    case kDevIndexRange:
      std::snprintf(what, sizeof what, "param%lld: index %lld of block %lld outside [0, %lld)", a,
                    b, c, d);
      break;
    case kDevIndexOrder:
      std::snprintf(what, sizeof what,
                    "param%lld: the indices of block %lld do not ascend at entry %lld (index "
                    "%lld); the GPU kernels take each run in ascending order, as the select "
                    "writes it", a, b, c, d);
      break;
    default:
      code = kErrInternal;
      std::snprintf(what, sizeof what, "unknown device error %d", error);
  }
  // failures of other calls while this one was pending (rare: read synchronously)
  DeviceClaim claim{0, 0};
  cudaMemcpy(&claim, g_claim, sizeof claim, cudaMemcpyDeviceToHost);
  char more[96] = "";
  if (claim.dropped > 0)
    std::snprintf(more, sizeof more, "; %u later call(s) were refused too", claim.dropped);
  std::snprintf(message, size,
                "%s: %s (found on the device: that call changed none of its inputs and "
                "marked its outputs refused%s)", site_name(site), what, more);
  s->error = kDevOk;
  cudaMemset(g_claim, 0, sizeof(DeviceClaim));
  return code;
}

}  // namespace

DeviceStatus *device_status(DeviceClaim **claim) {
  std::call_once(g_status_once, [] {
    void *host = nullptr, *device = nullptr, *claimed = nullptr;
    cudaError_t e = cudaHostAlloc(&host, sizeof(DeviceStatus),
                                  cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(&device, host, 0);
    if (e == cudaSuccess) e = cudaMalloc(&claimed, sizeof(DeviceClaim));
    if (e == cudaSuccess) e = cudaMemset(claimed, 0, sizeof(DeviceClaim));
    if (e != cudaSuccess) {
      std::snprintf(g_status_failure, sizeof g_status_failure,
                    "cannot set up the device status record (%s)", cudaGetErrorString(e));
      return;
    }
    g_status_host = static_cast<DeviceStatus *>(host);
    *g_status_host = DeviceStatus{kDevOk, 0, 0, 0, 0, 0};
    g_status_device = static_cast<DeviceStatus *>(device);
    g_claim = static_cast<DeviceClaim *>(claimed);
    int dev = 0;
    cudaMemPool_t pool;
    uint64_t keep = kPoolKeep, now = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess ||
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &now) != cudaSuccess ||
        (now < keep &&
         cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess))
      cudaGetLastError();  // a device without memory pools: our call's error, cleared
  });
  if (g_status_device == nullptr) fail(kErrInternal, "%s", g_status_failure);
  if (claim != nullptr) *claim = g_claim;
  return g_status_device;
}

int take_device_error(const AotCall &c) {
  if (device_status() == nullptr) return c.fail(kErrInternal, "%s", msopt_last_error());
  char message[480];
  const int code = take_pending(message, sizeof message);
  if (code == kOk) return kOk;
  return c.fail(static_cast<Status>(code), "an earlier call failed: %s", message);
}

void mark_done(const Report &r, float *done, cudaStream_t stream) {
  mark_done_kernel<<<1, 1, 0, stream>>>(r, done);
}

void mark_refused(const Report &r, int32_t *idx, float *val, int64_t n, cudaStream_t stream) {
  if (n > 0)
    mark_refused_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(r, idx, val, n);
}

int check_launches(const AotCall &c) {
  const cudaError_t e = cudaPeekAtLastError();
  if (e == cudaSuccess) return kOk;
  return c.fail(e == cudaErrorMemoryAllocation ? kErrNoMem : kErrInternal,
                "CUDA error after launching its kernels (from them or earlier work on this "
                "thread): %s", cudaGetErrorString(e));
}

int check_cuda(const AotCall &c, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return kOk;
  return c.fail(e == cudaErrorMemoryAllocation ? kErrNoMem : kErrInternal, "%s: %s", what,
                cudaGetErrorString(e));
}

bool dependent_launch_supported() {
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices];  // 0 unknown, 1 no, 2 yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (device >= 0 && device < kDevices && known[device].load() != 0) return known[device] == 2;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (device >= 0 && device < kDevices) known[device] = major >= 9 ? 2 : 1;
  return major >= 9;
}

std::vector<int64_t> block_map(const std::vector<int64_t> &n) {
  std::vector<int64_t> first(n.size() + 1, 0);
  for (size_t j = 0; j < n.size(); ++j) first[j + 1] = first[j] + (n[j] + kChunk - 1) / kChunk;
  return first;
}

Workspace::~Workspace() {
  if (base_ == nullptr) return;
  if (pooled_) {
    cudaFreeAsync(base_, stream_);
  } else {
    cudaStreamSynchronize(stream_);
    cudaFree(base_);
  }
}

int Workspace::allocate(const AotCall &c) {
  if (size_ == 0) return kOk;
  void *p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, size_, stream_);
  if (e == cudaErrorNotSupported) {  // no memory pools on this device or driver
    cudaGetLastError();
    pooled_ = false;
    e = cudaMalloc(&p, size_);
  }
  if (e != cudaSuccess) return check_cuda(c, e, "workspace");
  base_ = static_cast<char *>(p);
  return kOk;
}

int Workspace::upload(const AotCall &c, size_t at, const void *host, size_t bytes) {
  return check_cuda(c, cudaMemcpyAsync(base_ + at, host, bytes, cudaMemcpyHostToDevice, stream_),
                    "upload");
}

int Workspace::zero(const AotCall &c, size_t at, size_t bytes) {
  return check_cuda(c, cudaMemsetAsync(base_ + at, 0, bytes, stream_), "memset");
}

}  // namespace cuda
}  // namespace msopt

// The AOT kernel entries of this library, space-separated (a subset of the
// CPU library's msopt_aot_kernels(), with the same declarations).
MSOPT_API const char *msopt_cuda_kernels(void) {
  return "ms_optim_lamb ms_optim_sumsq ms_optim_dgc_select_multi ms_optim_dgc_propose_multi "
         "ms_optim_dgc_take_multi ms_optim_dgc_apply_multi";
}

// Waits for `stream` (a cudaStream_t; null: the legacy default stream), then
// returns kOk or the failure a kernel found in a value only the device reads
// (msopt_last_error() says which call and what), clearing it.
MSOPT_API int msopt_cuda_status(void *stream) {
  if (msopt::cuda::device_status() == nullptr) return msopt::kErrInternal;
  const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess)
    return msopt::fail(msopt::kErrInternal, "msopt_cuda_status: %s", cudaGetErrorString(e));
  char message[480];
  const int code = msopt::cuda::take_pending(message, sizeof message);
  if (code != msopt::kOk) return msopt::fail(static_cast<msopt::Status>(code), "%s", message);
  return msopt::kOk;
}

// The current device's name and compute capability ("NVIDIA H100 80GB HBM3, sm_90"),
// or the CUDA error when there is none.
MSOPT_API const char *msopt_cuda_device(void) {
  thread_local char text[320];
  int device = 0;
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) {
    std::snprintf(text, sizeof text, "no CUDA device (%s)", cudaGetErrorString(e));
    return text;
  }
  std::snprintf(text, sizeof text, "%s, sm_%d%d", prop.name, prop.major, prop.minor);
  return text;
}

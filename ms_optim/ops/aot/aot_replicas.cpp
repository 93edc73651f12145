// MindSpore AOT adapters of DGCMomentum's agreement between workers: the check
// that every worker holds the same model, step and state before anything is
// exchanged (ms_optim_check_replicas), and the digest of the parameters it
// compares (ms_optim_digest).  The tensors each takes are declared in
// core/contract.h.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "aot/call.h"
#include "core/common.h"
#include "core/kernels.h"

namespace msopt {
namespace {

// A parameter's residual kind, as DGCMomentum saves it per parameter
// (dgc_residual_kind; ms_optim/dgc/checkpoints.py): no residual v (a parameter
// sent dense, whose u is the momentum of the workers' mean gradient), residuals
// of gradients, or residuals of learning-rate-scaled gradients.
constexpr int32_t kResidualNone = 0, kResidualGrad = 1, kResidualLrScaled = 2;

const char *residual_kind_name(int32_t kind) {
  switch (kind) {
    case kResidualNone: return "no residuals";
    case kResidualGrad: return "residuals of gradients";
    default: return "residuals of learning-rate-scaled gradients";
  }
}

// Whether residuals of kind `saved` can be stepped on as kind `mine`: the same
// kind, or a parameter sent dense that this run starts compressing in the bucket
// (its momentum carries over, as at rampup_begin_step).  Residuals dropped (a
// kind sent dense now) would lose the update they hold; the other kind
// (learning rate folded in or not) would apply each entry at lr times, or 1/lr
// times, its size.
bool residuals_resumable(int32_t saved, int32_t mine) {
  return saved == mine || (saved == kResidualNone && mine == kResidualGrad);
}

// roles' bits, per parameter: this run's dense_params names it; it is below the
// size DGC compresses alone (the bucket's, when there is one); sparsity="auto" sends
// it dense, dense_params not given (ms_optim/dgc/auto.py's dense_head).
constexpr int32_t kRoleAskedDense = 1, kRoleSmall = 2, kRoleAutoDense = 4;

// A worker's row of the gathered signatures ends with kStateValues values: its
// optimizer state's world size, the rank that saved it and a 64-bit digest of
// its residual kinds, then the step the caller compiled the step's branch for
// (-1 when the graph branches on the device).  The values before them are the
// model's signature and the step (global_step).
constexpr int64_t kStateValues = 5;

// The refusals' advice, after their first clause.
constexpr const char *kResizeAdvice =
    "convert the checkpoints with ms_optim.dgc.resize_checkpoints(files, world_size=%d, "
    "dest=...) and load those (docs/dgc.md#resuming-at-another-number-of-workers)";
constexpr const char *kOneSaveAdvice = "resume every worker from the checkpoints of one save";

// The refusal of parameter j's residuals of kind saved[j], which this run cannot
// step on as mine[j]: what to construct the optimizer with to resume them, from
// the whole state's kinds (any learning-rate-scaled, any small parameter's) and
// j's roles.
int refuse_residuals(const AotCall &c, const int32_t *saved, const int32_t *mine,
                     const int32_t *roles, const char *const *names, int64_t n, int64_t j) {
  bool folds = false, bucket = false;
  for (int64_t i = 0; i < n; ++i) {
    folds = folds || saved[i] == kResidualLrScaled;
    bucket = bucket || (saved[i] != kResidualNone && (roles[i] & kRoleSmall));
  }
  char now[128], dense[512] = "";
  if (mine[j] == kResidualNone)
    std::snprintf(now, sizeof now, "this run sends it dense, which would drop the update they hold");
  else
    std::snprintf(now, sizeof now, "this run would step %s", residual_kind_name(mine[j]));
  if (roles[j] & kRoleAskedDense)
    std::snprintf(dense, sizeof dense, ", without '%s' in dense_params", names[j]);
  else if (roles[j] & kRoleAutoDense)
    std::snprintf(dense, sizeof dense,
                  ", with dense_params=[] (sparsity=\"auto\" sends '%s' dense without it)",
                  names[j]);
  else if (saved[j] == kResidualNone && !(roles[j] & kRoleSmall))
    std::snprintf(dense, sizeof dense, ", with '%s' in dense_params", names[j]);
  return c.fail(kErrReplica,
                "the optimizer state holds %s for parameter '%s' and %s: construct the "
                "optimizer with lr_in_residuals=%s and %s%s, as the state was saved, to resume "
                "from it (docs/dgc.md#resuming-with-other-settings)",
                residual_kind_name(saved[j]), names[j], now, folds ? "True" : "False",
                bucket ? "a bucket_sparsity" : "bucket_sparsity=None", dense);
}

// signatures int32[R*W] (every worker's row, W values each, gathered in rank
// order), width int32[1] = W, world int32[2], residuals int32[2n], names uint8,
// roles int32[n] -> ok int32[1] = 1.  Fails with kErrReplica when world's two
// sizes differ (the residuals were saved by another number of workers), when a
// parameter's residual kind in the state (residuals' first n values) cannot be
// stepped on as this run's kind (its last n), and when the rows differ: after
// printing every row to stderr when the workers disagree on the model or the
// step (their exchange buffers would not match, and collectives on mismatched
// buffers hang or corrupt memory), and naming the rank when a worker loaded
// another optimizer state than rank 0 or another rank's state than its own (a
// worker whose row is row r must hold rank r's residuals).  Every worker sees
// every row, so a state that one worker refuses is refused by every worker.  The
// messages are DGCMomentum's errors, naming the parameter and what to do.  Fails
// with kErrStale, last, when a worker's branch was compiled for another step than
// the rows' (its caller reads global_step again and retries).
int check_replicas_body(const AotCall &c) {
  using S = sig::ms_optim_check_replicas;
  for (int s : {S::signatures, S::width, S::world, S::residuals, S::roles, S::ok})
    MSOPT_TRY(c.require_dtype(s, "int32"));
  MSOPT_TRY(c.require_dtype(S::names, "uint8"));
  MSOPT_CHECK(c, c.numel(S::width) == 1 && c.numel(S::ok) == 1, kErrSize,
              "width and ok must be int32[1], got %lld and %lld elements",
              static_cast<long long>(c.numel(S::width)), static_cast<long long>(c.numel(S::ok)));
  MSOPT_CHECK(c, c.numel(S::world) == 2, kErrSize,
              "world must be int32[2] (the state's world size, this run's), got %lld elements",
              static_cast<long long>(c.numel(S::world)));
  const int64_t kinds = c.numel(S::residuals), n = kinds / 2;
  MSOPT_CHECK(c, kinds >= 2 && kinds % 2 == 0, kErrSize,
              "residuals must be int32[2n] (the state's residual kind per parameter, this "
              "run's), got %lld elements", static_cast<long long>(kinds));
  MSOPT_CHECK(c, c.numel(S::roles) == n, kErrSize,
              "roles must have %lld elements (one per parameter), got %lld",
              static_cast<long long>(n), static_cast<long long>(c.numel(S::roles)));
  // the names: n NUL-ended strings
  const char *text = c.ptr<char>(S::names);
  const int64_t bytes = c.numel(S::names);
  std::vector<const char *> names;
  for (int64_t at = 0; at < bytes; at += static_cast<int64_t>(std::strlen(text + at)) + 1) {
    MSOPT_CHECK(c, std::memchr(text + at, '\0', static_cast<size_t>(bytes - at)) != nullptr,
                kErrValue, "names must end with a NUL byte");
    names.push_back(text + at);
  }
  MSOPT_CHECK(c, static_cast<int64_t>(names.size()) == n, kErrSize,
              "names must hold %lld NUL-ended names (one per parameter), got %lld",
              static_cast<long long>(n), static_cast<long long>(names.size()));
  // residuals saved by another number of workers: stepping on would drop or double them
  const int32_t *world = c.ptr<int32_t>(S::world);
  if (world[0] != world[1]) {
    char advice[256];
    std::snprintf(advice, sizeof advice, kResizeAdvice, world[1]);
    return c.fail(kErrReplica,
                  "the optimizer state holds the residuals of %d worker(s) and this run has "
                  "%d: %s", world[0], world[1], advice);
  }
  const int32_t *saved = c.ptr<int32_t>(S::residuals), *mine = saved + n;
  const int32_t *roles = c.ptr<int32_t>(S::roles);
  for (int64_t j = 0; j < n; ++j)
    MSOPT_CHECK(c, saved[j] >= kResidualNone && saved[j] <= kResidualLrScaled, kErrValue,
                "the optimizer state's dgc_residual_kind of parameter '%s' is %d, not a "
                "residual kind (0, 1 or 2), which DGCMomentum does not write: load a "
                "checkpoint that it saved", names[j], saved[j]);
  for (int64_t j = 0; j < n; ++j)
    MSOPT_CHECK(c, mine[j] >= kResidualNone && mine[j] <= kResidualLrScaled, kErrValue,
                "residuals[%lld] is %d, not a residual kind (0, 1 or 2)",
                static_cast<long long>(n + j), mine[j]);
  for (int64_t j = 0; j < n; ++j)
    if (!residuals_resumable(saved[j], mine[j]))
      return refuse_residuals(c, saved, mine, roles, names.data(), n, j);
  const int64_t total = c.numel(S::signatures), width = c.ptr<int32_t>(S::width)[0];
  MSOPT_CHECK(c, width > kStateValues && total % width == 0, kErrValue,
              "%lld signature values are not rows of width %lld (more than %lld)",
              static_cast<long long>(total), static_cast<long long>(width),
              static_cast<long long>(kStateValues));
  const int32_t *sig = c.ptr<int32_t>(S::signatures);
  const int64_t ranks = total / width, model = width - kStateValues;
  // whether rank r's values [lo, hi) differ from rank 0's
  const auto differs = [&](int64_t r, int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j)
      if (sig[r * width + j] != sig[j]) return true;
    return false;
  };
  for (int64_t r = 1; r < ranks; ++r) {
    if (!differs(r, 0, model)) continue;
    std::fprintf(stderr, "ms_optim: DGCMomentum workers were built with different models; "
                 "signatures (parameters, elements, hash of shapes and settings, step, then "
                 "the state's world size, rank and digest of residual kinds) by rank:\n");
    for (int64_t w = 0; w < ranks; ++w) {
      std::fprintf(stderr, "  rank %lld:", static_cast<long long>(w));
      for (int64_t j = 0; j < width; ++j) std::fprintf(stderr, " %d", sig[w * width + j]);
      std::fprintf(stderr, "\n");
    }
    return c.fail(kErrReplica,
                  "the workers disagree on the model or the step (every rank's signature is "
                  "printed above): build the same network and optimizer on every worker, "
                  "with the same settings, and start them at the same step");
  }
  for (int64_t r = 1; r < ranks; ++r)
    MSOPT_CHECK(c, !differs(r, model, model + 1), kErrReplica,
                "rank %lld's optimizer state holds the residuals of %d worker(s) and rank 0's "
                "of %d: %s", static_cast<long long>(r), sig[r * width + model], sig[model],
                kOneSaveAdvice);
  for (int64_t r = 0; r < ranks; ++r)
    MSOPT_CHECK(c, sig[r * width + model + 1] == r, kErrReplica,
                "rank %lld's optimizer state holds the residuals of rank %d: load each "
                "worker's own checkpoint (rank %lld the file that rank %lld saved, e.g. "
                "f'rank{get_rank()}.ckpt'); to resume at another number of workers, convert "
                "the checkpoints with ms_optim.dgc.resize_checkpoints "
                "(docs/dgc.md#resuming-at-another-number-of-workers)",
                static_cast<long long>(r), sig[r * width + model + 1],
                static_cast<long long>(r), static_cast<long long>(r));
  for (int64_t r = 1; r < ranks; ++r)
    MSOPT_CHECK(c, !differs(r, model + 2, model + 4), kErrReplica,
                "rank %lld's optimizer state holds other residual kinds than rank 0's: %s",
                static_cast<long long>(r), kOneSaveAdvice);
  // a branch compiled for another step (global_step was set since the caller last read
  // it): every worker fails, and each caller reads global_step and runs the step again
  for (int64_t r = 0; r < ranks; ++r) {
    const int32_t expected = sig[r * width + model + 4];
    MSOPT_CHECK(c, expected < 0 || expected == sig[model - 1], kErrStale,
                "rank %lld compiled the step for step %d, and global_step is %d",
                static_cast<long long>(r), expected, sig[model - 1]);
  }
  *c.ptr<int32_t>(S::ok) = 1;
  return kOk;
}

// splitmix64's finalizer: a bijection of 64-bit words that spreads every input bit.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Order-free digest of `bytes` bytes: the sum of mix64(word ^ mix64(position + salt)),
// so threads may add their parts in any order and get the same bits.
uint64_t digest_bytes(const unsigned char *data, int64_t bytes, uint64_t salt) {
  const int64_t words = bytes / 8;
  uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) \
    num_threads(kernel_threads()) if (words >= kParallelMin)
  for (int64_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, data + 8 * i, 8);
    sum += mix64(w ^ mix64(static_cast<uint64_t>(i) + salt));
  }
  uint64_t tail = 0;
  std::memcpy(&tail, data + 8 * words, static_cast<size_t>(bytes - 8 * words));
  return sum + mix64(tail ^ mix64(static_cast<uint64_t>(words) + salt)) + static_cast<uint64_t>(bytes);
}

// p (K tensors of one dtype) -> digest int32[2]: a 64-bit digest of their
// bytes and sizes (in input order).  Workers compare digests of their
// parameters to skip broadcasting a model they already share.
int digest_body(const AotCall &c) {
  using S = sig::ms_optim_digest;
  MSOPT_TRY(c.require_dtype(S::digest, "int32"));
  MSOPT_CHECK(c, c.numel(S::digest) == 2, kErrSize, "digest must have 2 element(s), got %lld",
              static_cast<long long>(c.numel(S::digest)));
  int64_t total = 0;
  for (int i = 0; i < c.K(); ++i) {
    const int64_t bytes = element_bytes(c.dtype(S::p, i));
    MSOPT_CHECK(c, bytes != 0, kErrDtype, "p%d has unsupported dtype %s", i, c.dtype(S::p, i));
    total += c.numel(S::p, i) * bytes;
  }
  const ParallelSection section(total / 8);
  uint64_t h = 0;
  for (int i = 0; i < c.K(); ++i) {
    const uint64_t salt = mix64(0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(i + 1));
    h = mix64(h ^ digest_bytes(c.ptr<unsigned char>(S::p, i),
                               c.numel(S::p, i) * element_bytes(c.dtype(S::p, i)), salt));
  }
  int32_t *o = c.ptr<int32_t>(S::digest);
  o[0] = static_cast<int32_t>(static_cast<uint32_t>(h));
  o[1] = static_cast<int32_t>(static_cast<uint32_t>(h >> 32));
  return kOk;
}

}  // namespace
}  // namespace msopt

MSOPT_AOT_ENTRY(ms_optim_check_replicas, msopt::check_replicas_body)
MSOPT_AOT_ENTRY(ms_optim_digest, msopt::digest_body)

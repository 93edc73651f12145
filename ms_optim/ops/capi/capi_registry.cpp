// The C library's handles: optimizers behind opaque tokens in a registry, so a
// stale or made-up handle is an error, not a crash.
#include <shared_mutex>
#include <unordered_map>

#include "capi/capi_internal.h"

namespace msopt {
namespace capi {
namespace {

Buffer zeroed(int64_t bytes) {
  return Buffer(static_cast<unsigned char *>(std::calloc(static_cast<size_t>(bytes), 1)));
}

using Live = std::unordered_map<uintptr_t, std::shared_ptr<Optimizer>>;

struct Registry {
  std::shared_mutex mu;
  Live live;
  uintptr_t next = 1;
};

Registry &registry() {
  static Registry *r = new Registry;  // never destroyed: safe to use during exit
  return *r;
}

// The registry entry of handle `h`, or fails (null pointer, released, never
// created); the caller holds r.mu.
int find_live(const char *fn, Registry &r, msopt_optimizer *h, Live::iterator *out) {
  if (h == nullptr) return fail(kErrNull, "%s: o is NULL", fn);
  *out = r.live.find(reinterpret_cast<uintptr_t>(h));
  if (*out == r.live.end())
    return fail(kErrHandle, "%s: o (%p) is not a live optimizer handle (released or never "
                "created)", fn, static_cast<void *>(h));
  return kOk;
}

}  // namespace

std::shared_ptr<Optimizer> make_optimizer(Algo algo, int dtype, int64_t numel, int64_t row_width,
                                          const Hyper &h) {
  auto o = std::make_shared<Optimizer>();
  o->algo = algo;
  o->dtype = dtype;
  o->numel = numel;
  o->row_width = row_width;
  o->nrows = row_width > 0 ? numel / row_width : 1;
  o->width = row_width > 0 ? row_width : numel;
  o->h = h;
  o->reg = is_float(dtype) && (h.l1 > 0.0 || h.l2 > 0.0);
  o->nslots = num_slots(algo, dtype);
  o->param = zeroed(o->bytes());
  if (!o->param) return {};
  for (int i = 0; i < o->nslots; ++i) {
    o->slot[i] = zeroed(o->bytes());
    if (!o->slot[i]) return {};
  }
  o->reg_step.reset(static_cast<int64_t *>(std::calloc(static_cast<size_t>(o->nrows), 8)));
  if (!o->reg_step) return {};
  return o;
}

msopt_optimizer *register_handle(std::shared_ptr<Optimizer> o) {
  Registry &r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);
  const uintptr_t token = r.next++ << 4;
  r.live.emplace(token, std::move(o));
  return reinterpret_cast<msopt_optimizer *>(token);
}

int lookup(const char *fn, msopt_optimizer *h, std::shared_ptr<Optimizer> *out) {
  Registry &r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mu);
  Live::iterator it;
  if (int rc = find_live(fn, r, h, &it)) return rc;
  *out = it->second;
  return kOk;
}

int release_handle(const char *fn, msopt_optimizer *h) {
  std::shared_ptr<Optimizer> victim;  // destroyed after the registry lock is released
  Registry &r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);
  Live::iterator it;
  if (int rc = find_live(fn, r, h, &it)) return rc;
  victim = std::move(it->second);
  r.live.erase(it);
  return kOk;
}

}  // namespace capi
}  // namespace msopt

// The C library's state blob (msopt_get_state / msopt_restore).
//
// Little-endian, version 1 (docs/capi.md, "State format"):
//   0   char[8] "MSOPTSTA"        8  u32 version (1)      12 u32 header bytes (160)
//   16  u32 optimizer (0 sgd, 1 momentum, 2 adagrad, 3 adam, 4 lamb)
//   20  u32 dtype                 24 i64 numel            32 i64 row_width
//   40  i64 step                  48 u32 flags (1 nesterov, 2 lr_policy linear)
//   52  u32 nslots                56 f64[10] lr, momentum, beta1, beta2, eps, weight_decay,
//                                            l1, l2, lr_decay_a, lr_decay_b
//   136 f64 beta1_power           144 f64 beta2_power     152 i64 nreg (rows: 1 if flat)
//   160 parameter (numel elements), then nslots buffers of numel elements
//       (momentum: velocity; adagrad: accumulator; adam, lamb: m then v),
//       then nreg i64 (the step each row's regularization has reached)
//   end-4 u32 CRC-32 (zlib's) of every byte before it
#include <cstdio>
#include <initializer_list>
#include <cstring>

#include "capi/capi_internal.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the state format is little-endian");

namespace msopt {
namespace capi {
namespace {

constexpr char kMagic[8] = {'M', 'S', 'O', 'P', 'T', 'S', 'T', 'A'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kHeaderBytes = 160;
constexpr uint32_t kFlagNesterov = 1, kFlagLinear = 2;

struct CrcTable {
  uint32_t t[8][256];
};

constexpr CrcTable make_crc_table() {
  CrcTable c{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t r = i;
    for (int k = 0; k < 8; ++k) r = (r & 1u) ? (r >> 1) ^ 0xEDB88320u : r >> 1;
    c.t[0][i] = r;
  }
  for (int s = 1; s < 8; ++s)
    for (uint32_t i = 0; i < 256; ++i) c.t[s][i] = (c.t[s - 1][i] >> 8) ^ c.t[0][c.t[s - 1][i] & 0xffu];
  return c;
}
constexpr CrcTable kCrc = make_crc_table();

// CRC-32 (polynomial 0xEDB88320, as zlib.crc32), eight bytes at a time.
uint32_t crc32(const unsigned char *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  const auto &t = kCrc.t;
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^
        t[3][hi & 0xffu] ^ t[2][(hi >> 8) & 0xffu] ^ t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) c = t[0][(c ^ *p) & 0xffu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

template <class V>
void put(unsigned char *b, int64_t off, V v) {
  std::memcpy(b + off, &v, sizeof v);
}
template <class V>
V get(const unsigned char *b, int64_t off) {
  V v;
  std::memcpy(&v, b + off, sizeof v);
  return v;
}


// The header as read or written.
struct Header {
  char magic[8];
  uint32_t version, header_bytes, algo, dtype;
  int64_t numel, row_width, step;
  uint32_t flags, nslots;
  double hyper[kNumFields];  // kFields' values, in that order
  double beta1_power, beta2_power;
  int64_t nreg;
};

// Calls visit(offset, field) on every field of h in blob order: the one table
// of the header's offsets, read by deserialize and written by serialize.
template <class H, class Visit>
constexpr void header_fields(H &h, Visit &&visit) {
  visit(0, h.magic);
  visit(8, h.version);
  visit(12, h.header_bytes);
  visit(16, h.algo);
  visit(20, h.dtype);
  visit(24, h.numel);
  visit(32, h.row_width);
  visit(40, h.step);
  visit(48, h.flags);
  visit(52, h.nslots);
  visit(56, h.hyper);
  visit(136, h.beta1_power);
  visit(144, h.beta2_power);
  visit(152, h.nreg);
}

// The fields tile [0, kHeaderBytes) without gaps or overlaps.
constexpr bool header_is_tiled() {
  Header h{};
  int64_t end = 0;
  bool ok = true;
  header_fields(h, [&](int64_t off, const auto &f) {
    ok = ok && off == end;
    end = off + static_cast<int64_t>(sizeof f);
  });
  return ok && end == kHeaderBytes;
}
static_assert(header_is_tiled(), "header_fields must cover the header exactly");

// Calls copy(offset, buffer, bytes) on the buffers after the header, in blob
// order (parameter, slots, regularization steps); returns the CRC's offset.
template <class Copy>
int64_t each_buffer(const Optimizer &o, Copy &&copy) {
  int64_t off = kHeaderBytes;
  copy(off, o.param.get(), o.bytes());
  off += o.bytes();
  for (int i = 0; i < o.nslots; ++i) {
    copy(off, o.slot[i].get(), o.bytes());
    off += o.bytes();
  }
  copy(off, reinterpret_cast<unsigned char *>(o.reg_step.get()), o.nrows * 8);
  return off + o.nrows * 8;
}

// Total blob size for these fields, or -1 when it would not fit in int64.
int64_t state_size(int64_t numel, int dtype, int nslots, int64_t nreg) {
  int64_t data = 0, regs = 0, total = 0;
  if (__builtin_mul_overflow(numel, kDtypeBytes[dtype] * (1 + nslots), &data) ||
      __builtin_mul_overflow(nreg, int64_t{8}, &regs) ||
      __builtin_add_overflow(data, regs, &total) ||
      __builtin_add_overflow(total, kHeaderBytes + 4, &total))
    return -1;
  return total;
}

int state_error(const char *what) {
  return fail(kErrState, "msopt_restore: %s", what);
}

}  // namespace

int serialize(const Optimizer &o, void **state, int64_t *state_len) {
  const int64_t size = state_size(o.numel, o.dtype, o.nslots, o.nrows);
  if (size < 0) return fail(kErrSize, "msopt_get_state: the state would exceed 2^63 bytes");
  unsigned char *b = static_cast<unsigned char *>(std::malloc(static_cast<size_t>(size)));
  if (b == nullptr) return fail(kErrNoMem, "msopt_get_state: out of memory (%lld bytes)",
                                static_cast<long long>(size));
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.header_bytes = static_cast<uint32_t>(kHeaderBytes);
  h.algo = o.algo;
  h.dtype = static_cast<uint32_t>(o.dtype);
  h.numel = o.numel;
  h.row_width = o.row_width;
  h.step = o.step;
  h.flags = (o.h.nesterov ? kFlagNesterov : 0u) | (o.h.linear ? kFlagLinear : 0u);
  h.nslots = static_cast<uint32_t>(o.nslots);
  for (int i = 0; i < kNumFields; ++i) h.hyper[i] = o.h.*kFields[i].field;
  h.beta1_power = o.beta1_power;
  h.beta2_power = o.beta2_power;
  h.nreg = o.nrows;
  header_fields(h, [b](int64_t off, const auto &f) { std::memcpy(b + off, &f, sizeof f); });
  const int64_t end = each_buffer(o, [b](int64_t off, const unsigned char *buf, int64_t bytes) {
    std::memcpy(b + off, buf, static_cast<size_t>(bytes));
  });
  put<uint32_t>(b, end, crc32(b, static_cast<size_t>(end)));
  *state = b;
  *state_len = size;
  return kOk;
}

int deserialize(const unsigned char *b, int64_t len, std::shared_ptr<Optimizer> *out) {
  char msg[256];
  if (len < kHeaderBytes + 4) {
    std::snprintf(msg, sizeof msg, "state_len %lld is shorter than the %lld-byte minimum "
                  "(truncated blob?)", static_cast<long long>(len),
                  static_cast<long long>(kHeaderBytes + 4));
    return state_error(msg);
  }
  Header hd{};
  header_fields(hd, [b](int64_t off, auto &f) { std::memcpy(&f, b + off, sizeof f); });
  if (std::memcmp(hd.magic, kMagic, 8) != 0)
    return state_error("not an ms_optim state (bad magic)");
  if (hd.version != kVersion) {
    std::snprintf(msg, sizeof msg, "unsupported state version %u (this library reads %u)",
                  hd.version, kVersion);
    return state_error(msg);
  }
  if (hd.header_bytes != kHeaderBytes) return state_error("bad header size");
  const uint32_t algo = hd.algo, dtype = hd.dtype, flags = hd.flags, nslots = hd.nslots;
  const int64_t numel = hd.numel, row_width = hd.row_width, step = hd.step, nreg = hd.nreg;
  if (algo >= kNumAlgos) {
    std::snprintf(msg, sizeof msg, "unknown optimizer id %u", algo);
    return state_error(msg);
  }
  if (dtype >= static_cast<uint32_t>(kNumDtypes)) {
    std::snprintf(msg, sizeof msg, "unknown dtype %u", dtype);
    return state_error(msg);
  }
  if (numel <= 0) return state_error("numel must be > 0");
  if (row_width < 0 || (row_width > 0 && numel % row_width != 0))
    return state_error("row_width does not divide numel");
  if (step < 0) return state_error("negative step");
  if (flags & ~(kFlagNesterov | kFlagLinear)) return state_error("unknown flags");
  if (static_cast<int>(nslots) != num_slots(static_cast<Algo>(algo), static_cast<int>(dtype)))
    return state_error("buffer count does not match the optimizer");
  const int64_t nrows = row_width > 0 ? numel / row_width : 1;
  if (nreg != nrows) return state_error("row count does not match the shape");
  const int64_t size = state_size(numel, static_cast<int>(dtype), static_cast<int>(nslots), nreg);
  if (size < 0) {
    std::snprintf(msg, sizeof msg, "the header describes more bytes than an int64 counts "
                  "(numel %lld; corrupted blob)", static_cast<long long>(numel));
    return state_error(msg);
  }
  if (size != len) {
    std::snprintf(msg, sizeof msg, "state_len is %lld but the header describes %lld bytes "
                  "(truncated, extended or corrupted blob)", static_cast<long long>(len),
                  static_cast<long long>(size));
    return state_error(msg);
  }
  const uint32_t crc = get<uint32_t>(b, len - 4);
  if (crc32(b, static_cast<size_t>(len - 4)) != crc)
    return state_error("checksum mismatch (corrupted blob)");

  const Algo a = static_cast<Algo>(algo);
  const Hyper defaults = default_hyper(a);
  Hyper h;
  for (int i = 0; i < kNumFields; ++i) {
    const Field &f = kFields[i];
    h.*f.field = hd.hyper[i];
    // keys the optimizer does not use hold their defaults, as msopt_get_state writes them
    // (they still enter unused arithmetic, e.g. beta1 into beta1_power for sgd)
    if (!(kAlgoKeys[a] & bit(f.key)) &&
        std::memcmp(&(h.*f.field), &(defaults.*f.field), sizeof(double)) != 0) {
      std::snprintf(msg, sizeof msg, "%s = %.17g does not apply to %s and must be its default %g",
                    kKeyNames[f.key], h.*f.field, kAlgoNames[a], defaults.*f.field);
      return state_error(msg);
    }
  }
  h.nesterov = (flags & kFlagNesterov) != 0;
  h.linear = (flags & kFlagLinear) != 0;
  if (check_hyper("msopt_restore: state", a, static_cast<int>(dtype), h) != kOk) {
    std::snprintf(msg, sizeof msg, "invalid hyper-parameters (%s)", msopt_last_error());
    return state_error(msg);
  }
  const double beta1_power = hd.beta1_power, beta2_power = hd.beta2_power;
  for (double bp : {beta1_power, beta2_power})
    if (!(bp >= 0.0 && bp <= 1.0)) return state_error("beta power outside [0, 1]");
  if (dtype == MSOPT_FLOAT32 &&
      (static_cast<double>(static_cast<float>(beta1_power)) != beta1_power ||
       static_cast<double>(static_cast<float>(beta2_power)) != beta2_power))
    return state_error("beta power is not a float32 value");
  const unsigned char *reg = b + kHeaderBytes + numel * kDtypeBytes[dtype] * (1 + nslots);
  for (int64_t r = 0; r < nrows; ++r) {
    const int64_t s = get<int64_t>(reg, r * 8);
    if (s < 0 || s > step) return state_error("a row's regularization step is outside [0, step]");
  }
  std::shared_ptr<Optimizer> o = make_optimizer(a, static_cast<int>(dtype), numel, row_width, h);
  if (!o) return fail(kErrNoMem, "msopt_restore: out of memory");
  o->step = step;
  o->beta1_power = beta1_power;
  o->beta2_power = beta2_power;
  each_buffer(*o, [b](int64_t off, unsigned char *buf, int64_t bytes) {
    std::memcpy(buf, b + off, static_cast<size_t>(bytes));
  });
  *out = std::move(o);
  return kOk;
}

}  // namespace capi
}  // namespace msopt

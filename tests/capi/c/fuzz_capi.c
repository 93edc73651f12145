/* A fuzz loop of bad calls into the C library for parameter servers, run by
 * tests/test_capi.py under AddressSanitizer and UndefinedBehaviorSanitizer.
 *
 * usage: fuzz_capi [iterations] [seed]
 *
 * Every call made here is wrong in at least one way the library can detect
 * (NULL pointers, sizes that disagree with the handle, wrong or invalid
 * dtypes, out-of-range rows, bad optimizer names and configs, truncated,
 * extended or corrupted state blobs, stale or made-up handles).  Each must
 * return a negative MSOPT_ERR_* code with a message, and change nothing: the
 * live handles' weights and state blobs are compared with snapshots
 * throughout.  Prints "N passed, M failed" (one check per call and per
 * snapshot comparison); exits 0 only when M == 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_optim.h"

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) { /* xorshift64 */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}
static int64_t rnd_in(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

static long g_pass, g_fail, g_calls;

static void expect_error(int rc, int want, const char *what) {
  ++g_calls;
  const char *msg = msopt_last_error();
  const int ok = rc < 0 && (want == 0 || rc == want) && msg != NULL && msg[0] != '\0';
  if (ok) {
    ++g_pass;
  } else {
    ++g_fail;
    if (g_fail < 30)
      fprintf(stderr, "FAIL %s: returned %d, expected %d (%s)\n", what, rc, want, msg ? msg : "");
  }
}

static uint32_t crc32_ref(const unsigned char *p, size_t n) { /* bitwise, zlib's polynomial */
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

/* ---------------------------------------------------------- live handles -- */

enum { kHandles = 4, kRows = 6, kWidth = 5, kNumel = kRows * kWidth };

struct live {
  msopt_optimizer *o;
  msopt_dtype dtype;
  int64_t row_width;
  unsigned char weights[kNumel * 8];
  unsigned char *state;
  int64_t state_len;
};

static struct live g_live[kHandles];
static const char *const kNames[5] = {"sgd", "momentum", "adagrad", "adam", "lamb"};

static size_t dsize(msopt_dtype d) { return d == MSOPT_INT32 || d == MSOPT_UINT32 || d == MSOPT_FLOAT32 ? 4 : 8; }

static int snapshot(struct live *l, int compare) {
  unsigned char w[kNumel * 8];
  void *blob = NULL;
  int64_t len = 0;
  if (msopt_get_weights(l->o, w, kNumel) != MSOPT_OK) return 0;
  if (msopt_get_state(l->o, &blob, &len) != MSOPT_OK) return 0;
  int same = 1;
  if (compare) {
    same = memcmp(w, l->weights, kNumel * dsize(l->dtype)) == 0 && len == l->state_len &&
           memcmp(blob, l->state, (size_t)len) == 0;
    msopt_free(blob);
  } else {
    memcpy(l->weights, w, sizeof w);
    l->state = (unsigned char *)blob;
    l->state_len = len;
  }
  return same;
}

static void setup(void) {
  static const msopt_dtype dts[kHandles] = {MSOPT_FLOAT32, MSOPT_FLOAT64, MSOPT_INT32, MSOPT_FLOAT32};
  static const char *cfgs[kHandles] = {"lr=0.01,l1=0.001,l2=0.01", "lr=0.1,momentum=0.5,nesterov=true",
                                       "", "lr=0.001,weight_decay=0.1"};
  static const int algos[kHandles] = {3, 1, 0, 4};
  for (int h = 0; h < kHandles; ++h) {
    struct live *l = &g_live[h];
    double buf[kNumel];
    for (int i = 0; i < kNumel; ++i) buf[i] = 0.1 * i - 1.0;
    float fbuf[kNumel];
    int32_t ibuf[kNumel];
    for (int i = 0; i < kNumel; ++i) {
      fbuf[i] = (float)buf[i];
      ibuf[i] = i * 1000 - 7;
    }
    const void *p = dts[h] == MSOPT_FLOAT64 ? (const void *)buf
                    : dts[h] == MSOPT_INT32 ? (const void *)ibuf : (const void *)fbuf;
    l->dtype = dts[h];
    l->row_width = h == 1 ? 0 : kWidth;
    if (msopt_create(kNames[algos[h]], cfgs[h], dts[h], p, kNumel, l->row_width, &l->o) != MSOPT_OK) {
      fprintf(stderr, "setup failed: %s\n", msopt_last_error());
      exit(2);
    }
    /* a few valid steps so the state is not trivial */
    if (dts[h] == MSOPT_FLOAT32 || dts[h] == MSOPT_FLOAT64) {
      const int64_t rows[2] = {1, 4};
      for (int s = 0; s < 3; ++s) {
        msopt_update(l->o, dts[h], dts[h] == MSOPT_FLOAT64 ? (const void *)buf : (const void *)fbuf, kNumel);
        if (l->row_width) msopt_update_rows(l->o, dts[h], rows, 2, fbuf);
      }
    }
    snapshot(l, 0);
  }
}

/* ---------------------------------------------------------- bad configs -- */

static const char *const kGoodEntries[] = {"lr=0.1", "weight_decay=0.01", "l1=0", "l2=0.001",
                                           "lr_policy=const"};
static const char *const kBadEntries[] = {
    "lr=-1", "lr=nan", "lr=inf", "lr=", "=0.1", "lr", "lr=0.1.2", "lr=1e", "lr=0x10",
    "bogus=1", "LR=0.1", "momentum=2", "beta1=1", "beta2=-0.1", "eps=0", "eps=-1e-8",
    "nesterov=yes", "lr_policy=cosine", "lr_decay_a=0.1", "l1=-0.5", "weight_decay=1e400",
    "lr=0.1,lr=0.2", "", " ", "lr=1 2", "lr=\t", "momentum=0.9,momentum=0.9", "l2=abc"};

/* A config that is wrong for `algo` by construction: good entries plus one
 * entry from kBadEntries (each wrong for every optimizer: a bad value, bad
 * syntax, an unknown or repeated key, or a key no optimizer accepts with that
 * value), or "lr=0.1" plus a key that `algo` does not use. */
static void bad_config(char *out, size_t cap, int algo) {
  static const char *const foreign[5] = {",momentum=0.9", ",beta1=0.9", ",nesterov=true",
                                         ",eps=1e-8", ",nesterov=false"};
  static const int owners[5] = {1 << 1, (1 << 3) | (1 << 4), (1 << 1) | (1 << 3),
                                (1 << 2) | (1 << 3) | (1 << 4), (1 << 1) | (1 << 3)};
  const int f = (int)rnd_in(0, 4);
  if (rnd() % 4 == 0 && !(owners[f] & (1 << algo))) {
    snprintf(out, cap, "lr=0.1%s", foreign[f]);
    return;
  }
  out[0] = '\0';
  const int n = (int)rnd_in(0, 3), bad_at = (int)rnd_in(0, n);
  for (int i = 0; i <= n; ++i) {
    const char *e = i == bad_at
                        ? kBadEntries[rnd_in(0, (int)(sizeof kBadEntries / sizeof *kBadEntries) - 1)]
                        : kGoodEntries[rnd_in(0, 4)];
    if (i > 0) strncat(out, ",", cap - strlen(out) - 1);
    strncat(out, e, cap - strlen(out) - 1);
  }
}

/* --------------------------------------------------------------- blobs -- */

static void fuzz_restore(void) {
  const struct live *l = &g_live[rnd() % kHandles];
  const int64_t len = l->state_len;
  unsigned char *b = (unsigned char *)malloc((size_t)len + 64);
  memcpy(b, l->state, (size_t)len);
  int64_t blen = len;
  const int kind = (int)rnd_in(0, 5);
  if (kind == 0) { /* truncate */
    blen = rnd_in(0, len - 1);
  } else if (kind == 1) { /* extend */
    blen = len + rnd_in(1, 64);
    for (int64_t i = len; i < blen; ++i) b[i] = (unsigned char)rnd();
  } else if (kind == 2) { /* change 1..8 distinct random bytes */
    const int64_t n = rnd_in(1, 8), stride = rnd_in(1, len / 8), first = rnd_in(0, len - 1);
    for (int64_t i = 0; i < n; ++i) b[(first + i * stride) % len] ^= (unsigned char)rnd_in(1, 255);
  } else if (kind == 3 || kind == 4) { /* an invalid header field, checksum recomputed */
    static const struct { int off, size; int64_t value; } edits[] = {
        {0, 1, 'X'},   {8, 4, 2},   {8, 4, 0},    {12, 4, 128}, {16, 4, 5},  {16, 4, 0xffffffff},
        {20, 4, 6},    {20, 4, -1}, {24, 8, 0},   {24, 8, -30}, {24, 8, 31}, {24, 8, INT64_MAX / 2},
        {32, 8, 7},    {32, 8, -5}, {40, 8, -1},  {48, 4, 4},   {52, 4, 3},  {56, 8, -1},
        {152, 8, 2},   {152, 8, 7}};
    const int e = (int)rnd_in(0, (int)(sizeof edits / sizeof *edits) - 1);
    const int64_t v = edits[e].value;
    memcpy(b + edits[e].off, &v, (size_t)edits[e].size);
    if (edits[e].off == 56) { /* lr = NaN */
      const double nan = __builtin_nan("");
      memcpy(b + 56, &nan, 8);
    }
    const uint32_t c = crc32_ref(b, (size_t)(len - 4));
    memcpy(b + len - 4, &c, 4);
  } else { /* a row's regularization step beyond the step counter, a beta power > 1, or a
            * hyper-parameter out of its range or (unused by the optimizer) not its default */
    const int64_t rows = l->row_width ? kNumel / l->row_width : 1;
    const int what = (int)rnd_in(0, 2);
    if (what == 0) {
      const int64_t big = INT64_MAX - 3;
      memcpy(b + len - 4 - 8 * rnd_in(1, rows), &big, 8);
    } else if (what == 1) {
      const double two = 2.0;
      memcpy(b + 136 + 8 * rnd_in(0, 1), &two, 8);
    } else { /* momentum, beta1 or beta2 (valid or unused): 1.5 is out of range for all */
      const double bad = 1.5;
      memcpy(b + 64 + 8 * rnd_in(0, 2), &bad, 8);
    }
    const uint32_t c = crc32_ref(b, (size_t)(len - 4));
    memcpy(b + len - 4, &c, 4);
  }
  msopt_optimizer *o = NULL;
  const int rc = msopt_restore(rnd() % 16 ? (const void *)b : NULL, blen, rnd() % 16 ? &o : NULL);
  expect_error(rc, 0, "restore of a bad blob");
  if (rc == MSOPT_OK) msopt_release(o);
  free(b);
}

/* A valid blob of a float handle with its step counter set to 2^63 - 1 or
 * 2^63 - 2 (rows lagging behind by about 2^63 steps): it restores, updates
 * are refused once the counter is at its maximum, and reads catch every row
 * up without any counter overflowing (UBSan) and without replaying 2^63 steps. */
static void fuzz_step_limit(void) {
  struct live *l = &g_live[rnd() % 2 ? 0 : 3]; /* float32 with rows: adam (lazy l1/l2), lamb */
  unsigned char *b = (unsigned char *)malloc((size_t)l->state_len);
  memcpy(b, l->state, (size_t)l->state_len);
  const int64_t step = INT64_MAX - rnd_in(0, 1);
  memcpy(b + 40, &step, 8);
  const uint32_t c = crc32_ref(b, (size_t)(l->state_len - 4));
  memcpy(b + l->state_len - 4, &c, 4);
  msopt_optimizer *o = NULL;
  int ok = msopt_restore(b, l->state_len, &o) == MSOPT_OK;
  const int64_t rows[2] = {2, 2};
  if (ok && step < INT64_MAX) ok = msopt_update_rows(o, l->dtype, rows, 2, l->weights) == MSOPT_OK;
  if (ok) {
    expect_error(rnd() % 2 ? msopt_update(o, l->dtype, l->weights, kNumel)
                           : msopt_update_rows(o, l->dtype, rows, 1, l->weights),
                 MSOPT_ERR_STATE, "update at the maximum step");
    unsigned char w[kNumel * 8];
    ok = msopt_get_weights(o, w, kNumel) == MSOPT_OK;
  } else {
    ++g_calls; /* counted as the bad call it was meant to be */
  }
  if (ok) ++g_pass;
  else {
    ++g_fail;
    fprintf(stderr, "FAIL step limit: %s\n", msopt_last_error());
  }
  msopt_release(o);
  free(b);
}

/* ----------------------------------------------------------------- main -- */

int main(int argc, char **argv) {
  const long iterations = argc > 1 ? atol(argv[1]) : 12000;
  if (argc > 2) g_rng = (uint64_t)atoll(argv[2]) * 2654435761ull + 1;
  setup();
  long unchanged_checks = 0;
  double fbuf[kNumel * 2];
  for (int i = 0; i < kNumel * 2; ++i) fbuf[i] = 0.5;
  int64_t rows[16];
  char cfg[256];
  for (long it = 0; it < iterations; ++it) {
    struct live *l = &g_live[rnd() % kHandles];
    const int is_float = l->dtype == MSOPT_FLOAT32 || l->dtype == MSOPT_FLOAT64;
    const msopt_dtype other = (msopt_dtype)((l->dtype + rnd_in(1, 5)) % 6);
    const msopt_dtype invalid = (msopt_dtype)(rnd() % 2 ? rnd_in(6, 1000) : -rnd_in(1, 1000));
    msopt_optimizer *stale = (msopt_optimizer *)(uintptr_t)(rnd() | 1);
    switch (rnd() % 11) {
      case 0: { /* create: one bad argument */
        const int algo = (int)rnd_in(0, 4);
        const int what = (int)rnd_in(0, 7);
        msopt_optimizer *o = NULL;
        int rc, want;
        if (what == 0) { rc = msopt_create(NULL, "lr=1", MSOPT_FLOAT32, fbuf, 4, 0, &o); want = MSOPT_ERR_NULL; }
        else if (what == 1) { rc = msopt_create(kNames[algo], NULL, MSOPT_FLOAT32, fbuf, 4, 0, &o); want = MSOPT_ERR_NULL; }
        else if (what == 2) { rc = msopt_create(kNames[algo], "lr=1", MSOPT_FLOAT32, NULL, 4, 0, &o); want = MSOPT_ERR_NULL; }
        else if (what == 3) { rc = msopt_create(kNames[algo], "lr=1", MSOPT_FLOAT32, fbuf, 4, 0, NULL); want = MSOPT_ERR_NULL; }
        else if (what == 4) { rc = msopt_create(kNames[algo], "lr=1", invalid, fbuf, 4, 0, &o); want = MSOPT_ERR_DTYPE; }
        else if (what == 5) {
          static const int64_t huge[3] = {INT64_MAX, INT64_MAX / 32 + 1, INT64_MAX / 4};
          const int kind = (int)rnd_in(0, 2);
          const int64_t n = kind == 0 ? -rnd_in(0, 1000) : kind == 1 ? 4 : huge[rnd_in(0, 2)];
          const int64_t w = n == 4 ? (rnd() % 2 ? 3 : -rnd_in(1, 9)) : 0;
          rc = msopt_create(kNames[algo], "lr=1", MSOPT_FLOAT64, fbuf, n, w, &o);
          want = MSOPT_ERR_SIZE;
        } else if (what == 6) {
          static const char *const names[] = {"SGD", "adamw", "", "sgd ", "lamb2", "rmsprop", "ftrl"};
          rc = msopt_create(names[rnd_in(0, 6)], "lr=1", MSOPT_FLOAT32, fbuf, 4, 0, &o);
          want = MSOPT_ERR_CONFIG;
        } else {
          bad_config(cfg, sizeof cfg, algo);
          rc = msopt_create(kNames[algo], cfg, rnd() % 2 ? MSOPT_FLOAT32 : MSOPT_FLOAT64, fbuf, 4, 0, &o);
          want = MSOPT_ERR_CONFIG;
        }
        expect_error(rc, want, "create");
        if (rc == MSOPT_OK) msopt_release(o);
        if (o != NULL) expect_error(0, MSOPT_ERR_INTERNAL, "failed create wrote *out");
        break;
      }
      case 1: { /* dense update */
        const int what = (int)rnd_in(0, 4);
        int rc, want;
        if (what == 0) { rc = msopt_update(l->o, is_float ? other : l->dtype, fbuf, kNumel); want = MSOPT_ERR_DTYPE; }
        else if (what == 1) { rc = msopt_update(l->o, invalid, fbuf, kNumel); want = MSOPT_ERR_DTYPE; }
        else if (what == 2) {
          int64_t n = rnd_in(-5, kNumel * 2);
          if (n == kNumel) n = kNumel + 1;
          rc = msopt_update(l->o, l->dtype, fbuf, n);
          want = is_float ? MSOPT_ERR_SIZE : MSOPT_ERR_DTYPE;
        } else if (what == 3) { rc = msopt_update(l->o, l->dtype, NULL, kNumel); want = MSOPT_ERR_NULL; }
        else { rc = msopt_update(rnd() % 2 ? NULL : stale, l->dtype, fbuf, kNumel); want = 0; }
        expect_error(rc, want, "update");
        break;
      }
      case 2: { /* row update */
        const int what = (int)rnd_in(0, 5);
        const int64_t nr = rnd_in(1, 8);
        for (int i = 0; i < nr; ++i) rows[i] = rnd_in(0, kRows - 1);
        int rc, want = 0;
        if (what == 0) { /* one id out of range */
          rows[rnd_in(0, nr - 1)] = rnd() % 2 ? kRows + rnd_in(0, 1 << 20) : -rnd_in(1, 1 << 20);
          rc = msopt_update_rows(l->o, l->dtype, rows, nr, fbuf);
          if (is_float && l->row_width) want = MSOPT_ERR_ROW;
        } else if (what == 1) { rc = msopt_update_rows(l->o, is_float ? other : l->dtype, rows, nr, fbuf); want = MSOPT_ERR_DTYPE; }
        else if (what == 2) { /* negative, or so large that nrows * row_width overflows */
          rc = msopt_update_rows(l->o, l->dtype, rows, rnd() % 2 ? -rnd_in(1, 100) : INT64_MAX - rnd_in(0, 1000), fbuf);
        }
        else if (what == 3) { rc = msopt_update_rows(l->o, l->dtype, NULL, nr, fbuf); }
        else if (what == 4) { rc = msopt_update_rows(l->o, l->dtype, rows, nr, NULL); }
        else { rc = msopt_update_rows(stale, l->dtype, rows, nr, fbuf); want = MSOPT_ERR_HANDLE; }
        if (!is_float && what != 5) want = MSOPT_ERR_DTYPE;
        else if (is_float && l->row_width == 0 && what != 1 && what != 5) want = MSOPT_ERR_SIZE;
        expect_error(rc, want, "update_rows");
        break;
      }
      case 3: { /* apply_diff */
        const int what = (int)rnd_in(0, 3);
        int rc, want;
        if (what == 0) { rc = msopt_apply_diff(l->o, other, fbuf, kNumel); want = MSOPT_ERR_DTYPE; }
        else if (what == 1) { rc = msopt_apply_diff(l->o, invalid, fbuf, kNumel); want = MSOPT_ERR_DTYPE; }
        else if (what == 2) {
          int64_t n = rnd_in(-100, kNumel * 2);
          if (n == kNumel) n = -1;
          rc = msopt_apply_diff(l->o, l->dtype, fbuf, n);
          want = MSOPT_ERR_SIZE;
        } else { rc = msopt_apply_diff(l->o, l->dtype, NULL, kNumel); want = MSOPT_ERR_NULL; }
        expect_error(rc, want, "apply_diff");
        break;
      }
      case 4: { /* get_weights */
        unsigned char out[kNumel * 8 * 2];
        int64_t n = rnd_in(-3, kNumel * 2);
        if (n == kNumel) n = 0;
        const int rc = rnd() % 3 ? msopt_get_weights(l->o, out, n) : msopt_get_weights(l->o, NULL, kNumel);
        expect_error(rc, 0, "get_weights");
        break;
      }
      case 5: { /* get_state / info with bad pointers or handles */
        void *blob = NULL;
        int64_t len = 0;
        const int what = (int)rnd_in(0, 3);
        int rc;
        if (what == 0) rc = msopt_get_state(l->o, NULL, &len);
        else if (what == 1) rc = msopt_get_state(l->o, &blob, NULL);
        else if (what == 2) rc = msopt_get_state(stale, &blob, &len);
        else rc = msopt_info(stale, NULL, NULL, NULL, NULL);
        expect_error(rc, 0, "get_state/info");
        if (blob != NULL) msopt_free(blob);
        break;
      }
      case 6:
      case 7:
        fuzz_restore();
        break;
      case 8: { /* release: NULL, made-up, already released */
        const int what = (int)rnd_in(0, 2);
        int rc;
        if (what == 0) rc = msopt_release(NULL);
        else if (what == 1) rc = msopt_release(stale);
        else {
          msopt_optimizer *o = NULL;
          msopt_create("sgd", "lr=1", MSOPT_FLOAT32, fbuf, 2, 0, &o);
          msopt_release(o);
          rc = rnd() % 2 ? msopt_release(o) : msopt_update(o, MSOPT_FLOAT32, fbuf, 2);
        }
        expect_error(rc, 0, "release");
        break;
      }
      case 9:
        fuzz_step_limit();
        break;
      default: { /* restore with NULL or negative/short lengths */
        msopt_optimizer *o = NULL;
        const int rc = msopt_restore(l->state, -rnd_in(0, 1 << 30) + (rnd() % 2 ? 0 : 100), &o);
        expect_error(rc, MSOPT_ERR_STATE, "restore length");
        break;
      }
    }
    if (it % 200 == 199 || it == iterations - 1) {
      for (int h = 0; h < kHandles; ++h) {
        ++unchanged_checks;
        if (snapshot(&g_live[h], 1)) {
          ++g_pass;
        } else {
          ++g_fail;
          fprintf(stderr, "FAIL handle %d changed after a bad call (iteration %ld)\n", h, it);
        }
      }
    }
  }
  for (int h = 0; h < kHandles; ++h) {
    msopt_release(g_live[h].o);
    msopt_free(g_live[h].state);
  }
  printf("fuzz: %ld bad calls, %ld unchanged-state checks\n", g_calls, unchanged_checks);
  printf("%ld passed, %ld failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}

/* Tests of the C library for parameter servers, written against ms_optim.h in
 * C11 and run by tests/test_capi.py (under AddressSanitizer and
 * UndefinedBehaviorSanitizer there).  Prints "N passed, M failed"; exits 0
 * only when M == 0.
 *
 * Numerics are checked against scalar re-implementations of the rules in
 * this file (same operation order; C in ISO mode does not contract a*b+c), or
 * with values for which every operation is exact.  The elementwise sweep
 * against the numpy reference is in tests/test_capi.py. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_optim.h"

static int g_pass, g_fail;

#define CHECK(cond, ...)                                           \
  do {                                                             \
    if (cond) {                                                    \
      ++g_pass;                                                    \
    } else {                                                       \
      ++g_fail;                                                    \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                \
      fprintf(stderr, " [last error: %s]\n", msopt_last_error());  \
    }                                                              \
  } while (0)

#define CHECK_RC(call, want) \
  do {                       \
    int rc_ = (call);        \
    CHECK(rc_ == (want), "%s returned %d, expected %d", #call, rc_, (want)); \
  } while (0)

static msopt_optimizer *make(const char *opt, const char *cfg, msopt_dtype dt, const void *p,
                             int64_t n, int64_t w) {
  msopt_optimizer *o = NULL;
  CHECK_RC(msopt_create(opt, cfg, dt, p, n, w, &o), MSOPT_OK);
  return o;
}

/* ------------------------------------------------------------- numerics -- */

static void test_sgd_exact(void) {
  float p[5] = {1, 2, 3, 4, 5}, g[5] = {2, 2, 2, 2, 2}, out[5];
  msopt_optimizer *o = make("sgd", "lr=0.5", MSOPT_FLOAT32, p, 5, 0);
  CHECK_RC(msopt_update(o, MSOPT_FLOAT32, g, 5), MSOPT_OK);
  CHECK_RC(msopt_get_weights(o, out, 5), MSOPT_OK);
  for (int i = 0; i < 5; ++i) CHECK(out[i] == p[i] - 1.0f, "sgd[%d] = %g", i, out[i]);
  /* the library copied param at create: changing ours changes nothing there */
  p[0] = 100;
  CHECK_RC(msopt_get_weights(o, out, 5), MSOPT_OK);
  CHECK(out[0] == 0.0f, "param was not copied: %g", out[0]);
  CHECK_RC(msopt_release(o), MSOPT_OK);

  double pd[3] = {1, -1, 0.25}, gd[3] = {0.5, 0.25, -1}, od[3];
  o = make("sgd", "lr = 0.25 , weight_decay=0.5", MSOPT_FLOAT64, pd, 3, 0);
  CHECK_RC(msopt_update(o, MSOPT_FLOAT64, gd, 3), MSOPT_OK);
  CHECK_RC(msopt_get_weights(o, od, 3), MSOPT_OK);
  for (int i = 0; i < 3; ++i) {
    const double want = pd[i] - 0.25 * (gd[i] + 0.5 * pd[i]);
    CHECK(od[i] == want, "sgd64[%d] = %.17g, want %.17g", i, od[i], want);
  }
  CHECK_RC(msopt_release(o), MSOPT_OK);
}

static void test_momentum_adagrad_adam(void) {
  enum { N = 37 };
  float p[N], m1[N] = {0}, v1[N] = {0}, v2[N] = {0}, a1[N] = {0}, g[3][N], out[N];
  float pm[N], pa[N], pad[N];
  for (int i = 0; i < N; ++i) {
    p[i] = (float)sin(i + 1.0);
    for (int s = 0; s < 3; ++s) g[s][i] = (float)cos(3.0 * i + s);
    pm[i] = pa[i] = pad[i] = p[i];
  }
  msopt_optimizer *om = make("momentum", "lr=0.1,momentum=0.9,nesterov=true", MSOPT_FLOAT32, p, N, 0);
  msopt_optimizer *oa = make("adagrad", "lr=0.1,eps=1e-6", MSOPT_FLOAT32, p, N, 0);
  msopt_optimizer *od = make("adam", "lr=0.01,beta1=0.9,beta2=0.999,eps=1e-8,weight_decay=0.01",
                             MSOPT_FLOAT32, p, N, 0);
  float b1p = 1, b2p = 1;
  const float lr = 0.1f, mom = 0.9f, eps6 = 1e-6f;
  const float b1 = 0.9f, b2 = 0.999f, c1 = 1.0f - b1, c2 = 1.0f - b2, eps8 = 1e-8f, wd = 0.01f;
  for (int s = 0; s < 3; ++s) {
    CHECK_RC(msopt_update(om, MSOPT_FLOAT32, g[s], N), MSOPT_OK);
    CHECK_RC(msopt_update(oa, MSOPT_FLOAT32, g[s], N), MSOPT_OK);
    CHECK_RC(msopt_update(od, MSOPT_FLOAT32, g[s], N), MSOPT_OK);
    b1p = b1p * b1;
    b2p = b2p * b2;
    const float lr_t = 0.01f * sqrtf(1.0f - b2p) / (1.0f - b1p);
    for (int i = 0; i < N; ++i) {
      const float gi = g[s][i];
      v1[i] = v1[i] * mom + gi; /* momentum, Nesterov */
      pm[i] = pm[i] - (gi * lr + v1[i] * mom * lr);
      a1[i] = a1[i] + gi * gi; /* adagrad */
      pa[i] = pa[i] - lr * gi / (sqrtf(a1[i]) + eps6);
      const float gd = gi + wd * pad[i]; /* adam */
      m1[i] = b1 * m1[i] + c1 * gd;
      v2[i] = b2 * v2[i] + c2 * gd * gd;
      pad[i] = pad[i] + -lr_t * (m1[i] / (sqrtf(v2[i]) + eps8));
    }
  }
  int bad = 0;
  CHECK_RC(msopt_get_weights(om, out, N), MSOPT_OK);
  for (int i = 0; i < N; ++i) bad += memcmp(&out[i], &pm[i], 4) != 0;
  CHECK(bad == 0, "momentum: %d elements differ", bad);
  bad = 0;
  CHECK_RC(msopt_get_weights(oa, out, N), MSOPT_OK);
  for (int i = 0; i < N; ++i) bad += memcmp(&out[i], &pa[i], 4) != 0;
  CHECK(bad == 0, "adagrad: %d elements differ", bad);
  bad = 0;
  CHECK_RC(msopt_get_weights(od, out, N), MSOPT_OK);
  for (int i = 0; i < N; ++i) bad += memcmp(&out[i], &pad[i], 4) != 0;
  CHECK(bad == 0, "adam: %d elements differ", bad);
  int64_t step = -1, numel = -1, width = -1;
  msopt_dtype dt = MSOPT_INT32;
  CHECK_RC(msopt_info(od, &dt, &numel, &width, &step), MSOPT_OK);
  CHECK(dt == MSOPT_FLOAT32 && numel == N && width == 0 && step == 3, "info %d %lld %lld %lld",
        (int)dt, (long long)numel, (long long)width, (long long)step);
  CHECK_RC(msopt_release(om), MSOPT_OK);
  CHECK_RC(msopt_release(oa), MSOPT_OK);
  CHECK_RC(msopt_release(od), MSOPT_OK);
}

/* Rows with duplicates equal a dense step with the summed gradient (SGD, and
 * the untouched rows unchanged); every optimizer accepts rows. */
static void test_rows(void) {
  enum { R = 6, W = 3 };
  double p[R * W], dense[R * W] = {0}, out1[R * W], out2[R * W];
  for (int i = 0; i < R * W; ++i) p[i] = i * 0.5 - 3;
  const int64_t rows[4] = {4, 1, 4, 4};
  double vals[4 * W];
  for (int i = 0; i < 4 * W; ++i) vals[i] = 0.125 * (i + 1);
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < W; ++j) dense[rows[k] * W + j] += vals[k * W + j];
  msopt_optimizer *a = make("sgd", "lr=0.5", MSOPT_FLOAT64, p, R * W, W);
  msopt_optimizer *b = make("sgd", "lr=0.5", MSOPT_FLOAT64, p, R * W, W);
  CHECK_RC(msopt_update_rows(a, MSOPT_FLOAT64, rows, 4, vals), MSOPT_OK);
  CHECK_RC(msopt_update(b, MSOPT_FLOAT64, dense, R * W), MSOPT_OK);
  CHECK_RC(msopt_get_weights(a, out1, R * W), MSOPT_OK);
  CHECK_RC(msopt_get_weights(b, out2, R * W), MSOPT_OK);
  CHECK(memcmp(out1, out2, sizeof out1) == 0, "rows != dense with summed gradient");
  CHECK(out1[0] == p[0] && out1[W * 5] == p[W * 5], "untouched rows changed");
  CHECK_RC(msopt_update_rows(a, MSOPT_FLOAT64, NULL, 0, NULL), MSOPT_OK); /* empty step */
  int64_t step = 0;
  CHECK_RC(msopt_info(a, NULL, NULL, NULL, &step), MSOPT_OK);
  CHECK(step == 2, "empty row update is a step: %lld", (long long)step);
  CHECK_RC(msopt_release(a), MSOPT_OK);
  CHECK_RC(msopt_release(b), MSOPT_OK);

  const char *names[5] = {"sgd", "momentum", "adagrad", "adam", "lamb"};
  float pf[R * W], vf[4 * W], of[R * W];
  for (int i = 0; i < R * W; ++i) pf[i] = (float)(i % 7) - 3.0f;
  for (int i = 0; i < 4 * W; ++i) vf[i] = 0.25f * (float)(i % 5) - 0.5f;
  for (int k = 0; k < 5; ++k) {
    msopt_optimizer *o = make(names[k], "lr=0.01,weight_decay=0.1,l1=0.001,l2=0.01",
                              MSOPT_FLOAT32, pf, R * W, W);
    CHECK_RC(msopt_update_rows(o, MSOPT_FLOAT32, rows, 4, vf), MSOPT_OK);
    CHECK_RC(msopt_get_weights(o, of, R * W), MSOPT_OK);
    int finite = 1;
    for (int i = 0; i < R * W; ++i) finite &= isfinite(of[i]) != 0;
    CHECK(finite && of[4 * W] != pf[4 * W], "%s rows: no finite update", names[k]);
    CHECK_RC(msopt_release(o), MSOPT_OK);
  }
}

/* l1 regularization of a row untouched for many steps: exactly the eager result. */
static void test_lazy_l1(void) {
  enum { R = 4, W = 2 };
  float p[R * W] = {1, -1, 0.5f, -0.25f, 3, 2, -2, 0.0625f}, g[W] = {0, 0}, out[R * W];
  msopt_optimizer *o = make("sgd", "lr=0.5,l1=0.0625", MSOPT_FLOAT32, p, R * W, W);
  const int64_t row0 = 0;
  for (int s = 0; s < 10; ++s) CHECK_RC(msopt_update_rows(o, MSOPT_FLOAT32, &row0, 1, g), MSOPT_OK);
  CHECK_RC(msopt_get_weights(o, out, R * W), MSOPT_OK);
  /* each step subtracts 0.5 * 0.0625 = 1/32 from |p| (exact in float32), stopping at 0 */
  for (int i = 0; i < R * W; ++i) {
    float want = fabsf(p[i]) - 10.0f / 32.0f;
    want = want > 0 ? copysignf(want, p[i]) : copysignf(0.0f, p[i]);
    CHECK(out[i] == want, "lazy l1[%d] = %g, want %g", i, out[i], want);
  }
  CHECK_RC(msopt_release(o), MSOPT_OK);
}

/* ------------------------------------------------------------ On Client -- */

static void test_apply_diff(void) {
  int32_t i32[3] = {INT32_MAX, INT32_MIN, 5}, d32[3] = {1, -1, -7}, o32[3];
  msopt_optimizer *o = make("sgd", "", MSOPT_INT32, i32, 3, 0);
  CHECK_RC(msopt_apply_diff(o, MSOPT_INT32, d32, 3), MSOPT_OK);
  CHECK_RC(msopt_get_weights(o, o32, 3), MSOPT_OK);
  CHECK(o32[0] == INT32_MIN && o32[1] == INT32_MAX && o32[2] == -2, "int32 wrap: %d %d %d",
        o32[0], o32[1], o32[2]);
  CHECK_RC(msopt_update(o, MSOPT_INT32, d32, 3), MSOPT_ERR_DTYPE);
  CHECK_RC(msopt_apply_diff(o, MSOPT_INT64, d32, 3), MSOPT_ERR_DTYPE);
  CHECK_RC(msopt_release(o), MSOPT_OK);

  uint64_t u64[2] = {UINT64_MAX, 3}, du[2] = {2, UINT64_MAX}, ou[2];
  o = make("adam", "", MSOPT_UINT64, u64, 2, 0);
  CHECK_RC(msopt_apply_diff(o, MSOPT_UINT64, du, 2), MSOPT_OK);
  CHECK_RC(msopt_get_weights(o, ou, 2), MSOPT_OK);
  CHECK(ou[0] == 1 && ou[1] == 2, "uint64 wrap: %llu %llu", (unsigned long long)ou[0],
        (unsigned long long)ou[1]);
  CHECK_RC(msopt_release(o), MSOPT_OK);

  int64_t i64[1] = {INT64_MAX}, d64[1] = {INT64_MAX}, o64[1];
  uint32_t u32[1] = {0}, d32u[1] = {UINT32_MAX}, o32u[1];
  o = make("sgd", "", MSOPT_INT64, i64, 1, 0);
  CHECK_RC(msopt_apply_diff(o, MSOPT_INT64, d64, 1), MSOPT_OK);
  CHECK_RC(msopt_get_weights(o, o64, 1), MSOPT_OK);
  CHECK(o64[0] == -2, "int64 wrap: %lld", (long long)o64[0]);
  CHECK_RC(msopt_release(o), MSOPT_OK);
  o = make("sgd", "", MSOPT_UINT32, u32, 1, 0);
  CHECK_RC(msopt_apply_diff(o, MSOPT_UINT32, d32u, 1), MSOPT_OK);
  CHECK_RC(msopt_get_weights(o, o32u, 1), MSOPT_OK);
  CHECK(o32u[0] == UINT32_MAX, "uint32: %u", o32u[0]);
  CHECK_RC(msopt_release(o), MSOPT_OK);

  float f[2] = {1.5f, -2}, df[2] = {0.25f, 2}, of[2];
  o = make("momentum", "lr=0.1", MSOPT_FLOAT32, f, 2, 0);
  CHECK_RC(msopt_apply_diff(o, MSOPT_FLOAT32, df, 2), MSOPT_OK);
  CHECK_RC(msopt_get_weights(o, of, 2), MSOPT_OK);
  CHECK(of[0] == 1.75f && of[1] == 0.0f, "float diff %g %g", of[0], of[1]);
  int64_t step = -1;
  CHECK_RC(msopt_info(o, NULL, NULL, NULL, &step), MSOPT_OK);
  CHECK(step == 0, "apply_diff is not a step: %lld", (long long)step);
  CHECK_RC(msopt_release(o), MSOPT_OK);
}

/* ---------------------------------------------------------------- state -- */

static void test_state_round_trip(void) {
  enum { R = 9, W = 5, N = R * W };
  double p[N], g[N], v[3 * W], a_out[N], b_out[N];
  for (int i = 0; i < N; ++i) p[i] = cos(i * 0.7);
  msopt_optimizer *a = make("adam", "lr=0.01,l2=0.01,l1=0.0001,lr_policy=linear,lr_decay_a=0.001,"
                            "lr_decay_b=0.002,nesterov=1", MSOPT_FLOAT64, p, N, W);
  const int64_t rows[3] = {7, 2, 7};
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < N; ++i) g[i] = sin(i * 1.3 + s);
    for (int i = 0; i < 3 * W; ++i) v[i] = cos(i * 0.3 + s);
    CHECK_RC(msopt_update(a, MSOPT_FLOAT64, g, N), MSOPT_OK);
    CHECK_RC(msopt_update_rows(a, MSOPT_FLOAT64, rows, 3, v), MSOPT_OK);
  }
  void *blob = NULL;
  int64_t len = 0;
  CHECK_RC(msopt_get_state(a, &blob, &len), MSOPT_OK);
  msopt_optimizer *b = NULL;
  CHECK_RC(msopt_restore(blob, len, &b), MSOPT_OK);
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 3 * W; ++i) v[i] = sin(i * 0.9 - s);
    CHECK_RC(msopt_update_rows(a, MSOPT_FLOAT64, rows + s % 2, 2, v), MSOPT_OK);
    CHECK_RC(msopt_update_rows(b, MSOPT_FLOAT64, rows + s % 2, 2, v), MSOPT_OK);
  }
  CHECK_RC(msopt_get_weights(a, a_out, N), MSOPT_OK);
  CHECK_RC(msopt_get_weights(b, b_out, N), MSOPT_OK);
  CHECK(memcmp(a_out, b_out, sizeof a_out) == 0, "restored optimizer diverged");
  /* every truncation and a flipped byte are rejected */
  unsigned char *bytes = (unsigned char *)blob;
  int rejected = 0;
  for (int64_t cut = 0; cut < len; cut += 7) {
    msopt_optimizer *c = NULL;
    rejected += msopt_restore(blob, cut, &c) == MSOPT_ERR_STATE && c == NULL;
  }
  CHECK(rejected == (int)((len + 6) / 7), "truncated blobs: %d of %d rejected", rejected,
        (int)((len + 6) / 7));
  bytes[len / 2] ^= 0x10;
  msopt_optimizer *c = NULL;
  CHECK_RC(msopt_restore(blob, len, &c), MSOPT_ERR_STATE);
  CHECK(strstr(msopt_last_error(), "checksum") != NULL, "message: %s", msopt_last_error());
  msopt_free(blob);
  msopt_free(NULL);
  CHECK_RC(msopt_release(a), MSOPT_OK);
  CHECK_RC(msopt_release(b), MSOPT_OK);
}

/* --------------------------------------------------------------- errors -- */

static void test_errors(void) {
  float p[4] = {1, 2, 3, 4}, out[4];
  msopt_optimizer *o = NULL;
  CHECK_RC(msopt_create(NULL, "lr=1", MSOPT_FLOAT32, p, 4, 0, &o), MSOPT_ERR_NULL);
  CHECK(strstr(msopt_last_error(), "optimizer") != NULL, "message names the argument");
  CHECK_RC(msopt_create("sgd", NULL, MSOPT_FLOAT32, p, 4, 0, &o), MSOPT_ERR_NULL);
  CHECK_RC(msopt_create("sgd", "lr=1", MSOPT_FLOAT32, NULL, 4, 0, &o), MSOPT_ERR_NULL);
  CHECK_RC(msopt_create("sgd", "lr=1", MSOPT_FLOAT32, p, 4, 0, NULL), MSOPT_ERR_NULL);
  CHECK_RC(msopt_create("sgd", "lr=1", (msopt_dtype)6, p, 4, 0, &o), MSOPT_ERR_DTYPE);
  CHECK_RC(msopt_create("sgd", "lr=1", (msopt_dtype)-1, p, 4, 0, &o), MSOPT_ERR_DTYPE);
  CHECK_RC(msopt_create("sgd", "lr=1", MSOPT_FLOAT32, p, 0, 0, &o), MSOPT_ERR_SIZE);
  CHECK_RC(msopt_create("sgd", "lr=1", MSOPT_FLOAT32, p, 4, 3, &o), MSOPT_ERR_SIZE);
  CHECK_RC(msopt_create("sgd", "lr=1", MSOPT_FLOAT32, p, 4, -2, &o), MSOPT_ERR_SIZE);
  CHECK_RC(msopt_create("rmsprop", "lr=1", MSOPT_FLOAT32, p, 4, 0, &o), MSOPT_ERR_CONFIG);
  CHECK_RC(msopt_create("sgd", "lr=-1", MSOPT_FLOAT32, p, 4, 0, &o), MSOPT_ERR_CONFIG);
  CHECK_RC(msopt_create("sgd", "lr=1,momentum=0.9", MSOPT_FLOAT32, p, 4, 0, &o), MSOPT_ERR_CONFIG);
  CHECK(strstr(msopt_last_error(), "momentum") != NULL, "message: %s", msopt_last_error());
  CHECK_RC(msopt_create("adam", "lr=1,beta1=1", MSOPT_FLOAT32, p, 4, 0, &o), MSOPT_ERR_CONFIG);
  CHECK_RC(msopt_create("adam", "lr=1e-3x", MSOPT_FLOAT32, p, 4, 0, &o), MSOPT_ERR_CONFIG);
  CHECK_RC(msopt_create("adam", "", MSOPT_FLOAT32, p, 4, 0, &o), MSOPT_ERR_CONFIG);
  /* beta1 is 1 and eps 0 once cast to float32 (they would give NaN weights); fine in float64 */
  CHECK_RC(msopt_create("adam", "lr=1,beta1=0.99999999999", MSOPT_FLOAT32, p, 4, 0, &o),
           MSOPT_ERR_CONFIG);
  CHECK(strstr(msopt_last_error(), "beta1") && strstr(msopt_last_error(), "float32"), "message: %s",
        msopt_last_error());
  CHECK_RC(msopt_create("adagrad", "lr=1,eps=1e-50", MSOPT_FLOAT32, p, 4, 0, &o), MSOPT_ERR_CONFIG);
  /* sizes: too large for the state format, or more memory than there is (nothing read) */
  CHECK_RC(msopt_create("sgd", "lr=1", MSOPT_FLOAT64, p, INT64_MAX, 0, &o), MSOPT_ERR_SIZE);
  CHECK(strstr(msopt_last_error(), "numel") != NULL, "message: %s", msopt_last_error());
  CHECK_RC(msopt_create("adam", "lr=1", MSOPT_FLOAT64, p, (INT64_MAX / 8) / 4, 0, &o),
           MSOPT_ERR_NOMEM);
  CHECK(strstr(msopt_last_error(), "out of memory") != NULL, "message: %s", msopt_last_error());
  CHECK(o == NULL, "a failed create wrote *out");

  o = make("sgd", "lr=1", MSOPT_FLOAT32, p, 4, 2);
  double gd[4] = {1, 1, 1, 1};
  CHECK_RC(msopt_update(o, MSOPT_FLOAT64, gd, 4), MSOPT_ERR_DTYPE);
  CHECK(strstr(msopt_last_error(), "float64") != NULL, "message: %s", msopt_last_error());
  CHECK_RC(msopt_update(o, (msopt_dtype)77, gd, 4), MSOPT_ERR_DTYPE);
  CHECK_RC(msopt_update(o, MSOPT_FLOAT32, p, 3), MSOPT_ERR_SIZE);
  CHECK_RC(msopt_update(o, MSOPT_FLOAT32, NULL, 4), MSOPT_ERR_NULL);
  CHECK_RC(msopt_update(NULL, MSOPT_FLOAT32, p, 4), MSOPT_ERR_NULL);
  const int64_t bad_rows[3] = {1, 0, 2};
  CHECK_RC(msopt_update_rows(o, MSOPT_FLOAT32, bad_rows, 3, p), MSOPT_ERR_ROW);
  CHECK(strstr(msopt_last_error(), "rows[2] = 2") != NULL, "message: %s", msopt_last_error());
  CHECK_RC(msopt_update_rows(o, MSOPT_FLOAT32, bad_rows, -1, p), MSOPT_ERR_SIZE);
  CHECK_RC(msopt_update_rows(o, MSOPT_FLOAT32, NULL, 1, p), MSOPT_ERR_NULL);
  CHECK_RC(msopt_update_rows(o, MSOPT_FLOAT32, bad_rows, 1, NULL), MSOPT_ERR_NULL);
  CHECK_RC(msopt_update_rows(o, MSOPT_FLOAT32, bad_rows, INT64_MAX / 2, p), MSOPT_ERR_SIZE);
  CHECK_RC(msopt_get_weights(o, out, 5), MSOPT_ERR_SIZE);
  CHECK_RC(msopt_get_weights(o, NULL, 4), MSOPT_ERR_NULL);
  CHECK_RC(msopt_apply_diff(o, MSOPT_FLOAT32, p, -4), MSOPT_ERR_SIZE);
  void *blob = NULL;
  int64_t len = 0;
  CHECK_RC(msopt_get_state(o, NULL, &len), MSOPT_ERR_NULL);
  CHECK_RC(msopt_get_state(o, &blob, NULL), MSOPT_ERR_NULL);
  CHECK_RC(msopt_restore(NULL, 10, &o), MSOPT_ERR_NULL);
  CHECK_RC(msopt_restore(p, -5, &o), MSOPT_ERR_STATE);
  CHECK_RC(msopt_restore(p, sizeof p, &o), MSOPT_ERR_STATE);
  CHECK_RC(msopt_get_weights(o, out, 4), MSOPT_OK); /* nothing above changed anything */
  CHECK(memcmp(out, p, sizeof p) == 0, "a failed call changed the parameter");
  int64_t step = -1;
  CHECK_RC(msopt_info(o, NULL, NULL, NULL, &step), MSOPT_OK);
  CHECK(step == 0, "a failed call counted a step");
  CHECK_RC(msopt_release(o), MSOPT_OK);
  CHECK_RC(msopt_release(o), MSOPT_ERR_HANDLE); /* released: detected, not a crash */
  CHECK_RC(msopt_update(o, MSOPT_FLOAT32, p, 4), MSOPT_ERR_HANDLE);
  CHECK_RC(msopt_release((msopt_optimizer *)(uintptr_t)0xdeadbeef0), MSOPT_ERR_HANDLE);
  CHECK_RC(msopt_release(NULL), MSOPT_ERR_NULL);
  CHECK_RC(msopt_info(NULL, NULL, NULL, NULL, NULL), MSOPT_ERR_NULL);
}

/* -------------------------------------------------------------- threads -- */

enum { kThreads = 8, kSteps = 200, kN = 40000 }; /* kN above the OpenMP threshold */

struct shared_arg {
  msopt_optimizer *o;
  int id;
  int failures;
};

/* SGD with lr = 0.5 and gradients of small integers: every operation is
 * exact, so any interleaving of the threads gives the same result. */
static void *hammer(void *arg) {
  struct shared_arg *a = (struct shared_arg *)arg;
  static float grad[kThreads][kN];
  for (int i = 0; i < kN; ++i) grad[a->id][i] = (float)((i + a->id) % 3);
  const int64_t rows[2] = {a->id % 4, (a->id + 1) % 4};
  for (int s = 0; s < kSteps; ++s) {
    int rc = s % 2 ? msopt_update(a->o, MSOPT_FLOAT32, grad[a->id], kN)
                   : msopt_update_rows(a->o, MSOPT_FLOAT32, rows, 2, grad[a->id]);
    a->failures += rc != MSOPT_OK;
    /* a bad call on this thread: its message is this thread's own */
    char want[64];
    snprintf(want, sizeof want, "is %d but", 1000 + a->id);
    rc = msopt_update(a->o, MSOPT_FLOAT32, grad[a->id], 1000 + a->id);
    a->failures += rc != MSOPT_ERR_SIZE || strstr(msopt_last_error(), want) == NULL;
  }
  return NULL;
}

static void test_threads(void) {
  static float p[kN], out[kN];
  for (int i = 0; i < kN; ++i) p[i] = (float)(i % 100);
  msopt_optimizer *o = make("sgd", "lr=0.5", MSOPT_FLOAT32, p, kN, kN / 4);
  pthread_t th[kThreads];
  struct shared_arg args[kThreads];
  for (int t = 0; t < kThreads; ++t) {
    args[t].o = o;
    args[t].id = t;
    args[t].failures = 0;
    pthread_create(&th[t], NULL, hammer, &args[t]);
  }
  int failures = 0;
  for (int t = 0; t < kThreads; ++t) {
    pthread_join(th[t], NULL);
    failures += args[t].failures;
  }
  CHECK(failures == 0, "%d failed calls in threads", failures);
  /* serial expectation */
  for (int t = 0; t < kThreads; ++t)
    for (int s = 0; s < kSteps; ++s) {
      if (s % 2) {
        for (int i = 0; i < kN; ++i) p[i] -= 0.5f * (float)((i + t) % 3);
      } else {
        const int r0 = t % 4, r1 = (t + 1) % 4, w = kN / 4;
        for (int j = 0; j < w; ++j) {
          p[r0 * w + j] -= 0.5f * (float)((j + t) % 3);
          p[r1 * w + j] -= 0.5f * (float)((w + j + t) % 3);
        }
      }
    }
  CHECK_RC(msopt_get_weights(o, out, kN), MSOPT_OK);
  int64_t step = 0;
  CHECK_RC(msopt_info(o, NULL, NULL, NULL, &step), MSOPT_OK);
  CHECK(step == kThreads * kSteps, "steps %lld", (long long)step);
  CHECK(memcmp(out, p, sizeof out) == 0, "concurrent updates lost or corrupted an update");
  CHECK_RC(msopt_release(o), MSOPT_OK);
}

/* Releasing a handle while another thread keeps calling it: those calls
 * finish or report MSOPT_ERR_HANDLE; nothing is used after being freed. */
struct release_arg {
  msopt_optimizer *o;
  int ok, gone, other;
};

/* Calls until the handle is gone (then 100 more calls), or a bound is hit. */
static void *keep_updating(void *arg) {
  struct release_arg *a = (struct release_arg *)arg;
  static double g[1000];
  for (long s = 0; s < 100000000L && a->gone < 100; ++s) {
    const int rc = msopt_update(a->o, MSOPT_FLOAT64, g, 1000);
    if (rc == MSOPT_OK) ++a->ok;
    else if (rc == MSOPT_ERR_HANDLE) ++a->gone;
    else ++a->other;
  }
  return NULL;
}

static void test_release_while_in_use(void) {
  static double p[1000];
  struct release_arg a = {make("adam", "lr=0.1", MSOPT_FLOAT64, p, 1000, 0), 0, 0, 0};
  pthread_t th;
  pthread_create(&th, NULL, keep_updating, &a);
  while (1) { /* wait for the first successful calls */
    int64_t step = 0;
    if (msopt_info(a.o, NULL, NULL, NULL, &step) != MSOPT_OK || step > 10) break;
  }
  CHECK_RC(msopt_release(a.o), MSOPT_OK);
  pthread_join(th, NULL);
  CHECK(a.ok > 10 && a.gone == 100 && a.other == 0, "ok %d gone %d other %d", a.ok, a.gone,
        a.other);
}

int main(void) {
  test_sgd_exact();
  test_momentum_adagrad_adam();
  test_rows();
  test_lazy_l1();
  test_apply_diff();
  test_state_round_trip();
  test_errors();
  test_threads();
  test_release_while_in_use();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}

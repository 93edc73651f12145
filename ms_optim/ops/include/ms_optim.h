/* ms_optim.h: a C library of optimizers for parameter servers.
 *
 * Part of the ms_optim Python package: the functions live in the package's
 * native library (ms_optim/libms_optim.so), built by `pip install`.  Find both
 * with `python -c "import ms_optim.capi as c; print(c.include_dir(), c.library_path())"`
 * and link with  -I<include_dir> -L<dir of library> -lms_optim -Wl,-rpath,<that dir>.
 *
 * Two ways for a parameter server to update a parameter it holds:
 *   On Parameter Server: it receives gradients and runs an optimizer,
 *     msopt_update (dense) or msopt_update_rows (some rows of a matrix).
 *   On Client: it receives a model difference and adds it, msopt_apply_diff.
 *
 * Every int-returning function returns 0 (MSOPT_OK) on success or a negative
 * MSOPT_ERR_* code; then msopt_last_error() describes the failure, naming the
 * argument, and the call has changed nothing.  No function aborts the process.
 *
 * Threads: calls on one handle may come from several threads at once; they are
 * serialized.  Calls on different handles run in parallel.  msopt_last_error
 * is per OS thread (from Go, pin the goroutine with runtime.LockOSThread
 * around a call and its msopt_last_error).  A handle is an opaque token, not a memory address: a handle
 * that was released (or never created) is rejected with MSOPT_ERR_HANDLE, and
 * releasing a handle while another thread uses it is safe (that call finishes
 * first).
 */
#ifndef MS_OPTIM_H_
#define MS_OPTIM_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types (the values of PaddlePaddle's paddle_element_type).  C++
 * gets a fixed 32-bit underlying type, so that a value outside the list
 * (rejected with MSOPT_ERR_DTYPE) is still a valid msopt_dtype there. */
#ifdef __cplusplus
#define MSOPT_ENUM_BASE_ : int32_t
#else
#define MSOPT_ENUM_BASE_
#endif
typedef enum MSOPT_ENUM_BASE_ {
  MSOPT_INT32 = 0,
  MSOPT_UINT32 = 1,
  MSOPT_INT64 = 2,
  MSOPT_UINT64 = 3,
  MSOPT_FLOAT32 = 4,
  MSOPT_FLOAT64 = 5
} msopt_dtype;
#undef MSOPT_ENUM_BASE_

#define MSOPT_OK 0
#define MSOPT_ERR_NULL (-1)     /* a required pointer argument is NULL */
#define MSOPT_ERR_HANDLE (-2)   /* not a live handle (released or never created) */
#define MSOPT_ERR_SIZE (-3)     /* an element/row count or length is wrong */
#define MSOPT_ERR_DTYPE (-4)    /* element type unknown, mismatched or unsupported here */
#define MSOPT_ERR_CONFIG (-5)   /* unknown optimizer, or a bad config string */
#define MSOPT_ERR_ROW (-6)      /* a row id is out of range */
#define MSOPT_ERR_STATE (-7)    /* a state blob is truncated, corrupted or mismatched */
#define MSOPT_ERR_NOMEM (-8)    /* out of memory */
#define MSOPT_ERR_INTERNAL (-9) /* unexpected internal failure (a bug: please report) */
/* The MindSpore AOT kernels' own causes (the C library functions above never
 * return these): */
#define MSOPT_ERR_ARGS (-10)    /* a kernel got the wrong number of tensors */
#define MSOPT_ERR_VALUE (-11)   /* a value read from a tensor is out of range (an index, a k) */
#define MSOPT_ERR_REPLICA (-12) /* distributed workers disagree on the model, the step or the
                                   optimizer state, or the state cannot be resumed */
#define MSOPT_ERR_STALE (-13)   /* a step compiled for another step than the optimizer's
                                   global_step (set since: the caller reads it and retries) */

typedef struct msopt_optimizer msopt_optimizer;

/* Creates an optimizer holding a copy of `param` (numel > 0 elements of
 * `dtype`).  row_width 0: a flat parameter; row_width > 0 (dividing numel): a
 * matrix of numel / row_width rows for msopt_update_rows.
 *
 * optimizer: "sgd", "momentum", "adagrad", "adam" or "lamb".
 * config: comma-separated key=value (spaces around keys and values ignored):
 *   lr            learning rate >= 0 (required for float parameters)
 *   momentum      momentum: [0, 1], default 0.9
 *   nesterov      momentum, adam: true/false/1/0, default false
 *   beta1, beta2  adam, lamb: [0, 1), defaults 0.9, 0.999
 *   eps           adagrad, adam, lamb: > 0, defaults 1e-6, 1e-8, 1e-6
 *   weight_decay  >= 0, default 0: sgd/momentum/adagrad/adam add wd * p to the
 *                 gradient (MindSpore); lamb adds it to its direction and then
 *                 uses its trust ratio (PaddlePaddle's Lamb)
 *   l1, l2        >= 0, default 0: regularization after every step, applied to
 *                 every row: p = sign(p) * max(|p| - lr*l1, 0) * (1 / (1 + lr*l2));
 *                 lazy for rows (see msopt_update_rows)
 *   lr_policy     const (default) or linear: lr_k = max(lr - lr_decay_a * (k - 1), lr_decay_b)
 *                 for the k-th step (k = 1, 2, ...)
 *   lr_decay_a, lr_decay_b  >= 0, only with lr_policy=linear, default 0
 * Unknown keys, repeated keys, keys the optimizer does not use and bad values
 * are MSOPT_ERR_CONFIG.  Values are cast to the parameter's type, and the
 * ranges hold for the cast value: for a float32 parameter a value beyond
 * float32's range, or one that rounds onto an open bound (beta1=0.99999999999
 * is 1, eps=1e-50 is 0), is MSOPT_ERR_CONFIG.  Integer parameters (for msopt_apply_diff only) take the
 * same config, lr optional.  On success *out is the new handle. */
int msopt_create(const char *optimizer, const char *config, msopt_dtype dtype, const void *param,
                 int64_t numel, int64_t row_width, msopt_optimizer **out);

/* Creates an optimizer from a blob of msopt_get_state (format: docs/capi.md).
 * msopt_update and msopt_update_rows fail with MSOPT_ERR_STATE once the step
 * counter is at INT64_MAX. */
int msopt_restore(const void *state, int64_t state_len, msopt_optimizer **out);

/* On Parameter Server, dense: one optimizer step with a gradient of numel
 * elements.  dtype must be the parameter's, float32 or float64. */
int msopt_update(msopt_optimizer *o, msopt_dtype dtype, const void *grad, int64_t numel);

/* On Parameter Server, sparse rows: one optimizer step in which row rows[i]
 * (0 <= rows[i] < numel / row_width) has gradient values[i * row_width ...
 * (i + 1) * row_width - 1]; nrows >= 0 (0 is a step with no rows).  Duplicate
 * ids are summed in order.  Only the rows given are updated (their optimizer
 * state too: "lazy" like MindSpore's LazyAdam); the step counter, Adam's bias
 * correction and the lr schedule advance for the whole parameter; Lamb's
 * trust ratio is taken per row (per parameter in msopt_update).  l1/l2
 * regularization is lazy: each row remembers the last step it was regularized
 * for and, when next touched (or read by msopt_get_weights / msopt_get_state /
 * msopt_apply_diff), first replays the steps it missed, with their learning
 * rates, giving the same bits as regularizing every row at every step. */
int msopt_update_rows(msopt_optimizer *o, msopt_dtype dtype, const int64_t *rows, int64_t nrows,
                      const void *values);

/* On Client: param += diff (numel elements of the parameter's dtype, any of
 * the six).  Integer sums wrap around modulo 2^bits (two's complement, as in Go
 * and numpy); floats add with IEEE rounding.  Not an optimizer step. */
int msopt_apply_diff(msopt_optimizer *o, msopt_dtype dtype, const void *diff, int64_t numel);

/* Copies the parameter (numel elements of its dtype) to out, all rows up to date. */
int msopt_get_weights(msopt_optimizer *o, void *out, int64_t numel);

/* Serializes everything (all rows brought up to date first) into a new buffer:
 * *state, *state_len bytes; free it with msopt_free. */
int msopt_get_state(msopt_optimizer *o, void **state, int64_t *state_len);

/* The parameter's dtype, element count, row width and completed steps (any
 * output pointer may be NULL). */
int msopt_info(msopt_optimizer *o, msopt_dtype *dtype, int64_t *numel, int64_t *row_width,
               int64_t *step);

/* Frees a buffer returned by this library (NULL is a no-op). */
void msopt_free(void *p);

/* Destroys a handle; it is invalid afterwards. */
int msopt_release(msopt_optimizer *o);

/* The message of this thread's most recent failed call ("" if none). */
const char *msopt_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* MS_OPTIM_H_ */

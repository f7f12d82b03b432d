#ifndef CVFL_BODY
/*
 * cvfl_theory._kernels -- the compressors' elementwise kernels (THEORY C5.1, C5.2, C5.4), and
 * those of the sparse encoders and their fixed-order row sums (THEORY K1, K3; see "sparse
 * encoders" and "fixed-order row sums" below).
 *
 * One implementation of each kernel, for float32 and float64 data, fused so that every entry is
 * read and written once: the shared dither is generated on the fly from a counter (no stored
 * stream), and the compressors' arithmetic is in float64 with one final rounding to the output
 * dtype. The Python side (cvfl_theory.compressors, encoders, encoded, sampling) validates the
 * arguments; these functions check only buffer sizes and contiguity (a mismatch raises
 * ValueError/BufferError, never a crash).
 *
 * Shared dither (the definition both sides follow):
 *   stream: xoshiro256** on 16 lanes; lane l starts from the SplitMix64 outputs
 *       w_{4l} .. w_{4l+3} of the message seed, w_n = mix64(seed + (n + 1) * 0x9E3779B97F4A7C15),
 *       mix64(z) = z ^ z>>30, * 0xBF58476D1CE4E5B9, ^ >>27, * 0x94D049BB133111EB, ^ >>31;
 *       stream word n = output of lane n mod 16 at its step n div 16 (see stream_steps)
 *   scalar quantizer, entry e = b P + c of the (B, P) matrix:  h_e = 32-bit half (e & 1) of
 *       stream word e >> 1 (half 0 = low bits), U_e = (h_e + 1/2) 2^-32 on 2^32 midpoints of (0,1)
 *   hexagonal quantizer, pair p = b ceil(P/2) + i:  (alpha, beta) = midpoints of the 2^-23 grid
 *       given by the top 23 bits of the low and high halves of stream word p (see hex_dither).
 *
 * Floating-point determinism: only correctly rounded operations (+ - * /, conversions) are used,
 * in a fixed order, and the module is compiled with -ffp-contract=off (no fused multiply-adds), so
 * every path (AVX-512, AVX2 or portable, see "run-time dispatch" below), every compiler (gcc,
 * clang) and every machine gives the same bits. Rounding to the nearest integer uses the
 * 1.5 * 2^52 trick (exact round-half-even for |v| < 2^51); the floor of a non-negative value uses
 * truncation.
 *
 * Layout: this file is read four times. The first time (CVFL_BODY undefined) it holds the
 * shared definitions, the Python wrappers and the dispatch; that part includes the file again
 * once per path with CVFL_BODY defined, K(name) giving each path's functions their own names
 * and VL the 64-bit lanes per vector of that path. The kernels are the CVFL_BODY part at the
 * end. Only GCC/clang pragmas are used for the per-path targets (no target_clones, which clang
 * 14 supports only partly); other compilers get the portable path alone. Intrinsics
 * (immintrin.h) appear only in hot loops on the x86 paths -- the scalar quantizer's sq_vec and
 * sdq_vec, the hexagonal quantizer's X86_VEC loops, top-k's AVX-512 counts: the same
 * operations, in the same order, as the plain C loops the portable path runs. One exception,
 * which changes no bit either: on AVX2 the hexagonal quantizer's nearest point is first found
 * in float32 and kept only where an error bound certifies the float64 code's decisions
 * (hex_screen_f32); every other pair is computed by the float64 code.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(CVFL_PORTABLE_ONLY)
#include <immintrin.h> /* the x86 paths' hand-vectorized loops (X86_VEC: sq_vec, sdq_vec, hex) */
#endif

#define PAD64(n) (((n) + 63) / 64 * 64) /* n rounded up to a multiple of 64 */
#define TOPK_GROUP 4 /* the most rows the top-k selection searches at once (TOPK_ROWS) */

#if defined(__GNUC__) || defined(__clang__)
#define CTZ64(x) __builtin_ctzll(x)
#define RESTRICT __restrict__
#define ALWAYS_INLINE inline __attribute__((always_inline))
#define NOINLINE __attribute__((noinline))
#else
static inline int CTZ64(uint64_t x) { /* x != 0 */
    int n = 0;
    while (!(x & 1)) x >>= 1, n++;
    return n;
}
#define RESTRICT
#define ALWAYS_INLINE inline
#define NOINLINE
#endif

#define GAMMA 0x9E3779B97F4A7C15ULL
#define BLOCK 2048 /* entries per dither block (scratch on the stack) */
/* float64 bits: 2^19 + 2^-33, to which 2w adds U = (w + 1/2) 2^-32 (see dither_v), and
   2^19 + 1/2, to which k << 33 adds the integer k (see sdq_vec). */
#define BITS_2P19_U0 0x4120000000000001LL
#define BITS_2P19_HALF 0x4120000100000000LL

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* ---- the shared dither stream ----------------------------------------------------------------
   xoshiro256** (Blackman & Vigna, 2018) on LANES = 16 independent lanes; lane l starts from the
   SplitMix64 outputs w_{4l} .. w_{4l+3} of the message seed. Word n of the stream is the output of
   lane n mod 16 at its step n div 16. Sender and receiver consume the words in the same order
   (entries, or pairs, in row-major order), so both see the same dither. The generator needs no
   multiplication (x5 and x9 are shift-adds), which is what makes it cheap on vectors. */
#define LANES 16

typedef struct {
    uint64_t s0[LANES], s1[LANES], s2[LANES], s3[LANES];
    uint64_t buf[LANES]; /* the last step's words */
    int pos;             /* next unread word of buf (LANES: none) */
    int has_half;        /* a high half left over by stream_halves */
    uint32_t half;
} stream_t;
/* ------------------------------------------------------------------------------------------- */
/* buffer helpers                                                                              */

enum { T_NONE = 0, T_F32 = 1, T_F64 = 2, T_U8 = 3, T_U16 = 4, T_I32 = 5, T_I64 = 6 };

static Py_ssize_t type_size(int t) {
    switch (t) {
    case T_F32: return 4;
    case T_F64: return 8;
    case T_U8: return 1;
    case T_U16: return 2;
    case T_I32: return 4;
    case T_I64: return 8;
    default: return 0;
    }
}

static const char *type_name(int t) {
    switch (t) {
    case T_F32: return "float32";
    case T_F64: return "float64";
    case T_U8: return "uint8";
    case T_U16: return "uint16";
    case T_I32: return "int32 or uint32";
    case T_I64: return "int64";
    default: return "?";
    }
}

/* Whether the buffer's struct format (native or explicit byte order) is the type t. */
static int format_matches(const Py_buffer *view, int t) {
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || (*f == '<' && PY_LITTLE_ENDIAN) || (*f == '>' && !PY_LITTLE_ENDIAN))
        f++;
    if (f[0] == 0 || f[1] != 0) return 0;
    switch (t) {
    case T_F32: return f[0] == 'f';
    case T_F64: return f[0] == 'd';
    case T_U8: return f[0] == 'B';
    case T_U16: return f[0] == 'H';
    case T_I32: /* int32 or uint32 (dither words); 'l' where long has 32 bits */
        return f[0] == 'i' || f[0] == 'I' ||
               (sizeof(long) == 4 && (f[0] == 'l' || f[0] == 'L'));
    case T_I64: /* int64 indices: 'q', or 'l' where long has 64 bits */
        return f[0] == 'q' || (sizeof(long) == 8 && f[0] == 'l');
    default: return 0;
    }
}

/* Get a C-contiguous buffer of exactly count items of type t (obj None -> buf NULL if allowed). */
static int get_buffer(PyObject *obj, Py_buffer *view, int writable, int t, Py_ssize_t count,
                      const char *name, int optional) {
    view->obj = NULL;
    view->buf = NULL;
    if (obj == Py_None) {
        if (optional) return 0;
        PyErr_Format(PyExc_ValueError, "%s must be a buffer, got None", name);
        return -1;
    }
    if (type_size(t) == 0) {
        PyErr_Format(PyExc_ValueError, "%s: unknown element type code %d", name, t);
        return -1;
    }
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    if (!format_matches(view, t)) {
        PyErr_Format(PyExc_ValueError,
                     "%s has element format '%s', not the one of type code %d (%s)", name,
                     view->format ? view->format : "B", t, type_name(t));
        PyBuffer_Release(view);
        view->obj = NULL;
        view->buf = NULL;
        return -1;
    }
    if (view->len != count * type_size(t)) {
        PyErr_Format(PyExc_ValueError, "%s has %zd bytes, expected %zd", name, view->len,
                     count * type_size(t));
        PyBuffer_Release(view);
        view->obj = NULL;
        view->buf = NULL;
        return -1;
    }
    return 0;
}

static void release(Py_buffer *view) {
    if (view->obj != NULL) PyBuffer_Release(view);
}

/* Per-row parameters: arrays of B float64 values, or one value broadcast to every row. */
typedef struct {
    const double *v;
    Py_ssize_t stride; /* 1 (per row) or 0 (shared) */
} rowparam;

static int get_rowparam(PyObject *obj, Py_buffer *view, Py_ssize_t B, rowparam *p,
                        const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (!format_matches(view, T_F64)) {
        PyErr_Format(PyExc_ValueError, "%s must hold float64 values", name);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    if (view->len == B * 8) {
        p->stride = 1;
    } else if (view->len == 8) {
        p->stride = 0;
    } else {
        PyErr_Format(PyExc_ValueError, "%s must hold 1 or B = %zd float64 values", name, B);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    p->v = (const double *)view->buf;
    return 0;
}

#define ROW(p, b) ((p).v[(b) * (p).stride])
typedef struct {
    double a;             /* minimum distance, unit box */
    const int32_t *lut;   /* (rows, width) codeword index table, origin (j0, i0) */
    Py_ssize_t rows, width, size;
    double i0, j0;
    const double *pxy;    /* codeword k at (pxy[2k], pxy[2k + 1]) (centred unit box) */
} hexcode;

#define HB 512 /* pairs per chunk of hex_run (scratch on the stack) */


/* ------------------------------------------------------------------------------------------- */
/* run-time dispatch                                                                           */
/* Every kernel is compiled once per path (this file includes itself with CVFL_BODY defined and */
/* K(name) = name_<path>): "avx512" (x86-64-v4 features: AVX-512 F/BW/DQ/VL), "avx2" (x86-64-v3: */
/* AVX2, FMA, BMI1/2 -- FMA is never used, see -ffp-contract=off) and "portable" (the compiler's */
/* baseline, SSE2 on x86-64; the only path elsewhere). The module picks the widest path the CPU */
/* supports at import, or the one named by the environment variable CVFL_KERNEL_PATH (an       */
/* unsupported or unknown name is an ImportError). All paths compute the same operations in the */
/* same order: the same bits (tests/test_compressors_kernels.py forces each path in turn).      */

#define SQ_FIELD(NAME, XT, IT, YT)                                                              \
    void (*NAME)(const XT *, Py_ssize_t, Py_ssize_t, int, rowparam, rowparam, int32_t, int,   \
                 uint64_t, IT *, YT *, int64_t *, int64_t *)
#define SDQ_FIELD(NAME, IT, YT)                                                                 \
    void (*NAME)(const IT *, Py_ssize_t, Py_ssize_t, rowparam, rowparam, int32_t, int,         \
                 uint64_t, YT *)

typedef struct {
    void (*row_ranges_f32)(const float *, Py_ssize_t, Py_ssize_t, double *, double *);
    void (*row_ranges_f64)(const double *, Py_ssize_t, Py_ssize_t, double *, double *);
    SQ_FIELD(sq_f32_u8_f32, float, uint8_t, float);
    SQ_FIELD(sq_f32_u8_f64, float, uint8_t, double);
    SQ_FIELD(sq_f32_u16_f32, float, uint16_t, float);
    SQ_FIELD(sq_f32_u16_f64, float, uint16_t, double);
    SQ_FIELD(sq_f64_u8_f32, double, uint8_t, float);
    SQ_FIELD(sq_f64_u8_f64, double, uint8_t, double);
    SQ_FIELD(sq_f64_u16_f32, double, uint16_t, float);
    SQ_FIELD(sq_f64_u16_f64, double, uint16_t, double);
    SDQ_FIELD(sdq_u8_f32, uint8_t, float);
    SDQ_FIELD(sdq_u8_f64, uint8_t, double);
    SDQ_FIELD(sdq_u16_f32, uint16_t, float);
    SDQ_FIELD(sdq_u16_f64, uint16_t, double);
    void (*hex_run)(const void *, int, Py_ssize_t, Py_ssize_t, int, rowparam, rowparam,
                    const hexcode *, int, uint64_t, void *, int, void *, int, int64_t *);
    int64_t (*topk_f32)(const float *, Py_ssize_t, Py_ssize_t, Py_ssize_t, int32_t *, uint8_t *,
                        int32_t *, float *);
    int64_t (*topk_f64)(const double *, Py_ssize_t, Py_ssize_t, Py_ssize_t, int64_t *, uint8_t *,
                        int32_t *, double *);
    void (*scatter_f32)(const int32_t *, const float *, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                        float *);
    void (*scatter_f64)(const int32_t *, const double *, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                        double *);
    void (*dither_words)(uint64_t, Py_ssize_t, Py_ssize_t, uint32_t *);
    void (*hex_dither)(uint64_t, Py_ssize_t, Py_ssize_t, double, double *, double *);
    void (*a2_nearest)(const double *, const double *, Py_ssize_t, double *, double *);
    void (*row_sums_f32)(const float *, Py_ssize_t, Py_ssize_t, double *);
    void (*row_sums_f64)(const double *, Py_ssize_t, Py_ssize_t, double *);
} kernels_t;

#define CVFL_BODY

/* portable: the compiler's baseline */
#define K(name) name##_portable
#define VL 2
#include "_kernels.c"
#undef VL
#undef K

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(CVFL_PORTABLE_ONLY)
#define CVFL_X86_PATHS 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,bmi,bmi2,lzcnt,popcnt,f16c,movbe"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,lzcnt,popcnt,f16c,movbe")
#endif
#define K(name) name##_avx2
#define VL 4
#include "_kernels.c"
#undef VL
#undef K
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512cd,avx2,fma,bmi,bmi2,lzcnt,popcnt,f16c,movbe"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512cd,avx2,fma,bmi,bmi2,lzcnt,popcnt,f16c,movbe")
#endif
#define K(name) name##_avx512
#define VL 8
#include "_kernels.c"
#undef VL
#undef K
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

#undef CVFL_BODY

/* The paths, widest first: name, table, whether this CPU (and OS) can run it. */
static int cpu_has_avx2(void) {
#ifdef CVFL_X86_PATHS
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
           __builtin_cpu_supports("popcnt");
#else
    return 0;
#endif
}

static int cpu_has_avx512(void) {
#ifdef CVFL_X86_PATHS
    __builtin_cpu_init();
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd");
#else
    return 0;
#endif
}

typedef struct {
    const char *name;
    const kernels_t *table;
    int (*supported)(void);
} kpath_t;

static int always(void) { return 1; }

static const kpath_t paths[] = {
#ifdef CVFL_X86_PATHS
    {"avx512", &table_avx512, cpu_has_avx512},
    {"avx2", &table_avx2, cpu_has_avx2},
#endif
    {"portable", &table_portable, always},
};
#define NPATHS ((int)(sizeof(paths) / sizeof(paths[0])))

static const kernels_t *KT = &table_portable; /* the path in use (set once, at import) */
static const char *KT_NAME = "portable";

/* Choose the path: CVFL_KERNEL_PATH if set and non-empty, else the widest supported one.
   CVFL_KERNEL_PATH=torch selects the torch implementation for torch tensors (Python side,
   cvfl_theory.compressors._torch_kernels); numpy arrays keep the widest compiled path. */
static int choose_path(void) {
    const char *want = getenv("CVFL_KERNEL_PATH");
    if (want != NULL && strcmp(want, "torch") == 0) want = NULL;
    if (want != NULL && *want != 0) {
        for (int q = 0; q < NPATHS; q++) {
            if (strcmp(want, paths[q].name) != 0) continue;
            if (!paths[q].supported()) {
                PyErr_Format(PyExc_ImportError,
                             "cvfl_theory._kernels: CVFL_KERNEL_PATH=%s, but this CPU lacks the "
                             "instructions of that path (unset CVFL_KERNEL_PATH to choose "
                             "automatically)", want);
                return -1;
            }
            KT = paths[q].table, KT_NAME = paths[q].name;
            return 0;
        }
        PyErr_Format(PyExc_ImportError,
                     "cvfl_theory._kernels: CVFL_KERNEL_PATH=%s is not a kernel path of this "
                     "build; the paths are avx512, avx2, portable (x86-64) or portable, and torch "
                     "(torch tensors on the torch path)", want);
        return -1;
    }
    for (int q = 0; q < NPATHS; q++) {
        if (paths[q].supported()) {
            KT = paths[q].table, KT_NAME = paths[q].name;
            return 0;
        }
    }
    return 0;
}

/* path() -> the name of the path in use. */
static PyObject *py_path(PyObject *self, PyObject *args) { return PyUnicode_FromString(KT_NAME); }

/* paths() -> the names of the paths this CPU can run, widest first. */
static PyObject *py_paths(PyObject *self, PyObject *args) {
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (int q = 0; q < NPATHS; q++) {
        if (!paths[q].supported()) continue;
        PyObject *s = PyUnicode_FromString(paths[q].name);
        if (s == NULL || PyList_Append(out, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(s);
    }
    return out;
}


/* row_ranges(x, xt, B, P, lo, hi): the sent min-max range of every row (float64 buffers). */
static PyObject *py_row_ranges(PyObject *self, PyObject *args) {
    PyObject *xo, *loo, *hio;
    int xt;
    Py_ssize_t B, P;
    if (!PyArg_ParseTuple(args, "OinnOO", &xo, &xt, &B, &P, &loo, &hio)) return NULL;
    if (xt != T_F32 && xt != T_F64) {
        PyErr_SetString(PyExc_ValueError, "row_ranges: bad type code");
        return NULL;
    }
    Py_buffer xv, lov, hiv;
    xv.obj = lov.obj = hiv.obj = NULL;
    PyObject *ret = NULL;
    if (get_buffer(xo, &xv, 0, xt, B * P, "x", 0) < 0) goto done;
    if (get_buffer(loo, &lov, 1, T_F64, B, "lo", 0) < 0) goto done;
    if (get_buffer(hio, &hiv, 1, T_F64, B, "hi", 0) < 0) goto done;
    Py_BEGIN_ALLOW_THREADS
    if (xt == T_F32) KT->row_ranges_f32((const float *)xv.buf, B, P, (double *)lov.buf, (double *)hiv.buf);
    else KT->row_ranges_f64((const double *)xv.buf, B, P, (double *)lov.buf, (double *)hiv.buf);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    release(&xv); release(&lov); release(&hiv);
    return ret;
}


/* The lo/hi arguments of the quantize calls: per-row outputs (rowmode) or 1 or B given values. */
static int get_bounds(int rowmode, PyObject *loo, PyObject *hio, Py_ssize_t B, Py_buffer *lov,
                      Py_buffer *hiv, rowparam *lo, rowparam *hi) {
    if (rowmode) {
        if (get_buffer(loo, lov, 1, T_F64, B, "lo", 0) < 0) return -1;
        if (get_buffer(hio, hiv, 1, T_F64, B, "hi", 0) < 0) return -1;
        lo->v = lov->buf;
        hi->v = hiv->buf;
        lo->stride = hi->stride = 1;
        return 0;
    }
    if (get_rowparam(loo, lov, B, lo, "lo") < 0) return -1;
    return get_rowparam(hio, hiv, B, hi, "hi");
}

/* scalar_quantize(x, xt, B, P, rowmode, lo, hi, L, dither, seed, idx, it, y, yt)
   -> (clipped, non-finite) */
static PyObject *py_scalar_quantize(PyObject *self, PyObject *args) {
    PyObject *xo, *loo, *hio, *idxo, *yo;
    int xt, it, yt, dither, rowmode;
    Py_ssize_t B, P;
    int L;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OinnpOOipKOiOi", &xo, &xt, &B, &P, &rowmode, &loo, &hio, &L,
                          &dither, &seed, &idxo, &it, &yo, &yt))
        return NULL;
    if (idxo == Py_None) it = L > 255 ? T_U16 : T_U8; /* dispatch only */
    if (yo == Py_None) yt = T_F64;
    if ((xt != T_F32 && xt != T_F64) || (it != T_U8 && it != T_U16) ||
        (yt != T_F32 && yt != T_F64) || L < 1 || L > 65535 || (it == T_U8 && L > 255)) {
        PyErr_SetString(PyExc_ValueError, "scalar_quantize: bad type code or level count");
        return NULL;
    }
    Py_buffer xv, lov, hiv, idxv, yv;
    rowparam lo, hi;
    xv.obj = lov.obj = hiv.obj = idxv.obj = yv.obj = NULL;
    PyObject *ret = NULL;
    int64_t nclip = 0, nbad = 0;
    if (get_buffer(xo, &xv, 0, xt, B * P, "x", 0) < 0) goto done;
    if (get_bounds(rowmode, loo, hio, B, &lov, &hiv, &lo, &hi) < 0) goto done;
    if (get_buffer(idxo, &idxv, 1, it, B * P, "idx", 1) < 0) goto done;
    if (get_buffer(yo, &yv, 1, yt, B * P, "y", 1) < 0) goto done;
    Py_BEGIN_ALLOW_THREADS
#define SQ_CALL(F, XT, IT, YT)                                                                  \
    F((const XT *)xv.buf, B, P, rowmode, lo, hi, L, dither, (uint64_t)seed, (IT *)idxv.buf,    \
      (YT *)yv.buf, &nclip, &nbad)
    if (xt == T_F32) {
        if (it == T_U8) {
            if (yt == T_F32) SQ_CALL(KT->sq_f32_u8_f32, float, uint8_t, float);
            else SQ_CALL(KT->sq_f32_u8_f64, float, uint8_t, double);
        } else {
            if (yt == T_F32) SQ_CALL(KT->sq_f32_u16_f32, float, uint16_t, float);
            else SQ_CALL(KT->sq_f32_u16_f64, float, uint16_t, double);
        }
    } else {
        if (it == T_U8) {
            if (yt == T_F32) SQ_CALL(KT->sq_f64_u8_f32, double, uint8_t, float);
            else SQ_CALL(KT->sq_f64_u8_f64, double, uint8_t, double);
        } else {
            if (yt == T_F32) SQ_CALL(KT->sq_f64_u16_f32, double, uint16_t, float);
            else SQ_CALL(KT->sq_f64_u16_f64, double, uint16_t, double);
        }
    }
#undef SQ_CALL
    Py_END_ALLOW_THREADS
    ret = Py_BuildValue("(LL)", (long long)nclip, (long long)nbad);
done:
    release(&xv); release(&lov); release(&hiv); release(&idxv); release(&yv);
    return ret;
}

/* scalar_dequantize(idx, it, B, P, lo, hi, L, dither, seed, y, yt) */
static PyObject *py_scalar_dequantize(PyObject *self, PyObject *args) {
    PyObject *idxo, *loo, *hio, *yo;
    int it, yt, dither, L;
    Py_ssize_t B, P;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OinnOOipKOi", &idxo, &it, &B, &P, &loo, &hio, &L, &dither,
                          &seed, &yo, &yt))
        return NULL;
    if ((it != T_U8 && it != T_U16) || (yt != T_F32 && yt != T_F64) || L < 1 || L > 65535) {
        PyErr_SetString(PyExc_ValueError, "scalar_dequantize: bad type code or level count");
        return NULL;
    }
    Py_buffer idxv, lov, hiv, yv;
    rowparam lo, hi;
    idxv.obj = lov.obj = hiv.obj = yv.obj = NULL;
    PyObject *ret = NULL;
    if (get_buffer(idxo, &idxv, 0, it, B * P, "idx", 0) < 0) goto done;
    if (get_rowparam(loo, &lov, B, &lo, "lo") < 0) goto done;
    if (get_rowparam(hio, &hiv, B, &hi, "hi") < 0) goto done;
    if (get_buffer(yo, &yv, 1, yt, B * P, "y", 0) < 0) goto done;
    Py_BEGIN_ALLOW_THREADS
    uint64_t s = (uint64_t)seed;
    if (it == T_U8) {
        if (yt == T_F32) KT->sdq_u8_f32((const uint8_t *)idxv.buf, B, P, lo, hi, L, dither, s, (float *)yv.buf);
        else KT->sdq_u8_f64((const uint8_t *)idxv.buf, B, P, lo, hi, L, dither, s, (double *)yv.buf);
    } else {
        if (yt == T_F32) KT->sdq_u16_f32((const uint16_t *)idxv.buf, B, P, lo, hi, L, dither, s, (float *)yv.buf);
        else KT->sdq_u16_f64((const uint16_t *)idxv.buf, B, P, lo, hi, L, dither, s, (double *)yv.buf);
    }
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    release(&idxv); release(&lov); release(&hiv); release(&yv);
    return ret;
}
/* Parse the codebook tuple (a, lut int32 (rows, width), rows, width, i0, j0, pxy, size), pxy the
   codewords' coordinates interleaved (2 size float64). */
static int get_hexcode(PyObject *cb, hexcode *hc, Py_buffer *lutv, Py_buffer *pxyv) {
    PyObject *luto, *pxyo;
    lutv->obj = pxyv->obj = NULL;
    if (!PyArg_ParseTuple(cb, "dOnnddOn", &hc->a, &luto, &hc->rows, &hc->width, &hc->i0,
                          &hc->j0, &pxyo, &hc->size))
        return -1;
    if (hc->rows < 1 || hc->width < 1 || hc->size < 1 || hc->size > 65536 || !(hc->a > 0.0)) {
        PyErr_SetString(PyExc_ValueError, "codebook: empty or oversized table, or scale <= 0");
        return -1;
    }
    /* the nearest-point search computes cell indices in int32 (see hex_nearest_vec) */
    if (hc->rows > (1 << 24) / hc->width || !(fabs(hc->i0) <= 0x1p24) ||
        !(fabs(hc->j0) <= 0x1p24) || hc->i0 != (double)(int32_t)hc->i0 ||
        hc->j0 != (double)(int32_t)hc->j0) {
        PyErr_SetString(PyExc_ValueError, "codebook: table of more than 2^24 cells, or its "
                        "origin (i0, j0) not integers of magnitude <= 2^24");
        return -1;
    }
    if (get_buffer(luto, lutv, 0, T_I32, hc->rows * hc->width, "lut", 0) < 0) return -1;
    if (get_buffer(pxyo, pxyv, 0, T_F64, 2 * hc->size, "pxy", 0) < 0) return -1;
    hc->lut = (const int32_t *)lutv->buf;
    for (Py_ssize_t q = 0; q < hc->rows * hc->width; q++) {
        if (hc->lut[q] < 0 || hc->lut[q] >= hc->size) {
            PyErr_SetString(PyExc_ValueError, "codebook: lookup table entry out of range");
            return -1;
        }
    }
    hc->pxy = (const double *)pxyv->buf;
    return 0;
}

/* hex_quantize(x, xt, B, P, rowmode, lo, hi, codebook, dither, seed, idx, it, y, yt)
   -> (clipped, non-finite) */
static PyObject *py_hex_quantize(PyObject *self, PyObject *args) {
    PyObject *xo, *loo, *hio, *cbo, *idxo, *yo;
    int xt, it, yt, dither, rowmode;
    Py_ssize_t B, P;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OinnpOOO!pKOiOi", &xo, &xt, &B, &P, &rowmode, &loo, &hio,
                          &PyTuple_Type, &cbo, &dither, &seed, &idxo, &it, &yo, &yt))
        return NULL;
    if (idxo == Py_None) it = T_U16; /* dispatch only */
    if (yo == Py_None) yt = T_F64;
    if ((xt != T_F32 && xt != T_F64) || (it != T_U8 && it != T_U16) ||
        (yt != T_F32 && yt != T_F64)) {
        PyErr_SetString(PyExc_ValueError, "hex_quantize: bad type code");
        return NULL;
    }
    Py_ssize_t npairs = (P + 1) / 2;
    Py_buffer xv, lov, hiv, idxv, yv, lutv, pxyv;
    rowparam lo, hi;
    hexcode hc;
    xv.obj = lov.obj = hiv.obj = idxv.obj = yv.obj = lutv.obj = pxyv.obj = NULL;
    PyObject *ret = NULL;
    int64_t counts[2];
    if (get_hexcode(cbo, &hc, &lutv, &pxyv) < 0) goto done;
    if (idxo != Py_None && it == T_U8 && hc.size > 256) {
        PyErr_SetString(PyExc_ValueError, "hex_quantize: codebook too large for uint8 indices");
        goto done;
    }
    if (get_buffer(xo, &xv, 0, xt, B * P, "x", 0) < 0) goto done;
    if (get_bounds(rowmode, loo, hio, B, &lov, &hiv, &lo, &hi) < 0) goto done;
    if (get_buffer(idxo, &idxv, 1, it, B * npairs, "idx", 1) < 0) goto done;
    if (get_buffer(yo, &yv, 1, yt, B * P, "y", 1) < 0) goto done;
    Py_BEGIN_ALLOW_THREADS
    KT->hex_run(xv.buf, xt, B, P, rowmode, lo, hi, &hc, dither, (uint64_t)seed, idxv.buf, it, yv.buf,
            yt, counts);
    Py_END_ALLOW_THREADS
    ret = Py_BuildValue("(LL)", (long long)counts[0], (long long)counts[1]);
done:
    release(&xv); release(&lov); release(&hiv); release(&idxv); release(&yv);
    release(&lutv); release(&pxyv);
    return ret;
}

/* hex_dequantize(idx, it, B, P, lo, hi, codebook, dither, seed, y, yt) */
static PyObject *py_hex_dequantize(PyObject *self, PyObject *args) {
    PyObject *idxo, *loo, *hio, *cbo, *yo;
    int it, yt, dither;
    Py_ssize_t B, P;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OinnOOO!pKOi", &idxo, &it, &B, &P, &loo, &hio, &PyTuple_Type,
                          &cbo, &dither, &seed, &yo, &yt))
        return NULL;
    if ((it != T_U8 && it != T_U16) || (yt != T_F32 && yt != T_F64)) {
        PyErr_SetString(PyExc_ValueError, "hex_dequantize: bad type code");
        return NULL;
    }
    Py_ssize_t npairs = (P + 1) / 2;
    Py_buffer idxv, lov, hiv, yv, lutv, pxyv;
    rowparam lo, hi;
    hexcode hc;
    idxv.obj = lov.obj = hiv.obj = yv.obj = lutv.obj = pxyv.obj = NULL;
    PyObject *ret = NULL;
    int64_t counts[2];
    if (get_hexcode(cbo, &hc, &lutv, &pxyv) < 0) goto done;
    if (get_buffer(idxo, &idxv, 0, it, B * npairs, "idx", 0) < 0) goto done;
    if (get_rowparam(loo, &lov, B, &lo, "lo") < 0) goto done;
    if (get_rowparam(hio, &hiv, B, &hi, "hi") < 0) goto done;
    if (get_buffer(yo, &yv, 1, yt, B * P, "y", 0) < 0) goto done;
    Py_BEGIN_ALLOW_THREADS
    KT->hex_run(NULL, T_F32, B, P, 0, lo, hi, &hc, dither, (uint64_t)seed, idxv.buf, it, yv.buf, yt,
            counts);
    Py_END_ALLOW_THREADS
    if (counts[1] > 0) {
        PyErr_Format(PyExc_ValueError, "%lld codeword indices >= codebook size %zd",
                     (long long)counts[1], hc.size);
        goto done;
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    release(&idxv); release(&lov); release(&hiv); release(&yv);
    release(&lutv); release(&pxyv);
    return ret;
}

/* a2_nearest(X, Y, n, i, j): nearest points of scaled coordinates (float64 in, float64 out). */
static PyObject *py_a2_nearest(PyObject *self, PyObject *args) {
    PyObject *Xo, *Yo, *io, *jo;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOnOO", &Xo, &Yo, &n, &io, &jo)) return NULL;
    Py_buffer Xv, Yv, iv, jv;
    Xv.obj = Yv.obj = iv.obj = jv.obj = NULL;
    PyObject *ret = NULL;
    if (get_buffer(Xo, &Xv, 0, T_F64, n, "X", 0) < 0) goto done;
    if (get_buffer(Yo, &Yv, 0, T_F64, n, "Y", 0) < 0) goto done;
    if (get_buffer(io, &iv, 1, T_F64, n, "i", 0) < 0) goto done;
    if (get_buffer(jo, &jv, 1, T_F64, n, "j", 0) < 0) goto done;
    {
        const double *X = Xv.buf, *Y = Yv.buf;
        double *I = iv.buf, *J = jv.buf;
        KT->a2_nearest(X, Y, n, I, J);
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    release(&Xv); release(&Yv); release(&iv); release(&jv);
    return ret;
}

/* hex_dither(seed, g0, n, a, ux, uy): the hexagonal quantizer's dither of pairs g0 .. g0+n-1
   (the stream is generated from its start: for tests and documentation). */
static PyObject *py_hex_dither(PyObject *self, PyObject *args) {
    unsigned long long seed;
    Py_ssize_t g0, n;
    double a;
    PyObject *uxo, *uyo;
    if (!PyArg_ParseTuple(args, "KnndOO", &seed, &g0, &n, &a, &uxo, &uyo)) return NULL;
    if (g0 < 0 || n < 0) {
        PyErr_SetString(PyExc_ValueError, "hex_dither: g0 and n must be >= 0");
        return NULL;
    }
    Py_buffer uxv, uyv;
    uxv.obj = uyv.obj = NULL;
    PyObject *ret = NULL;
    if (get_buffer(uxo, &uxv, 1, T_F64, n, "ux", 0) < 0) goto done;
    if (get_buffer(uyo, &uyv, 1, T_F64, n, "uy", 0) < 0) goto done;
    {
        KT->hex_dither((uint64_t)seed, g0, n, a, (double *)uxv.buf, (double *)uyv.buf);
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    release(&uxv); release(&uyv);
    return ret;
}

/* dither_words(seed, e0, n, out uint32): the scalar quantizer's words h_e, e = e0 .. e0+n-1
   (the stream is generated from its start: for tests and documentation). */
static PyObject *py_dither_words(PyObject *self, PyObject *args) {
    unsigned long long seed;
    Py_ssize_t e0, n;
    PyObject *outo;
    if (!PyArg_ParseTuple(args, "KnnO", &seed, &e0, &n, &outo)) return NULL;
    if (e0 < 0 || n < 0) {
        PyErr_SetString(PyExc_ValueError, "dither_words: e0 and n must be >= 0");
        return NULL;
    }
    Py_buffer ov;
    if (get_buffer(outo, &ov, 1, T_I32, n, "out", 0) < 0) return NULL;
    uint32_t *out = ov.buf;
    KT->dither_words((uint64_t)seed, e0, n, out);
    release(&ov);
    Py_RETURN_NONE;
}

/* topk_select(x, xt, B, P, k, cols int32 (B, k), vals xt (B, k)) */
static PyObject *py_topk_select(PyObject *self, PyObject *args) {
    PyObject *xo, *colso, *valso;
    int xt;
    Py_ssize_t B, P, k;
    if (!PyArg_ParseTuple(args, "OinnnOO", &xo, &xt, &B, &P, &k, &colso, &valso)) return NULL;
    if ((xt != T_F32 && xt != T_F64) || k < 1 || k > P || P > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "topk_select: bad type code or k not in [1, P]");
        return NULL;
    }
    Py_buffer xv, cv, vv;
    xv.obj = cv.obj = vv.obj = NULL;
    PyObject *ret = NULL;
    void *keys = NULL;
    if (get_buffer(xo, &xv, 0, xt, B * P, "x", 0) < 0) goto done;
    if (get_buffer(colso, &cv, 1, T_I32, B * k, "cols", 0) < 0) goto done;
    if (get_buffer(valso, &vv, 1, xt, B * k, "vals", 0) < 0) goto done;
    /* keys (8 bytes each) for TOPK_GROUP rows and flags (written before they are read):
       PAD64(P) of each per row (the kernel zeroes the keys' pads) */
    Py_ssize_t np = PAD64(P);
    keys = PyMem_RawMalloc((size_t)(TOPK_GROUP * 8 * np + np));
    if (keys == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint8_t *sel = (uint8_t *)keys + TOPK_GROUP * 8 * np;
    int64_t bad = 0;
    Py_BEGIN_ALLOW_THREADS
    if (xt == T_F32)
        bad = KT->topk_f32((const float *)xv.buf, B, P, k, (int32_t *)keys, sel,
                       (int32_t *)cv.buf, (float *)vv.buf);
    else
        bad = KT->topk_f64((const double *)xv.buf, B, P, k, (int64_t *)keys, sel,
                       (int32_t *)cv.buf, (double *)vv.buf);
    Py_END_ALLOW_THREADS
    ret = PyLong_FromLongLong((long long)bad);
done:
    PyMem_RawFree(keys);
    release(&xv); release(&cv); release(&vv);
    return ret;
}

/* topk_scatter(cols int32 (B, k), vals (B, k), vt, B, P, k, y vt (B, P)) */
static PyObject *py_topk_scatter(PyObject *self, PyObject *args) {
    PyObject *colso, *valso, *yo;
    int vt;
    Py_ssize_t B, P, k;
    if (!PyArg_ParseTuple(args, "OOinnnO", &colso, &valso, &vt, &B, &P, &k, &yo)) return NULL;
    if ((vt != T_F32 && vt != T_F64) || k < 1 || k > P) {
        PyErr_SetString(PyExc_ValueError, "topk_scatter: bad type code or k not in [1, P]");
        return NULL;
    }
    Py_buffer cv, vv, yv;
    cv.obj = vv.obj = yv.obj = NULL;
    PyObject *ret = NULL;
    if (get_buffer(colso, &cv, 0, T_I32, B * k, "cols", 0) < 0) goto done;
    if (get_buffer(valso, &vv, 0, vt, B * k, "vals", 0) < 0) goto done;
    if (get_buffer(yo, &yv, 1, vt, B * P, "y", 0) < 0) goto done;
    {
        const int32_t *c = cv.buf;
        int64_t bad = 0;
        for (Py_ssize_t q = 0; q < B * k; q++) bad += (c[q] < 0) | (c[q] >= P);
        if (bad) {
            PyErr_Format(PyExc_ValueError, "%lld top-k column indices not in [0, P) = [0, %zd)",
                         (long long)bad, P);
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    if (vt == T_F32)
        KT->scatter_f32((const int32_t *)cv.buf, (const float *)vv.buf, B, P, k, (float *)yv.buf);
    else
        KT->scatter_f64((const int32_t *)cv.buf, (const double *)vv.buf, B, P, k, (double *)yv.buf);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    release(&cv); release(&vv); release(&yv);
    return ret;
}

/* ------------------------------------------------------------------------------------------- */
/* sparse encoders (THEORY K1, K3): support positions, gathered values, the averaging decoder   */
/* (cvfl_theory.sampling / encoders / encoded). Scalar loops: memory- or latency-bound, so one  */
/* version serves every path. Same operations in the same order as the numpy definitions they  */
/* replace (tests/test_encoders.py compares them bit for bit).                                  */

/* geometric_positions(e, n, scale, d, start) -> (count, last). e holds n standard exponentials
   E_k; the gaps are g_k = floor(scale * E_k + 1) (the product, then the sum, each rounded to
   float64 as numpy rounds them, then the floor) and the positions pos_k = pos_{k-1} + g_k from
   pos_{-1} = start (-1 or an earlier position). Writes pos_k as int64 over e[k] while pos_k < d
   and stops at the first pos_k that is not; count = positions written, last = pos_{n-1} if none
   stopped. The numpy definition sums in float64, exact for integers below 2^53 >= d; here the
   sum is an int64 (a one-cycle dependency instead of a four-cycle one): the same positions
   below d, and a gap t >= 2^52 (or a NaN) ends the support in both (it reaches d). */
static PyObject *py_geometric_positions(PyObject *self, PyObject *args) {
    PyObject *eo;
    Py_ssize_t n;
    double scale, d, start;
    if (!PyArg_ParseTuple(args, "Onddd", &eo, &n, &scale, &d, &start)) return NULL;
    if (n < 0 || !(d >= 1 && d <= 9007199254740992.0) || !(start >= -1 && start < d) ||
        start != (double)(int64_t)start) {
        PyErr_SetString(PyExc_ValueError, "geometric_positions: need n >= 0, 1 <= d <= 2^53 "
                                          "and an integer start in [-1, d)");
        return NULL;
    }
    Py_buffer ev;
    if (get_buffer(eo, &ev, 1, T_F64, n, "e", 0) < 0) return NULL;
    double *e = ev.buf;
    int64_t pos = (int64_t)start, dd = (int64_t)d;
    Py_ssize_t k = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; k < n; k++) {
        double t = scale * e[k];
        t = t + 1.0;
        if (!(t < 4503599627370496.0)) break; /* 2^52 (or NaN): past d */
        pos += (int64_t)t;                     /* floor: t >= 1 */
        if (pos >= dd) break;
        memcpy(e + k, &pos, 8);
    }
    Py_END_ALLOW_THREADS
    release(&ev);
    return Py_BuildValue("nd", k, (double)pos);
}

/* sparse_values(x, xt, d, idx, k, centre, p, out, check) -> entries that are not finite, or -1.
   out[q] = ((x[idx[q]] - c) / p) + c in x's precision (float32 or float64), the subtraction and
   the addition skipped when c == 0; idx must lie in [0, d). With check, x is first scanned for
   NaN/inf (-1, nothing written: the caller names the entry); the row is then in cache for the
   gather, so the data are read from memory once. */
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(ptr) __builtin_prefetch(ptr)
#else
#define PREFETCH(ptr) ((void)0)
#endif
#define SV_AHEAD 64 /* indices ahead: the gather runs at the speed of a streaming read */
#define DEFINE_SPARSE_VALUES(NAME, T)                                                           \
    static Py_ssize_t NAME(const T *x, const int64_t *idx, Py_ssize_t k, T c, T p, T *out) {    \
        Py_ssize_t bad = 0;                                                                     \
        for (Py_ssize_t q = 0; q < k; q++) {                                                    \
            if (q + SV_AHEAD < k) PREFETCH(x + idx[q + SV_AHEAD]);                              \
            T v = x[idx[q]];                                                                    \
            if (c != 0) v = v - c;                                                              \
            v = v / p;                                                                          \
            if (c != 0) v = v + c;                                                              \
            out[q] = v;                                                                         \
            bad += !isfinite(v);                                                                \
        }                                                                                       \
        return bad;                                                                             \
    }
DEFINE_SPARSE_VALUES(sparse_values_f32, float)
DEFINE_SPARSE_VALUES(sparse_values_f64, double)

/* Whether x[0 .. d) holds a NaN or an inf (all exponent bits set), in blocks of 64 entries
   OR-reduced without branches (vectorizes on the baseline SSE2 too). */
#define DEFINE_ANY_NONFINITE(NAME, T, U, EXP)                                                   \
    static int NAME(const T *x, Py_ssize_t d) {                                                 \
        Py_ssize_t j = 0;                                                                       \
        for (; j + 64 <= d; j += 64) {                                                          \
            U u[64], any = 0;                                                                   \
            memcpy(u, x + j, sizeof(u));                                                        \
            for (int q = 0; q < 64; q++) any |= (U)0 - (U)((u[q] & EXP) == EXP);                \
            if (any) return 1;                                                                  \
        }                                                                                       \
        for (; j < d; j++) {                                                                    \
            U u;                                                                                \
            memcpy(&u, x + j, sizeof(U));                                                       \
            if ((u & EXP) == EXP) return 1;                                                     \
        }                                                                                       \
        return 0;                                                                               \
    }
DEFINE_ANY_NONFINITE(any_nonfinite_f32, float, uint32_t, 0x7F800000u)
DEFINE_ANY_NONFINITE(any_nonfinite_f64, double, uint64_t, 0x7FF0000000000000ULL)

static int indices_in_range(const int64_t *idx, Py_ssize_t k, Py_ssize_t d, int increasing) {
    for (Py_ssize_t q = 0; q < k; q++) {
        if (idx[q] < 0 || idx[q] >= d) return 0;
        if (increasing && q > 0 && idx[q] <= idx[q - 1]) return 0;
    }
    return 1;
}

static PyObject *py_sparse_values(PyObject *self, PyObject *args) {
    PyObject *xo, *io, *oo;
    int xt;
    Py_ssize_t d, k;
    double c, p;
    int check;
    if (!PyArg_ParseTuple(args, "OinOnddOp", &xo, &xt, &d, &io, &k, &c, &p, &oo, &check))
        return NULL;
    if ((xt != T_F32 && xt != T_F64) || d < 0 || k < 0) {
        PyErr_SetString(PyExc_ValueError, "sparse_values: bad type code or size");
        return NULL;
    }
    Py_buffer xv, iv, ov;
    xv.obj = iv.obj = ov.obj = NULL;
    PyObject *ret = NULL;
    Py_ssize_t bad = 0;
    if (get_buffer(xo, &xv, 0, xt, d, "x", 0) < 0) goto done;
    if (get_buffer(io, &iv, 0, T_I64, k, "idx", 0) < 0) goto done;
    if (get_buffer(oo, &ov, 1, xt, k, "out", 0) < 0) goto done;
    if (!indices_in_range(iv.buf, k, d, 0)) {
        PyErr_Format(PyExc_ValueError, "sparse_values: an index is not in [0, %zd)", d);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    if (check && (xt == T_F32 ? any_nonfinite_f32(xv.buf, d) : any_nonfinite_f64(xv.buf, d)))
        bad = -1;
    else if (xt == T_F32)
        bad = sparse_values_f32(xv.buf, iv.buf, k, (float)c, (float)p, ov.buf);
    else
        bad = sparse_values_f64(xv.buf, iv.buf, k, c, p, ov.buf);
    Py_END_ALLOW_THREADS
    ret = PyLong_FromSsize_t(bad);
done:
    release(&xv); release(&iv); release(&ov);
    return ret;
}

/* scatter_add(acc, d, idx, k, vals, vt, centre, scale) -> whether it added: acc[idx[q]] +=
   ((double)vals[q] - c) * scale (the subtraction skipped when c == 0), for strictly increasing
   idx in [0, d); anything else returns False and leaves acc as it was. */
#define DEFINE_SCATTER_ADD(NAME, T)                                                             \
    static void NAME(double *acc, const int64_t *idx, Py_ssize_t k, const T *vals, double c,    \
                     double scale) {                                                            \
        for (Py_ssize_t q = 0; q < k; q++) {                                                    \
            double v = (double)vals[q];                                                         \
            if (c != 0) v = v - c;                                                              \
            v = v * scale;                                                                      \
            acc[idx[q]] = acc[idx[q]] + v;                                                      \
        }                                                                                       \
    }
DEFINE_SCATTER_ADD(scatter_add_f32, float)
DEFINE_SCATTER_ADD(scatter_add_f64, double)

static PyObject *py_scatter_add(PyObject *self, PyObject *args) {
    PyObject *ao, *io, *vo;
    int vt;
    Py_ssize_t d, k;
    double c, scale;
    if (!PyArg_ParseTuple(args, "OnOnOidd", &ao, &d, &io, &k, &vo, &vt, &c, &scale)) return NULL;
    if ((vt != T_F32 && vt != T_F64) || d < 0 || k < 0) {
        PyErr_SetString(PyExc_ValueError, "scatter_add: bad type code or size");
        return NULL;
    }
    Py_buffer av, iv, vv;
    av.obj = iv.obj = vv.obj = NULL;
    PyObject *ret = NULL;
    if (get_buffer(ao, &av, 1, T_F64, d, "acc", 0) < 0) goto done;
    if (get_buffer(io, &iv, 0, T_I64, k, "idx", 0) < 0) goto done;
    if (get_buffer(vo, &vv, 0, vt, k, "vals", 0) < 0) goto done;
    if (!indices_in_range(iv.buf, k, d, 1)) {
        ret = Py_False;
        Py_INCREF(ret);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    if (vt == T_F32) scatter_add_f32(av.buf, iv.buf, k, vv.buf, c, scale);
    else scatter_add_f64(av.buf, iv.buf, k, vv.buf, c, scale);
    Py_END_ALLOW_THREADS
    ret = Py_True;
    Py_INCREF(ret);
done:
    release(&av); release(&iv); release(&vv);
    return ret;
}

/* ------------------------------------------------------------------------------------------- */
/* the SFC64 state numpy seeds from an integer (cvfl_theory.sampling.node_generators)          */
/* numpy.random.SFC64(seed) for an integer seed < 2^64: SeedSequence(seed) mixes the seed's      */
/* 32-bit words (low first; a seed below 2^32 has one, and the pool's other words hash 0, as a  */
/* zero high word does) into a pool of 4 words with its multiply-xorshift hashes, draws three   */
/* 64-bit words from the pool (generate_state(3, uint64): six 32-bit words, low half first),    */
/* sets the counter to 1 and runs 12 steps of the generator. The constants are SeedSequence's;  */
/* tests/test_sampling.py compares the states with numpy's own over the whole seed range.       */
static uint32_t ss_hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= 0x931E8875u;
    value *= *hash_const;
    return value ^ (value >> 16);
}

static uint32_t ss_mix(uint32_t x, uint32_t y) {
    uint32_t r = 0xCA01F9DDu * x - 0x4973F715u * y;
    return r ^ (r >> 16);
}

static void sfc64_seeded(uint64_t seed, uint64_t s[4]) {
    uint32_t pool[4], hc = 0x43B0D7E5u, words[4] = {(uint32_t)seed, (uint32_t)(seed >> 32), 0, 0};
    for (int i = 0; i < 4; i++) pool[i] = ss_hashmix(words[i], &hc);
    for (int src = 0; src < 4; src++)
        for (int dst = 0; dst < 4; dst++)
            if (src != dst) pool[dst] = ss_mix(pool[dst], ss_hashmix(pool[src], &hc));
    uint32_t hb = 0x8B51F9DDu, out[6];
    for (int k = 0; k < 6; k++) {
        uint32_t v = pool[k % 4] ^ hb;
        hb *= 0x58F38DEDu;
        v *= hb;
        out[k] = v ^ (v >> 16);
    }
    for (int k = 0; k < 3; k++) s[k] = (uint64_t)out[2 * k] | ((uint64_t)out[2 * k + 1] << 32);
    s[3] = 1;
    for (int i = 0; i < 12; i++) {
        uint64_t tmp = s[0] + s[1] + s[3]++;
        s[0] = s[1] ^ (s[1] >> 11);
        s[1] = s[2] + (s[2] << 3);
        s[2] = ((s[2] << 24) | (s[2] >> 40)) + tmp;
    }
}

/* sfc64_state(seed) -> the 4 words of numpy.random.SFC64(seed)'s state, for 0 <= seed < 2^64 */
static PyObject *py_sfc64_state(PyObject *self, PyObject *arg) {
    unsigned long long seed = PyLong_AsUnsignedLongLong(arg); /* refuses < 0, >= 2^64, non-int */
    if (seed == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    uint64_t s[4];
    sfc64_seeded((uint64_t)seed, s);
    return Py_BuildValue("(KKKK)", (unsigned long long)s[0], (unsigned long long)s[1],
                         (unsigned long long)s[2], (unsigned long long)s[3]);
}

/* ------------------------------------------------------------------------------------------- */
/* fixed-order row sums (THEORY K1: the centre mu = "mean"; cvfl_theory._validate.row_sums)    */
/* The definition (the same bits on every path, compiler and machine; tests/test_encoders.py    */
/* checks it against a numpy transcription): for a row x_0 .. x_{d-1} (float32 or float64),     */
/*   lanes   a_l = (((+0 + x_l) + x_{l+16}) + x_{l+32}) + ...,  l = 0 .. 15, in float64 (each    */
/*           x_j widened exactly; a lane with no entry stays +0), i.e. entry j goes to lane      */
/*           j mod 16, the entries of a lane added in increasing j;                              */
/*   combine a_l = a_l + a_{l+h} for l < h, h = 8, 4, 2, 1 (a halving tree); the sum is a_0.    */
/* Each lane is its own chain of correctly rounded additions, so vectorising over the lanes    */
/* needs no reassociation (see RS_LANES below). A NaN or inf entry gives a non-finite sum; a    */
/* float64 row may also overflow to +-inf (a float32 row cannot: its entries are < 2^128).     */

/* row_sums(x, xt, n, d, out): out[i] = the sum of row i of the C-contiguous (n, d) array x
   (float32 or float64, type code xt) into the float64 buffer out of n items. */
static PyObject *py_row_sums(PyObject *self, PyObject *args) {
    PyObject *xo, *oo;
    int xt;
    Py_ssize_t n, d;
    if (!PyArg_ParseTuple(args, "OinnO", &xo, &xt, &n, &d, &oo)) return NULL;
    if ((xt != T_F32 && xt != T_F64) || n < 0 || d < 0 || (d > 0 && n > PY_SSIZE_T_MAX / 8 / d)) {
        PyErr_SetString(PyExc_ValueError, "row_sums: bad type code or size");
        return NULL;
    }
    Py_buffer xv, ov;
    xv.obj = ov.obj = NULL;
    PyObject *ret = NULL;
    if (get_buffer(xo, &xv, 0, xt, n * d, "x", 0) < 0) goto done;
    if (get_buffer(oo, &ov, 1, T_F64, n, "out", 0) < 0) goto done;
    Py_BEGIN_ALLOW_THREADS
    if (xt == T_F32) KT->row_sums_f32((const float *)xv.buf, n, d, (double *)ov.buf);
    else KT->row_sums_f64((const double *)xv.buf, n, d, (double *)ov.buf);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    release(&xv); release(&ov);
    return ret;
}

/* ------------------------------------------------------------------------------------------- */

#define MODULE_DOC                                                                              \
    "The compiled kernels of the compressors (source: ``cvfl_theory/_kernels.c``).\n\n"          \
    "One implementation of each kernel for float32 and float64 data (float16 is widened), "     \
    "fused so that every entry is read and written once per side, with float64 arithmetic "    \
    "and one final rounding to the output dtype. Only correctly rounded operations are used "  \
    "and the module is built with ``-ffp-contract=off``, so every path (``avx512``, ``avx2``, "  \
    "``portable``: chosen at import, the widest the CPU supports, or forced by the "            \
    "environment variable ``CVFL_KERNEL_PATH``; ``path()`` names it), compiler and machine gives "     \
    "the same bits.\n\n"                                                                        \
    "**Shared dither.** The stream :math:`w_0, w_1, \\dots` of the message seed is "            \
    "``xoshiro256**`` (Blackman and Vigna) run on 16 lanes, word :math:`n` being lane "              \
    ":math:`n \\bmod 16` at its step :math:`\\lfloor n/16 \\rfloor`; lane :math:`l` starts from " \
    "the SplitMix64 outputs :math:`4l, \\dots, 4l+3` of the seed. The scalar quantizer gives "   \
    "entry :math:`e` of the row-major matrix :math:`U_e = (h_e + 1/2)\\,2^{-32}`, :math:`h_e` "   \
    "the 32-bit half :math:`e \\bmod 2` (low half first) of :math:`w_{\\lfloor e/2 \\rfloor}`; "    \
    "the hexagonal quantizer gives pair :math:`p` the top 23 bits of both halves of "           \
    ":math:`w_p` (see :class:`~cvfl_theory.compressors.HexLatticeQuantizer`).\n\n"               \
    "**Ranges.** A min-max range is computed in the same pass (row minima and maxima, rounded " \
    "outwards to float32: what is sent); a given range clamps and counts clipped and "          \
    "non-finite entries. The functions are private: their callers (the compressors, the "     \
    "encoders and ``_validate.row_sums``) validate the arguments, the kernels check only "      \
    "buffer sizes, formats and contiguity."

static PyMethodDef methods[] = {
    {"row_ranges", py_row_ranges, METH_VARARGS,
     "row_ranges(x, xt, B, P, lo, hi): the float32 min-max range of every row, rounded outwards, "
     "into float64 buffers (non-finite if the row holds NaN or inf)."},
    {"scalar_quantize", py_scalar_quantize, METH_VARARGS,
     "scalar_quantize(x, xt, B, P, rowmode, lo, hi, L, dither, seed, idx, it, y, yt) -> "
     "(clipped, non-finite)"},
    {"scalar_dequantize", py_scalar_dequantize, METH_VARARGS,
     "scalar_dequantize(idx, it, B, P, lo, hi, L, dither, seed, y, yt)"},
    {"hex_quantize", py_hex_quantize, METH_VARARGS,
     "hex_quantize(x, xt, B, P, rowmode, lo, hi, codebook, dither, seed, idx, it, y, yt) -> "
     "(clipped, non-finite)"},
    {"hex_dequantize", py_hex_dequantize, METH_VARARGS,
     "hex_dequantize(idx, it, B, P, lo, hi, codebook, dither, seed, y, yt)"},
    {"a2_nearest", py_a2_nearest, METH_VARARGS, "a2_nearest(X, Y, n, i, j)"},
    {"hex_dither", py_hex_dither, METH_VARARGS, "hex_dither(seed, g0, n, a, ux, uy)"},
    {"dither_words", py_dither_words, METH_VARARGS, "dither_words(seed, e0, n, out)"},
    {"topk_select", py_topk_select, METH_VARARGS,
     "topk_select(x, xt, B, P, k, cols, vals) -> number of rows holding NaN or inf"},
    {"topk_scatter", py_topk_scatter, METH_VARARGS, "topk_scatter(cols, vals, vt, B, P, k, y)"},
    {"geometric_positions", py_geometric_positions, METH_VARARGS,
     "geometric_positions(e, n, scale, d, start) -> (count, last)"},
    {"sparse_values", py_sparse_values, METH_VARARGS,
     "sparse_values(x, xt, d, idx, k, centre, p, out, check) -> entries not finite, or -1"},
    {"scatter_add", py_scatter_add, METH_VARARGS,
     "scatter_add(acc, d, idx, k, vals, vt, centre, scale) -> whether it added"},
    {"sfc64_state", py_sfc64_state, METH_O,
     "sfc64_state(seed) -> the 4 state words of numpy.random.SFC64(seed), 0 <= seed < 2^64"},
    {"row_sums", py_row_sums, METH_VARARGS,
     "row_sums(x, xt, n, d, out): the row sums of x (n, d) into out (n float64 values), in the "
     "fixed order of the source's definition (16 float64 lanes, entry j in lane j mod 16, the "
     "lanes combined by halving)."},
    {"path", py_path, METH_NOARGS,
     "path() -> the kernel path in use: 'avx512', 'avx2' or 'portable' (chosen at import: the "
     "widest one the CPU supports, or the environment variable CVFL_KERNEL_PATH)."},
    {"paths", py_paths, METH_NOARGS,
     "paths() -> the kernel paths this CPU can run, widest first."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels", MODULE_DOC, -1, methods,
};

PyMODINIT_FUNC PyInit__kernels(void) {
    if (choose_path() < 0) return NULL;
    return PyModule_Create(&module);
}


#else /* CVFL_BODY: the kernels, compiled once per path (K(name), VL) */

/* 2^19 + U for the word w, U = (w + 1/2) 2^-32, exactly, built from its bits: the float64 of
   exponent 19 and significand bits 2w + 1 (an integer shift-add, no conversion instruction) is
   2^19 + (2w + 1) 2^-52 2^19 = 2^19 + U. Then U = dither_v(w) - 2^19 exactly (both in
   [2^19, 2^20), the difference a multiple of 2^-33 below 1). */
static inline double K(dither_v)(uint32_t w) {
    uint64_t bits = ((uint64_t)w << 1) + (uint64_t)BITS_2P19_U0;
    double v;
    memcpy(&v, &bits, 8);
    return v;
}

/* U for a 32-bit word (the scalar quantizer's dither, C5.1). */
static inline double K(unit32)(uint32_t w) { return K(dither_v)(w) - 0x1p19; }

/* (k + 1/2) - U for the word w and an index k < 2^16: (k + 2^19 + 1/2) - (2^19 + U). Both
   operands are exact (multiples of 2^-33 in [2^19, 2^20)), and so is the difference (a multiple
   of 2^-33 of magnitude below 2^16, i.e. at most 49 significant bits): the same double as the
   direct formula, with one conversion and one subtraction. */
static inline double K(centred)(double k, uint32_t w) {
    return (k + 0x1.00001p19) - K(dither_v)(w);
}

/* c ? a : b for doubles, as a bitwise select of their bits (the same value). Why not the ternary
   operator: GCC (12, -ftrapping-math, its default) turns `c ? x - y : z - w` into a branch that
   computes only the chosen difference, and then cannot vectorize the loop on AVX2 ("control
   flow in loop"): undoing the branch would evaluate a floating-point operation the program may
   not evaluate, which could raise a flag. AVX-512 has masked (predicated) arithmetic, so the
   same loop vectorizes there. perf showed the hexagonal quantizer's nearest-point loop running
   as scalar code (vaddsd, vcvttsd2si, vblendvpd on xmm registers) on the AVX2 path: that, and
   the dither generator spilling its 16 ymm registers of state (see stream_steps), made the AVX2
   path 2x to 4x slower than AVX-512 (HexLatticeQuantizer(3) compress + decompress of a
   (4096, 256) float32 tensor: 15.6 ms built for x86-64-v3 against 7.7 ms for x86-64-v4, the
   hexagonal dither alone 11x slower). An integer select of already computed values has nothing
   to speculate. With it, the lane groups of stream_steps and the same-bits shortcuts of
   hex_dither, hex_in (no clamp for a row's own range) and centred, the kernels of the same
   compress + decompress take 3.8 ms on AVX2 and 2.5 ms on AVX-512 (the rest of the gap: half-
   width double vectors and no 64-bit rotate, vprolq, on AVX2). */
static inline double K(select)(int c, double a, double b) {
    uint64_t ua, ub, m = (uint64_t)0 - (uint64_t)(c != 0);
    memcpy(&ua, &a, 8);
    memcpy(&ub, &b, 8);
    ua = (ua & m) | (ub & ~m);
    memcpy(&a, &ua, 8);
    return a;
}

/* rint(v) (round half to even) for |v| < 2^51, exact without -ffast-math. */
static inline double K(round_even)(double v) {
    const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
    return (v + magic) - magic;
}

static inline uint64_t K(rotl64)(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static void K(stream_init)(stream_t *st, uint64_t seed) {
    for (int l = 0; l < LANES; l++) {
        st->s0[l] = mix64(seed + (uint64_t)(4 * l + 1) * GAMMA);
        st->s1[l] = mix64(seed + (uint64_t)(4 * l + 2) * GAMMA);
        st->s2[l] = mix64(seed + (uint64_t)(4 * l + 3) * GAMMA);
        st->s3[l] = mix64(seed + (uint64_t)(4 * l + 4) * GAMMA);
    }
    st->pos = LANES;
    st->has_half = 0;
    st->half = 0;
}

/* `steps` steps of every lane, outputs in stream order into out[0 .. steps * LANES). The state
   lives in registers: the 16 lanes are run in groups of 2 * VL lanes (two vectors of VL 64-bit
   lanes per state word, VL = 8 on AVX-512, 4 on AVX2, 2 on the portable path), one group after
   the other over all `steps`, each group writing its columns of out. The lanes are independent,
   so the grouping changes the order of the work, never a word of the stream: every path gives
   the same bits. (GCC/clang vector extensions; a plain loop over the lanes elsewhere, or with
   -DCVFL_NO_VECTOR_EXT -- same arithmetic, same bits.) Why the grouping: 16 lanes of four state
   words are 64 words, i.e. 8 AVX-512 registers but 16 AVX2 registers -- all of them -- so an
   AVX2 build of a 16-lane-wide step spills its state to the stack on every step (198 stack
   accesses in that build of stream_words, 2 in this one; 3.3x faster); 8 lanes (8 ymm
   registers) leave room for the temporaries. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(CVFL_NO_VECTOR_EXT)
typedef uint64_t K(u64v) __attribute__((vector_size(8 * VL)));

#define XOSHIRO_STEP(V, a, b, c, d, o)                                                          \
    do {                                                                                       \
        V r_ = (b << 2) + b;         /* s1 * 5 */                                              \
        r_ = (r_ << 7) | (r_ >> 57); /* rotl 7 */                                              \
        r_ = (r_ << 3) + r_;         /* * 9 */                                                 \
        memcpy((o), &r_, sizeof r_);                                                           \
        V t_ = b << 17;                                                                        \
        c ^= a;                                                                                \
        d ^= b;                                                                                \
        b ^= c;                                                                                \
        a ^= d;                                                                                \
        c ^= t_;                                                                               \
        d = (d << 45) | (d >> 19);                                                             \
    } while (0)

static ALWAYS_INLINE void K(stream_steps)(stream_t *st, Py_ssize_t steps,
                                          unsigned char *RESTRICT out) {
    const size_t sz = sizeof(K(u64v));
    for (int g = 0; g < LANES; g += 2 * VL) {
        K(u64v) a0, a1, b0, b1, c0, c1, d0, d1;
        memcpy(&a0, st->s0 + g, sz), memcpy(&a1, st->s0 + g + VL, sz);
        memcpy(&b0, st->s1 + g, sz), memcpy(&b1, st->s1 + g + VL, sz);
        memcpy(&c0, st->s2 + g, sz), memcpy(&c1, st->s2 + g + VL, sz);
        memcpy(&d0, st->s3 + g, sz), memcpy(&d1, st->s3 + g + VL, sz);
        for (Py_ssize_t k = 0; k < steps; k++) {
            XOSHIRO_STEP(K(u64v), a0, b0, c0, d0, out + 8 * (k * LANES + g));
            XOSHIRO_STEP(K(u64v), a1, b1, c1, d1, out + 8 * (k * LANES + g + VL));
        }
        memcpy(st->s0 + g, &a0, sz), memcpy(st->s0 + g + VL, &a1, sz);
        memcpy(st->s1 + g, &b0, sz), memcpy(st->s1 + g + VL, &b1, sz);
        memcpy(st->s2 + g, &c0, sz), memcpy(st->s2 + g + VL, &c1, sz);
        memcpy(st->s3 + g, &d0, sz), memcpy(st->s3 + g + VL, &d1, sz);
    }
}
#else
static ALWAYS_INLINE void K(stream_steps)(stream_t *st, Py_ssize_t steps,
                                          unsigned char *RESTRICT out) {
    for (Py_ssize_t k = 0; k < steps; k++) {
        for (int l = 0; l < LANES; l++) {
            uint64_t b = st->s1[l];
            uint64_t r = K(rotl64)((b << 2) + b, 7); /* rotl(s1 * 5, 7) */
            r = (r << 3) + r;                       /* * 9 */
            memcpy(out + 8 * (k * LANES + l), &r, 8);
            uint64_t t = b << 17;
            st->s2[l] ^= st->s0[l];
            st->s3[l] ^= b;
            st->s1[l] = b ^ st->s2[l];
            st->s0[l] ^= st->s3[l];
            st->s2[l] ^= t;
            st->s3[l] = K(rotl64)(st->s3[l], 45);
        }
    }
}
#endif

/* The next n words of the stream. */
static void K(stream_words)(stream_t *st, void *RESTRICT outv, Py_ssize_t n) {
    unsigned char *RESTRICT out = outv; /* n words, stored with memcpy: any alignment */
    Py_ssize_t i = 0;
    for (; i < n && st->pos < LANES; i++) memcpy(out + 8 * i, &st->buf[st->pos++], 8);
    Py_ssize_t full = (n - i) / LANES;
    if (full > 0) {
        K(stream_steps)(st, full, out + 8 * i);
        i += full * LANES;
    }
    if (i < n) {
        K(stream_steps)(st, 1, (unsigned char *)st->buf);
        st->pos = 0;
        for (; i < n; i++) memcpy(out + 8 * i, &st->buf[st->pos++], 8);
    }
}

/* The next n 32-bit halves (low half of each word first), n <= BLOCK. On a little-endian
   machine the halves of a word, low first, are its bytes in memory order: the words are
   generated straight into out (no second pass). */
static void K(stream_halves)(stream_t *st, uint32_t *RESTRICT out, Py_ssize_t n) {
    Py_ssize_t i = 0;
    if (n > 0 && st->has_half) {
        out[i++] = st->half;
        st->has_half = 0;
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    K(stream_words)(st, out + i, (n - i) / 2);
    if ((n - i) & 1) {
        uint64_t w;
        K(stream_words)(st, &w, 1);
        out[n - 1] = (uint32_t)w;
        st->half = (uint32_t)(w >> 32);
        st->has_half = 1;
    }
#else
    uint64_t w[BLOCK / 2 + 1];
    Py_ssize_t nw = (n - i + 1) / 2;
    K(stream_words)(st, w, nw);
    for (Py_ssize_t j = 0; j < (n - i) / 2; j++) {
        out[i + 2 * j] = (uint32_t)w[j];
        out[i + 2 * j + 1] = (uint32_t)(w[j] >> 32);
    }
    if ((n - i) & 1) {
        out[n - 1] = (uint32_t)w[nw - 1];
        st->half = (uint32_t)(w[nw - 1] >> 32);
        st->has_half = 1;
    }
#endif
}

/* ------------------------------------------------------------------------------------------- */
/* ranges (C5.5)                                                                               */
/* A min-max range is sent as two float32 per row, rounded outwards so it contains the row.    */
/* Floats are compared as "sortable" integers: s ^ ((s >> (n-1)) & MAX) (s the IEEE bits as a  */
/* signed integer) is increasing in the value (-0 just below +0, NaN beyond the infinities)    */
/* and its own inverse, and integer min/max vectorize. A row holding NaN or inf gets a         */
/* non-finite range.                                                                            */

static inline double K(f32_down)(double v) { /* largest float32 <= v */
    float f = (float)v;
    return (double)f > v ? (double)nextafterf(f, -INFINITY) : (double)f;
}

static inline double K(f32_up)(double v) { /* smallest float32 >= v */
    float f = (float)v;
    return (double)f < v ? (double)nextafterf(f, INFINITY) : (double)f;
}

#define DEFINE_ROW_RANGE(NAME, XT, ST, SMAX)                                                    \
    static inline void NAME(const XT *x, Py_ssize_t P, double *lo, double *hi) {               \
        const ST *r = (const ST *)x;                                                           \
        ST mn = SMAX, mx = -SMAX - 1;                                                          \
        for (Py_ssize_t c = 0; c < P; c++) {                                                   \
            ST key = r[c] ^ ((r[c] >> (sizeof(ST) * 8 - 1)) & SMAX);                           \
            mn = key < mn ? key : mn;                                                          \
            mx = key > mx ? key : mx;                                                          \
        }                                                                                      \
        mn ^= (mn >> (sizeof(ST) * 8 - 1)) & SMAX;                                             \
        mx ^= (mx >> (sizeof(ST) * 8 - 1)) & SMAX;                                             \
        XT fmn, fmx;                                                                           \
        memcpy(&fmn, &mn, sizeof(XT));                                                         \
        memcpy(&fmx, &mx, sizeof(XT));                                                         \
        *lo = K(f32_down)((double)fmn);                                                           \
        *hi = K(f32_up)((double)fmx);                                                             \
    }

DEFINE_ROW_RANGE(K(row_range_f32), float, int32_t, INT32_MAX)
DEFINE_ROW_RANGE(K(row_range_f64), double, int64_t, INT64_MAX)

#define DEFINE_ROW_RANGES(NAME, XT, RANGE)                                                      \
    static void NAME(const XT *x, Py_ssize_t B, Py_ssize_t P, double *lo, double *hi) {         \
        for (Py_ssize_t b = 0; b < B; b++) RANGE(x + b * P, P, &lo[b], &hi[b]);                \
    }

DEFINE_ROW_RANGES(K(row_ranges_f32), float, K(row_range_f32))
DEFINE_ROW_RANGES(K(row_ranges_f64), double, K(row_range_f64))
/* The range of row b: computed from the row (rowmode: min-max, stored into lo.v/hi.v, which
   are then per-row output buffers) or given (fixed / per tensor). */
#define ROW_BOUNDS(RANGE, rowmode, lo, hi, b, xr, P, l, h)                                      \
    do {                                                                                       \
        if (rowmode) {                                                                         \
            RANGE(xr, P, &(l), &(h));                                                          \
            ((double *)(lo).v)[b] = (l);                                                       \
            ((double *)(hi).v)[b] = (h);                                                       \
        } else {                                                                               \
            (l) = ROW(lo, b);                                                                  \
            (h) = ROW(hi, b);                                                                  \
        }                                                                                      \
    } while (0)

/* Clamp v into [l, h] (NaN -> l) and count what had to be clipped and what is not finite. */
#define CLAMP_COUNT(v, l, h, clip, bad)                                                         \
    do {                                                                                       \
        (clip) += ((v) < (l)) | ((v) > (h));                                                   \
        (bad) += !((v) - (v) == 0.0);                                                          \
        (v) = (v) >= (l) ? (v) : (l);                                                          \
        (v) = (v) <= (h) ? (v) : (h);                                                          \
    } while (0)

/* ------------------------------------------------------------------------------------------- */
/* scalar quantizer (C5.1)                                                                     */
/*   Delta = (h - l)/L; t = (x - l)/Delta in [0, L]; k = min(floor(t + U), L) with dither, else */
/*   min(floor(t + 1/2), L); reconstruction l + (k + 1/2 - U) Delta (dither) or l + k Delta.    */

static inline void K(scalar_consts)(double l, double h, int32_t L, double *inv, double *step) {
    double span = h - l;
    *inv = span > 0.0 ? (double)L / span : 0.0;
    *step = span / (double)L;
}

/* The quantize loop over the n entries of row b from column c0 (dither words from h32 + hoff);
   HAS_IDX, HAS_Y, DITHER, CLAMP are constants, so every variant is a branch-free loop the
   compiler vectorizes. CLAMP (given ranges): clamp into [l, h], count clipped and non-finite
   entries; a row's own min-max range needs neither (a non-finite entry makes it non-finite,
   which the caller checks, and t is then forced to 0). */
#define SQ_LOOP(IT, YT, HAS_IDX, HAS_Y, DITHER, CLAMP, POS)                                     \
    for (Py_ssize_t i = i0; i < n; i++) {                                                      \
        double u = DITHER ? K(unit32)(h32[hoff + i]) : 0.5; /* no dither: round to nearest */     \
        double v = (double)xr[c0 + i];                                                         \
        if (CLAMP) CLAMP_COUNT(v, l, h, clip, bad);                                            \
        double t = (v - l) * s;                                                                \
        if (!POS) t = t >= 0.0 ? t : 0.0; /* POS: l <= v, both finite, so t >= +0 already */   \
        int32_t k = (int32_t)(t + u);                                                          \
        k = k > L ? L : k;                                                                     \
        if (HAS_IDX) idx[e0 + i] = (IT)k;                                                      \
        if (HAS_Y)                                                                             \
            y[e0 + i] = (YT)(DITHER ? l + (((double)k + 0.5) - u) * d                          \
                                                : l + (double)k * d);                          \
    }

#define SQ_VARIANTS(IT, YT, DITHER, CLAMP, POS)                                                 \
    do {                                                                                       \
        if (idx && y) SQ_LOOP(IT, YT, 1, 1, DITHER, CLAMP, POS)                                \
        else if (idx) SQ_LOOP(IT, YT, 1, 0, DITHER, CLAMP, POS)                                \
        else SQ_LOOP(IT, YT, 0, 1, DITHER, CLAMP, POS)                                         \
    } while (0)

/* A given range (fixed, per tensor) first reads the row's min-max range (the cheap integer pass
   of row_range, on data the quantize loop then finds in L1): a row whose outward-rounded range
   lies inside [l, h] is finite and clips nothing, so CLAMP_COUNT would leave every entry as it is
   and count nothing, and t >= 0 holds: the loop without CLAMP gives the same bits (1.39 -> 1.02
   ms for ScalarQuantizer(8, range=(-4, 4)) compressing a (4096, 256) float32 tensor on AVX2).
   Such a row, and a finite row of rowmode, has l <= v with both finite, so v - l >= +0 and
   t >= +0 exactly: the loop also drops the t >= 0 select (POS; 1.02 -> 0.91 ms on AVX2). */

/* X86_VEC: the hand-vectorized loops (intrinsics) of the x86 paths, the scalar quantizer's
   (sq_vec, sdq_vec) and the hexagonal quantizer's; off with -DCVFL_NO_VECTOR_EXT, the plain
   build the tests compare them with (the plain loops instead, the same bits). */
#undef X86_VEC
#if VL >= 4 && defined(CVFL_X86_PATHS) && !defined(CVFL_NO_VECTOR_EXT)
#define X86_VEC 1
#else
#define X86_VEC 0
#endif

#if X86_VEC && VL == 4
/* AVX2: 2^12 + U for the words w[0..3] and 2^12 + k + 1/2 for the uint8 indices k[0..3] (exact:
   U and k + 1/2 are multiples of 2^-33 and 1/2 below 2^12), as float64 built by one byte shuffle
   each: in the binade [2^12, 2^13) the significand bits of U are (2w + 1) 2^7, i.e. the bytes of
   w moved up one byte plus bit 7, and those of k + 1/2 are (2k + 1) 2^39, i.e. k in byte 5 plus
   bit 39. The operands arrive by broadcast loads (load ports only), so each value costs a
   vpshufb and a vpor instead of a vpmovzx (port 5), a shift and an add. */
static ALWAYS_INLINE __m256d K(v12)(const uint32_t *w) {
    const __m256i m = _mm256_setr_epi8(-1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1,
                                       -1, 8, 9, 10, 11, -1, -1, -1, -1, 12, 13, 14, 15, -1, -1, -1);
    __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)w));
    return _mm256_castsi256_pd(
        _mm256_or_si256(_mm256_shuffle_epi8(b, m), _mm256_set1_epi64x(0x40B0000000000080LL)));
}

static ALWAYS_INLINE __m256d K(k12)(const uint8_t *k) {
    const __m256i m = _mm256_setr_epi8(-1, -1, -1, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1, 1, -1, -1,
                                       -1, -1, -1, -1, -1, 2, -1, -1, -1, -1, -1, -1, -1, 3, -1, -1);
    int32_t k4;
    memcpy(&k4, k, 4);
    return _mm256_castsi256_pd(_mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(k4), m),
                                               _mm256_set1_epi64x(0x40B0008000000000LL)));
}
#endif

/* The compress loop (indices only, the common case) of a finite row inside its range with
   dither, entries 0 .. i - 1 of a chunk on the x86 paths (returns i; the caller's SQ_LOOP does
   the rest): the same operations as SQ_LOOP(.., DITHER, no CLAMP, POS), k = min((int32)((x - l)
   s + U), L), 16 (AVX2) or 8 (AVX-512) entries at a time. Why by hand: these loops are bound by
   the three vector ALU ports (perf: no stalls on memory, 1.35 cycles per entry on AVX2), and
   GCC 12 vectorizes SQ_LOOP 32 entries wide, widening each type through chains of vpmovzx*,
   vextract/vinsert (port-5 shuffles), converting U with vcvtdq2pd, and masking every k before
   packing it (it cannot know that 0 <= k <= L): about 125 instructions per 32 entries. Here U
   is built from its bits (v12 on AVX2, dither_v's shift-add on AVX-512), and the truncated
   sums are packed with saturation and then clamped to L (exact: 0 < t + U, so k >= 0, and a
   saturated k was > L anyway). Measured with the dither stream included (scalar_quantize of a
   (4096, 256) float32 array, 3 bits, min-max rows; median CPU time): AVX2 0.88 -> 0.74 ms,
   AVX-512 0.63 -> 0.60 ms. */
static ALWAYS_INLINE Py_ssize_t K(sq_vec)(const void *x, int xsz, const uint32_t *w,
                                          Py_ssize_t n, double l, double s, int32_t L, void *idx,
                                          int isz) {
    Py_ssize_t i = 0;
#if X86_VEC && VL == 8
    const __m512i cv = _mm512_set1_epi64(BITS_2P19_U0);
    const __m512d lv = _mm512_set1_pd(l), sv = _mm512_set1_pd(s), c19 = _mm512_set1_pd(0x1p19);
    const __m256i Lv = _mm256_set1_epi32(L);
    for (; i + 8 <= n; i += 8) {
        __m512d v = xsz == 4 ? _mm512_cvtps_pd(_mm256_loadu_ps((const float *)x + i))
                             : _mm512_loadu_pd((const double *)x + i);
        __m512i wv = _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(w + i)));
        __m512d u = _mm512_sub_pd(
            _mm512_castsi512_pd(_mm512_add_epi64(_mm512_add_epi64(wv, wv), cv)), c19);
        __m512d t = _mm512_mul_pd(_mm512_sub_pd(v, lv), sv);
        __m256i k = _mm256_min_epi32(_mm512_cvttpd_epi32(_mm512_add_pd(t, u)), Lv);
        if (isz == 1) _mm_storel_epi64((__m128i *)((uint8_t *)idx + i), _mm256_cvtepi32_epi8(k));
        else _mm_storeu_si128((__m128i *)((uint16_t *)idx + i), _mm256_cvtepi32_epi16(k));
    }
#elif X86_VEC
    const __m256d lv = _mm256_set1_pd(l), sv = _mm256_set1_pd(s), c12 = _mm256_set1_pd(0x1p12);
    const __m128i L8 = _mm_set1_epi8((char)(L > 255 ? 255 : L)), L16 = _mm_set1_epi16((short)L);
    __m128i k[4];
    for (; i + 16 <= n; i += 16) {
        for (int q = 0; q < 4; q++) {
            Py_ssize_t j = i + 4 * q;
            __m256d v = xsz == 4 ? _mm256_cvtps_pd(_mm_loadu_ps((const float *)x + j))
                                 : _mm256_loadu_pd((const double *)x + j);
            __m256d u = _mm256_sub_pd(K(v12)(w + j), c12);
            __m256d t = _mm256_mul_pd(_mm256_sub_pd(v, lv), sv);
            k[q] = _mm256_cvttpd_epi32(_mm256_add_pd(t, u)); /* >= 0: 0 < t + U */
        }
        /* min(k, L) after the saturating packs: a k above the type's range saturates to its
           maximum, which is >= L, so the result is min(k, L) either way */
        __m128i a16 = _mm_packus_epi32(k[0], k[1]), b16 = _mm_packus_epi32(k[2], k[3]);
        if (isz == 1) {
            _mm_storeu_si128((__m128i *)((uint8_t *)idx + i),
                             _mm_min_epu8(_mm_packus_epi16(a16, b16), L8));
        } else {
            _mm_storeu_si128((__m128i *)((uint16_t *)idx + i), _mm_min_epu16(a16, L16));
            _mm_storeu_si128((__m128i *)((uint16_t *)idx + i + 8), _mm_min_epu16(b16, L16));
        }
    }
#else
    (void)x, (void)xsz, (void)w, (void)n, (void)l, (void)s, (void)L, (void)idx, (void)isz;
#endif
    return i;
}

/* Row groups of at most BLOCK entries (one dither call per group), or chunks of one long row. */
#define FOR_CHUNKS(B, P, ...) /* the body is the variadic argument (it has commas) */         \
    do {                                                                                       \
        Py_ssize_t rows_ = (P) <= BLOCK ? BLOCK / (P) : 1;                                     \
        for (Py_ssize_t b0 = 0; b0 < (B); b0 += rows_) {                                       \
            Py_ssize_t b1 = b0 + rows_ < (B) ? b0 + rows_ : (B);                               \
            Py_ssize_t g0 = b0 * (P), gn = (P) <= BLOCK ? (b1 - b0) * (P) : 0;                 \
            if (dither && gn) K(stream_halves)(&st, h32, gn);                                     \
            for (Py_ssize_t b = b0; b < b1; b++) {                                             \
                for (Py_ssize_t c0 = 0; c0 < (P); c0 += BLOCK) {                               \
                    Py_ssize_t n = (P) - c0 < BLOCK ? (P) - c0 : BLOCK;                        \
                    Py_ssize_t e0 = b * (P) + c0, hoff = gn ? e0 - g0 : 0;                     \
                    if (dither && !gn) K(stream_halves)(&st, h32, n);                             \
                    __VA_ARGS__                                                                \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    } while (0)

#define DEFINE_SCALAR_Q(NAME, XT, IT, YT, RANGE)                                                \
    static void NAME(const XT *x, Py_ssize_t B, Py_ssize_t P, int rowmode, rowparam lo,        \
                     rowparam hi, int32_t L, int dither, uint64_t seed, IT *idx, YT *y,        \
                     int64_t *nclip, int64_t *nbad) {                                          \
        uint32_t h32[BLOCK];                                                                   \
        stream_t st;                                                                           \
        K(stream_init)(&st, seed);                                                                \
        int64_t clip = 0, bad = 0;                                                             \
        Py_ssize_t cur = -1;                                                                   \
        double l = 0, h = 0, s = 0, d = 0;                                                     \
        int inside = 0, finite = 0;                                                            \
        FOR_CHUNKS(B, P, {                                                                     \
            const XT *xr = x + b * P;                                                          \
            if (b != cur) {                                                                    \
                ROW_BOUNDS(RANGE, rowmode, lo, hi, b, xr, P, l, h);                            \
                K(scalar_consts)(l, h, L, &s, &d);                                                \
                /* finite: the row lies in [l, h], both finite (l - l == 0 is false for     \
                   NaN and inf); rowmode rows are in their own range, else see above */         \
                finite = (l - l == 0.0) && (h - h == 0.0);                                     \
                inside = rowmode;                                                              \
                if (!rowmode && finite) {                                                      \
                    double rl, rh;                                                             \
                    RANGE(xr, P, &rl, &rh);                                                    \
                    inside = rl >= l && rh <= h;                                               \
                }                                                                              \
                finite = finite && inside;                                                     \
                cur = b;                                                                       \
            }                                                                                  \
            Py_ssize_t i0 = 0; /* entries done by sq_vec */                                    \
            if (dither && finite && idx && !y)                                                 \
                i0 = K(sq_vec)(xr + c0, sizeof(XT), h32 + hoff, n, l, s, L, idx + e0, sizeof(IT)); \
            if (dither && finite) SQ_VARIANTS(IT, YT, 1, 0, 1);                                \
            else if (dither && inside) SQ_VARIANTS(IT, YT, 1, 0, 0);                           \
            else if (dither) SQ_VARIANTS(IT, YT, 1, 1, 0);                                     \
            else if (finite) SQ_VARIANTS(IT, YT, 0, 0, 1);                                     \
            else if (inside) SQ_VARIANTS(IT, YT, 0, 0, 0);                                     \
            else SQ_VARIANTS(IT, YT, 0, 1, 0);                                                 \
        });                                                                                    \
        *nclip = clip;                                                                         \
        *nbad = bad;                                                                           \
    }

DEFINE_SCALAR_Q(K(sq_f32_u8_f32), float, uint8_t, float, K(row_range_f32))
DEFINE_SCALAR_Q(K(sq_f32_u8_f64), float, uint8_t, double, K(row_range_f32))
DEFINE_SCALAR_Q(K(sq_f32_u16_f32), float, uint16_t, float, K(row_range_f32))
DEFINE_SCALAR_Q(K(sq_f32_u16_f64), float, uint16_t, double, K(row_range_f32))
DEFINE_SCALAR_Q(K(sq_f64_u8_f32), double, uint8_t, float, K(row_range_f64))
DEFINE_SCALAR_Q(K(sq_f64_u8_f64), double, uint8_t, double, K(row_range_f64))
DEFINE_SCALAR_Q(K(sq_f64_u16_f32), double, uint16_t, float, K(row_range_f64))
DEFINE_SCALAR_Q(K(sq_f64_u16_f64), double, uint16_t, double, K(row_range_f64))

/* The dithered dequantization of entries 0 .. i - 1 of a chunk on the x86 paths (returns i; the
   caller does the rest with the scalar formula): the same operations as l + centred(k, w) * d,
   8 (AVX-512) or 4 entries at a time. Why by hand: the loop mixes 8/16-bit indices, 32-bit words
   and doubles, and GCC 12 vectorizes it 32 entries wide, widening each type through chains of
   vpmovzx* and vextracti128 (port-5 shuffles) next to two int -> double conversions (vcvtdq2pd,
   a port-5 uop each): perf showed sdq_u8_f32 at 1.4 cycles per entry on AVX2, bound by the
   vector ALU ports, not by memory. Here both operands of the subtraction are built from their
   bits (k + 2^19 + 1/2 has the significand bits (2k + 1) 2^32, see dither_v; on AVX2 uint8
   indices use the shuffles of k12/v12): no conversion but the final one. Measured with the
   dither stream included (scalar_dequantize of a (4096, 256) uint8 index array to float32;
   median CPU time): AVX2 0.75 -> 0.55 ms, AVX-512 0.50 -> 0.41 ms. isz/ysz are constants of
   the inlined call, so only one branch remains. */
static ALWAYS_INLINE Py_ssize_t K(sdq_vec)(const void *idx, int isz, const uint32_t *w,
                                           Py_ssize_t n, double l, double d, void *y, int ysz) {
    Py_ssize_t i = 0;
#if X86_VEC && VL == 8
    const __m512i ck8 = _mm512_set1_epi64(BITS_2P19_HALF);
    const __m512i cv8 = _mm512_set1_epi64(BITS_2P19_U0);
    const __m512d lv8 = _mm512_set1_pd(l), dv8 = _mm512_set1_pd(d);
    for (; i + 8 <= n; i += 8) {
        __m512i k;
        if (isz == 1) k = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)((const uint8_t *)idx + i)));
        else k = _mm512_cvtepu16_epi64(_mm_loadu_si128((const __m128i *)((const uint16_t *)idx + i)));
        __m512i wv = _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(w + i)));
        __m512d kd = _mm512_castsi512_pd(_mm512_add_epi64(_mm512_slli_epi64(k, 33), ck8));
        __m512d vd = _mm512_castsi512_pd(_mm512_add_epi64(_mm512_add_epi64(wv, wv), cv8));
        __m512d r = _mm512_add_pd(lv8, _mm512_mul_pd(_mm512_sub_pd(kd, vd), dv8));
        if (ysz == 4) _mm256_storeu_ps((float *)y + i, _mm512_cvtpd_ps(r));
        else _mm512_storeu_pd((double *)y + i, r);
    }
#endif
#if X86_VEC
    const __m256i ck = _mm256_set1_epi64x(BITS_2P19_HALF);
    const __m256i cv = _mm256_set1_epi64x(BITS_2P19_U0);
    const __m256d lv = _mm256_set1_pd(l), dv = _mm256_set1_pd(d);
    for (; i + 4 <= n; i += 4) {
        __m256d kd, vd;
#if VL == 4
        if (isz == 1) {
            kd = K(k12)((const uint8_t *)idx + i), vd = K(v12)(w + i);
        } else
#endif
        {
            __m256i k;
            if (isz == 1) {
                int32_t b;
                memcpy(&b, (const uint8_t *)idx + i, 4);
                k = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(b));
            } else {
                int64_t b;
                memcpy(&b, (const uint16_t *)idx + i, 8);
                k = _mm256_cvtepu16_epi64(_mm_cvtsi64_si128(b));
            }
            __m256i wv = _mm256_cvtepu32_epi64(_mm_loadu_si128((const __m128i *)(w + i)));
            kd = _mm256_castsi256_pd(_mm256_add_epi64(_mm256_slli_epi64(k, 33), ck));
            vd = _mm256_castsi256_pd(_mm256_add_epi64(_mm256_add_epi64(wv, wv), cv));
        }
        __m256d r = _mm256_add_pd(lv, _mm256_mul_pd(_mm256_sub_pd(kd, vd), dv));
        if (ysz == 4) _mm_storeu_ps((float *)y + i, _mm256_cvtpd_ps(r));
        else _mm256_storeu_pd((double *)y + i, r);
    }
#else
    (void)idx, (void)isz, (void)w, (void)n, (void)l, (void)d, (void)y, (void)ysz;
#endif
    return i;
}

#define DEFINE_SCALAR_DQ(NAME, IT, YT)                                                          \
    static void NAME(const IT *idx, Py_ssize_t B, Py_ssize_t P, rowparam lo, rowparam hi,      \
                     int32_t L, int dither, uint64_t seed, YT *y) {                            \
        uint32_t h32[BLOCK];                                                                   \
        stream_t st;                                                                           \
        K(stream_init)(&st, seed);                                                             \
        FOR_CHUNKS(B, P, {                                                                     \
            const double l = ROW(lo, b), h = ROW(hi, b);                                       \
            double s, d;                                                                       \
            K(scalar_consts)(l, h, L, &s, &d);                                                 \
            if (dither) {                                                                      \
                Py_ssize_t i = K(sdq_vec)(idx + e0, sizeof(IT), h32 + hoff, n, l, d, y + e0,   \
                                          sizeof(YT));                                         \
                for (; i < n; i++) {                                                           \
                    double c = K(centred)((double)idx[e0 + i], h32[hoff + i]);                 \
                    y[e0 + i] = (YT)(l + c * d);                                               \
                }                                                                              \
            } else {                                                                           \
                for (Py_ssize_t i = 0; i < n; i++) y[e0 + i] = (YT)(l + (double)idx[e0 + i] * d); \
            }                                                                                  \
        });                                                                                    \
    }

DEFINE_SCALAR_DQ(K(sdq_u8_f32), uint8_t, float)
DEFINE_SCALAR_DQ(K(sdq_u8_f64), uint8_t, double)
DEFINE_SCALAR_DQ(K(sdq_u16_f32), uint16_t, float)
DEFINE_SCALAR_DQ(K(sdq_u16_f64), uint16_t, double)
/* ------------------------------------------------------------------------------------------- */
/* hexagonal lattice A_2 (C5.2, C5.3)                                                          */
/* Lattice of minimum distance a: i b1 + j b2, b1 = a (1, 0), b2 = a (1/2, sqrt3/2).           */

#define SQRT3 1.7320508075688772

/* Nearest lattice point (i, j) of the point (X a, Y sqrt3 a) (scaled coordinates), two cosets:
   the rectangular lattice a(Z x sqrt3 Z) and its translate by b2; the closer candidate wins
   (ties to the first coset). */
static inline void K(a2_nearest_scaled)(double X, double Y, double *i, double *j) {
    double m0 = K(round_even)(X), n0 = K(round_even)(Y);
    double X1 = X - 0.5, Y1 = Y - 0.5;
    double m1 = K(round_even)(X1), n1 = K(round_even)(Y1);
    double dx0 = X - m0, dy0 = Y - n0, dx1 = X1 - m1, dy1 = Y1 - n1;
    double d0 = dx0 * dx0 + 3.0 * (dy0 * dy0);
    double d1 = dx1 * dx1 + 3.0 * (dy1 * dy1);
    double i0 = m0 - n0, i1 = m1 - n1, j0 = 2.0 * n0, j1 = 2.0 * n1 + 1.0;
    int use1 = d1 < d0;
    *i = K(select)(use1, i1, i0); /* not `use1 ? i1 : i0`: see K(select) */
    *j = K(select)(use1, j1, j0);
}

/* The hexagonal quantizer's X86_VEC loops: the two x86 vector paths run some of its loops with
   intrinsics, the same operations in the same order as the plain loops beside them (which the
   portable path and every remainder use), so the same bits: the reconstruction on AVX2 and
   AVX-512 (a codeword is one 16-byte load of pxy), the dither, the unit-box coordinates (float32,
   no clamp) and the nearest point on AVX2 only (AVX-512's compiled 16-lane loops are faster
   there; compress of float32 rows in their own range goes through the float32 screen,
   hex_screen_f32). Why: compiled from the plain loops, these spent most of their time moving
   32-bit halves and codeword coordinates between vector lanes (see "perf (issue 13)" before
   hex_run). */

/* Dither of one pair from its word w: u = z - Q(z) with z = alpha b1 + beta b2 in the rhombus,
   alpha = (2A + 1) 2^-24, beta = (2A' + 1) 2^-24 where A, A' are the top 23 bits of the low and
   high 32-bit halves of w: uniform on 2^46 grid midpoints of the rhombus, so u is uniform on the
   corresponding points of the Voronoi cell (second moment within 2^-46 of the continuous one).
   The reduction is exact, in integers (units 2^-24): the upper triangle (alpha + beta > 1) is
   reflected onto the lower one (u -> -u); in the lower triangle (0, b1, b2) the nearest vertex is
   0 if 2 alpha + beta < 1 and alpha + 2 beta < 1 (never equal: both sides are odd), else b1 if
   alpha > beta, else b2. Cartesian coordinates out (float64: one rounding each).
   Computed branch-free, with the same integers: x = 2A + 1, y = 2A' + 1, N = 2^24, s = x + y,
   t1 = 2x + y = s + x, t2 = x + 2y = s + y; f = (s > N) (upper triangle). The pair leaves its
   triangle's own vertex (0 below, b1 + b2 above) iff o = (max(t1, t2) > N) & (min(t1, t2) < 2N):
   below, min < 2N always holds, and above, max > N (reflected, t -> 3N - t). It goes to b1 if
   g = (d > 0), d = x - y (negated above: the reflection swaps the roles), else to b2. The lattice
   point subtracted, in units of b1 and b2, is (cx, cy) = ((o & g) ^ f, (o & !g) ^ f), and
   u = (x - cx N) b1 + (y - cy N) b2 (units 2^-24). */
/* a25 = a 2^-25 and c24 = (a sqrt3/2) 2^-24 (see hex_dither_scales). */
static inline void K(hex_dither)(uint64_t w, double a25, double c24, double *ux, double *uy) {
    const int32_t one = 1 << 24;
    int32_t x = (int32_t)(((uint32_t)w >> 8) | 1u);
    int32_t y = (int32_t)(((uint32_t)(w >> 32) >> 8) | 1u);
    int32_t s = x + y, t1 = s + x, t2 = s + y;
    int32_t f = -(int32_t)(s > one);
    int32_t o = -(int32_t)(((t1 > t2 ? t1 : t2) > one) & ((t1 < t2 ? t1 : t2) < 2 * one));
    int32_t d = ((x - y) ^ f) - f;
    int32_t g = -(int32_t)(d > 0);
    x -= ((o & g) ^ f) & one;
    y -= ((o & ~g) ^ f) & one;
    /* ux = a (A + Bt/2), uy = (a sqrt3/2) Bt with A = x 2^-24, Bt = y 2^-24: A + Bt/2 is
       (2x + y) 2^-25 exactly and scaling by a power of two is exact, so each coordinate is
       one correctly rounded product of the same two reals as in that formula: */
    *ux = a25 * (double)(2 * x + y);
    *uy = c24 * (double)y;
}

#if X86_VEC && VL == 4
/* The integers of hex_dither for the 8 pairs w[0 .. 8), 8 int32 lanes: the low halves of
   w0 w1 | w4 w5 and of w2 w3 | w6 w7 (two 16-byte loads each) are one in-lane shuffle away from
   the 8 low halves in order, likewise the high halves (the compiler's code for the plain loop
   used 10 shuffles). The same integers in two fewer operations: g = ((x ^ f) > (y ^ f)), which
   is d > 0 (x ^ f is -x - 1 where f is set; x = y gives 0 either way), and 2x + y after the move
   is t1 - 2 cx N - cy N. Out: sx = 2x + y and sy = y after the move (8 int32 lanes, pairs in
   order), the integers hex_dither scales. */
static ALWAYS_INLINE void K(hex_dither8i)(const uint64_t *w, __m256i *sx, __m256i *sy) {
    const __m256i one = _mm256_set1_epi32(1 << 24), two = _mm256_set1_epi32(2 << 24);
    const __m256i bit = _mm256_set1_epi32(1);
#define LOAD2(i, j)                                                                             \
    _mm256_castsi256_ps(_mm256_inserti128_si256(                                               \
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(w + (i)))),                   \
        _mm_loadu_si128((const __m128i *)(w + (j))), 1))
    __m256 w0145 = LOAD2(0, 4), w2367 = LOAD2(2, 6);
#undef LOAD2
    __m256i lo = _mm256_castps_si256(_mm256_shuffle_ps(w0145, w2367, 0x88));
    __m256i hi = _mm256_castps_si256(_mm256_shuffle_ps(w0145, w2367, 0xDD));
    __m256i x = _mm256_or_si256(_mm256_srli_epi32(lo, 8), bit);
    __m256i y = _mm256_or_si256(_mm256_srli_epi32(hi, 8), bit);
    __m256i s = _mm256_add_epi32(x, y), t1 = _mm256_add_epi32(s, x), t2 = _mm256_add_epi32(s, y);
    __m256i f = _mm256_cmpgt_epi32(s, one);
    __m256i o = _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_max_epi32(t1, t2), one),
                                 _mm256_cmpgt_epi32(two, _mm256_min_epi32(t1, t2)));
    __m256i g = _mm256_cmpgt_epi32(_mm256_xor_si256(x, f), _mm256_xor_si256(y, f));
    __m256i cx2 = _mm256_and_si256(_mm256_xor_si256(_mm256_and_si256(o, g), f), two);
    __m256i cy = _mm256_and_si256(_mm256_xor_si256(_mm256_andnot_si256(g, o), f), one);
    *sy = _mm256_sub_epi32(y, cy);
    *sx = _mm256_sub_epi32(_mm256_sub_epi32(t1, cx2), cy);
}

/* hex_dither of the 8 pairs w[0 .. 8), stored: ux[0 .. 8), uy[0 .. 8). */
static ALWAYS_INLINE void K(hex_dither8)(const uint64_t *w, __m256d a25, __m256d c24,
                                         double *ux, double *uy) {
    __m256i sx, sy;
    K(hex_dither8i)(w, &sx, &sy);
    const __m128i x0 = _mm256_castsi256_si128(sx), x1 = _mm256_extracti128_si256(sx, 1);
    const __m128i y0 = _mm256_castsi256_si128(sy), y1 = _mm256_extracti128_si256(sy, 1);
    _mm256_storeu_pd(ux, _mm256_mul_pd(a25, _mm256_cvtepi32_pd(x0)));
    _mm256_storeu_pd(ux + 4, _mm256_mul_pd(a25, _mm256_cvtepi32_pd(x1)));
    _mm256_storeu_pd(uy, _mm256_mul_pd(c24, _mm256_cvtepi32_pd(y0)));
    _mm256_storeu_pd(uy + 4, _mm256_mul_pd(c24, _mm256_cvtepi32_pd(y1)));
}
#endif

/* The dither's scales a25 = a 2^-25 and c24 = (a sqrt3/2) 2^-24 (exact scalings, see
   hex_dither). */
static inline void K(hex_dither_scales)(double a, double *a25, double *c24) {
    *a25 = a * 0x1p-25;
    *c24 = (a * (SQRT3 / 2.0)) * 0x1p-24;
}

/* Dither of the n pairs of the stream words w (Cartesian, unit box) into ux, uy. */
static void K(hex_dither_words)(const uint64_t *RESTRICT w, Py_ssize_t n, double a,
                                double *RESTRICT ux, double *RESTRICT uy) {
    double a25, c24;
    K(hex_dither_scales)(a, &a25, &c24);
    Py_ssize_t p = 0;
#if X86_VEC && VL == 4 /* AVX-512: the compiler's 16-lane loop is faster */
    for (; p + 8 <= n; p += 8)
        K(hex_dither8)(w + p, _mm256_set1_pd(a25), _mm256_set1_pd(c24), ux + p, uy + p);
#endif
    for (; p < n; p++) K(hex_dither)(w[p], a25, c24, &ux[p], &uy[p]);
}

/* Dither of the next n pairs (Cartesian, unit box) into ux, uy: one stream word per pair. */
NOINLINE static void K(hex_dither_block)(stream_t *st, Py_ssize_t n, double a, double *RESTRICT ux,
                             double *RESTRICT uy) {
    uint64_t w[HB];
    K(stream_words)(st, w, n);
    K(hex_dither_words)(w, n, a, ux, uy);
}

/* The nearest-point constants of a codebook, computed once per call (not once per block). */
typedef struct {
    double ia, isa, imax, jmax, i0, j0, dwidth;
} K(hexnear);

static void K(hex_near_consts)(const hexcode *hc, K(hexnear) *c) {
    c->ia = 1.0 / hc->a;
    c->isa = 1.0 / (SQRT3 * hc->a);
    c->imax = (double)(hc->width - 1);
    c->jmax = (double)(hc->rows - 1);
    c->i0 = hc->i0;
    c->j0 = hc->j0;
    c->dwidth = (double)hc->width;
}

/* The table cell of the nearest lattice point of the scaled point (x, y) (a2_nearest_scaled),
   clamped into the table (rows jmax + 1, columns imax + 1; cell (0, 0) = lattice point
   (i0, j0)). */
static inline int32_t K(hex_cell)(double x, double y, double i0, double j0, double imax,
                                  double jmax, double dwidth) {
    double i, j;
    K(a2_nearest_scaled)(x, y, &i, &j);
    double ii = i - i0, jj = j - j0;
    ii = ii < 0.0 ? 0.0 : ii;
    ii = ii > imax ? imax : ii;
    jj = jj < 0.0 ? 0.0 : jj;
    jj = jj > jmax ? jmax : jj;
    return (int32_t)(jj * dwidth + ii); /* exact: small integers */
}

#undef HEX_NEAREST_VEC
#if X86_VEC && VL == 4
/* hex_nearest_block for the pairs 0 .. n - n % 4, 4 per vector; returns how many it did. The
   float64 operations are those of a2_nearest_scaled, in the same order; its exact integer part
   (i, j, the clamps into the table and the cell index) is done in the int32 lanes instead: the
   low 32 bits of v + 1.5 2^52 are round_even(v) as an int32 (|v| < 2^31; the scaled coordinates
   of the unit box are far smaller), and i0, j0 are integers (checked by get_hexcode), so every
   value is the same integer. The compiler's code for the plain loop spilled (16 ymm registers)
   and spent 17 double operations per 4 pairs on that integer part. */
static ALWAYS_INLINE Py_ssize_t K(hex_nearest_vec)(const double *X, const double *Y,
                                                   const double *ux, const double *uy,
                                                   Py_ssize_t n, const K(hexnear) *c,
                                                   const int32_t *lut, int32_t *k) {
    const __m256d ia = _mm256_set1_pd(c->ia), isa = _mm256_set1_pd(c->isa);
    const __m256d half = _mm256_set1_pd(0.5), three = _mm256_set1_pd(3.0);
    const __m256d magic = _mm256_set1_pd(6755399441055744.0); /* 1.5 * 2^52 */
    const __m256i i0 = _mm256_set1_epi32((int32_t)c->i0), j0 = _mm256_set1_epi32((int32_t)c->j0);
    const __m256i imax = _mm256_set1_epi32((int32_t)c->imax);
    const __m256i jmax = _mm256_set1_epi32((int32_t)c->jmax);
    const __m256i width = _mm256_set1_epi32((int32_t)c->dwidth), zero = _mm256_setzero_si256();
    const __m256i low = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6); /* the 64-bit lanes' low halves */
    Py_ssize_t p = 0;
    for (; p + 4 <= n; p += 4) {
        __m256d x = _mm256_mul_pd(_mm256_add_pd(_mm256_loadu_pd(X + p), _mm256_loadu_pd(ux + p)), ia);
        __m256d y = _mm256_mul_pd(_mm256_add_pd(_mm256_loadu_pd(Y + p), _mm256_loadu_pd(uy + p)), isa);
        __m256d x1 = _mm256_sub_pd(x, half), y1 = _mm256_sub_pd(y, half);
        __m256d rx0 = _mm256_add_pd(x, magic), ry0 = _mm256_add_pd(y, magic);
        __m256d rx1 = _mm256_add_pd(x1, magic), ry1 = _mm256_add_pd(y1, magic);
        __m256d dx0 = _mm256_sub_pd(x, _mm256_sub_pd(rx0, magic));
        __m256d dy0 = _mm256_sub_pd(y, _mm256_sub_pd(ry0, magic));
        __m256d dx1 = _mm256_sub_pd(x1, _mm256_sub_pd(rx1, magic));
        __m256d dy1 = _mm256_sub_pd(y1, _mm256_sub_pd(ry1, magic));
        __m256d d0 = _mm256_add_pd(_mm256_mul_pd(dx0, dx0), _mm256_mul_pd(three, _mm256_mul_pd(dy0, dy0)));
        __m256d d1 = _mm256_add_pd(_mm256_mul_pd(dx1, dx1), _mm256_mul_pd(three, _mm256_mul_pd(dy1, dy1)));
        __m256i use1 = _mm256_castpd_si256(_mm256_cmp_pd(d1, d0, _CMP_LT_OQ));
        /* low int32 of each lane: m0, n0, m1, n1; i = m - n, j = 2n (+1 for the second coset),
           m and n of the closer coset selected first (one subtraction instead of two) */
        __m256i m0 = _mm256_castpd_si256(rx0), n0 = _mm256_castpd_si256(ry0);
        __m256i m1 = _mm256_castpd_si256(rx1), n1 = _mm256_castpd_si256(ry1);
        __m256i j = _mm256_blendv_epi8(n0, n1, use1);
        __m256i i = _mm256_sub_epi32(_mm256_blendv_epi8(m0, m1, use1), j);
        j = _mm256_sub_epi32(_mm256_add_epi32(j, j), use1);
        i = _mm256_min_epi32(_mm256_max_epi32(_mm256_sub_epi32(i, i0), zero), imax);
        j = _mm256_min_epi32(_mm256_max_epi32(_mm256_sub_epi32(j, j0), zero), jmax);
        __m256i cell = _mm256_add_epi32(_mm256_mul_epu32(j, width), i);
        cell = _mm256_permutevar8x32_epi32(cell, low);
        _mm_storeu_si128((__m128i *)(k + p),
                         _mm_i32gather_epi32(lut, _mm256_castsi256_si128(cell), 4));
    }
    return p;
}
#define HEX_NEAREST_VEC(X, Y, ux, uy, n, c, lut, k) K(hex_nearest_vec)(X, Y, ux, uy, n, c, lut, k)
#else
#define HEX_NEAREST_VEC(X, Y, ux, uy, n, c, lut, k) 0
#endif

/* Codeword indices of the points (X + ux, Y + uy) of the centred unit box: the lookup table
   lut of the cell of the nearest lattice point. */
NOINLINE static void K(hex_nearest_block)(const double *RESTRICT X, const double *RESTRICT Y,
                                          const double *RESTRICT ux, const double *RESTRICT uy,
                                          Py_ssize_t n, const K(hexnear) *c,
                                          const int32_t *RESTRICT lut, int32_t *RESTRICT k) {
    const double ia = c->ia, isa = c->isa, imax = c->imax, jmax = c->jmax;
    const double i0 = c->i0, j0 = c->j0, dwidth = c->dwidth;
    const Py_ssize_t nv = HEX_NEAREST_VEC(X, Y, ux, uy, n, c, lut, k);
    for (Py_ssize_t p = nv; p < n; p++)
        k[p] = K(hex_cell)((X[p] + ux[p]) * ia, (Y[p] + uy[p]) * isa, i0, j0, imax, jmax, dwidth);
    for (Py_ssize_t p = nv; p < n; p++) k[p] = lut[k[p]];
}

/* The part of row b in the chunk of pairs g0 .. g0 + nchunk - 1 that starts at its pair g0 + q:
   the row's pairs p0 .. p0 + n - 1 (rows of npairs >= 1 pairs). */
static inline void K(hex_segment)(Py_ssize_t g0, Py_ssize_t q, Py_ssize_t nchunk,
                                  Py_ssize_t npairs, Py_ssize_t *b, Py_ssize_t *p0,
                                  Py_ssize_t *n) {
    *b = (g0 + q) / npairs;
    *p0 = g0 + q - *b * npairs;
    *n = npairs - *p0 < nchunk - q ? npairs - *p0 : nchunk - q;
}

#undef HEX_OUT_VEC
#if X86_VEC
/* The reconstructions of pairs p .. p + 3 (dithers vx, vy) as r0 = pairs p, p + 2 and
   r1 = pairs p + 1, p + 3 (each pair's (x, y) in a 128-bit half): codeword k is one 16-byte
   load of pxy. */
static ALWAYS_INLINE void K(hex_out4)(const int32_t *k, __m256d vx, __m256d vy,
                                      const double *pxy, __m256d sp, __m256d md, __m256d *r0,
                                      __m256d *r1) {
#define PAIR2(i, j)                                                                             \
    _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_loadu_pd(pxy + 2 * (Py_ssize_t)k[i])),       \
                         _mm_loadu_pd(pxy + 2 * (Py_ssize_t)k[j]), 1)
    __m256d c0 = PAIR2(0, 2), c1 = PAIR2(1, 3);
#undef PAIR2
    *r0 = _mm256_add_pd(_mm256_mul_pd(_mm256_sub_pd(c0, _mm256_unpacklo_pd(vx, vy)), sp), md);
    *r1 = _mm256_add_pd(_mm256_mul_pd(_mm256_sub_pd(c1, _mm256_unpackhi_pd(vx, vy)), sp), md);
}

/* Store hex_out4's r0, r1: the 8 outputs of pairs 0 .. 3 at y. */
static ALWAYS_INLINE void K(hex_store4_f32)(float *y, __m256d r0, __m256d r1) {
    __m128d f0 = _mm_castps_pd(_mm256_cvtpd_ps(r0)), f1 = _mm_castps_pd(_mm256_cvtpd_ps(r1));
    _mm_storeu_pd((double *)y, _mm_unpacklo_pd(f0, f1)); /* 4 floats: pairs 0, 1 */
    _mm_storeu_pd((double *)(y + 4), _mm_unpackhi_pd(f0, f1));
}

static ALWAYS_INLINE void K(hex_store4_f64)(double *y, __m256d r0, __m256d r1) {
    _mm_storeu_pd(y, _mm256_castpd256_pd128(r0));
    _mm_storeu_pd(y + 2, _mm256_castpd256_pd128(r1));
    _mm_storeu_pd(y + 4, _mm256_extractf128_pd(r0, 1));
    _mm_storeu_pd(y + 6, _mm256_extractf128_pd(r1, 1));
}

#define DEFINE_HEX_OUT_VEC(T, YT)                                                               \
    static ALWAYS_INLINE Py_ssize_t K(hex_out_vec_##T)(const int32_t *k, const double *ux,     \
                                                       const double *uy, Py_ssize_t m,         \
                                                       const double *pxy, double sp,           \
                                                       double md, YT *y) {                     \
        const __m256d vsp = _mm256_set1_pd(sp), vmd = _mm256_set1_pd(md);                      \
        Py_ssize_t p = 0;                                                                      \
        for (; p + 4 <= m; p += 4) {                                                           \
            __m256d r0, r1;                                                                    \
            K(hex_out4)(k + p, _mm256_loadu_pd(ux + p), _mm256_loadu_pd(uy + p), pxy, vsp,     \
                        vmd, &r0, &r1);                                                        \
            K(hex_store4_##T)(y + 2 * p, r0, r1);                                              \
        }                                                                                      \
        return p;                                                                              \
    }
DEFINE_HEX_OUT_VEC(f32, float)
DEFINE_HEX_OUT_VEC(f64, double)
#undef DEFINE_HEX_OUT_VEC
#define HEX_OUT_VEC(T, k, ux, uy, m, pxy, sp, md, y) K(hex_out_vec_##T)(k, ux, uy, m, pxy, sp, md, y)
#else
#define HEX_OUT_VEC(T, k, ux, uy, m, pxy, sp, md, y) 0
#endif

/* Reconstruct: y[2p] = (pxy[2k] - ux) sp + md, y[2p + 1] = (pxy[2k + 1] - uy) sp + md for
   p < half, k = k[p]. */
#define DEFINE_HEX_OUT(NAME, YT, T)                                                             \
    NOINLINE                                                                                   \
    static void NAME(const int32_t *RESTRICT k, const double *RESTRICT ux,                     \
                     const double *RESTRICT uy, Py_ssize_t n,                                  \
                     Py_ssize_t half, const hexcode *hc, double sp, double md, YT *RESTRICT y) {\
        const double *RESTRICT pxy = hc->pxy;                                                  \
        Py_ssize_t m = n < half ? n : half;                                                    \
        Py_ssize_t p = HEX_OUT_VEC(T, k, ux, uy, m, pxy, sp, md, y);                           \
        for (; p < m; p++) {                                                                   \
            y[2 * p] = (YT)((pxy[2 * k[p]] - ux[p]) * sp + md);                                \
            y[2 * p + 1] = (YT)((pxy[2 * k[p] + 1] - uy[p]) * sp + md);                        \
        }                                                                                      \
        if (m < n) y[2 * m] = (YT)((pxy[2 * k[m]] - ux[m]) * sp + md);                         \
    }

DEFINE_HEX_OUT(K(hex_out_f32), float, f32)
DEFINE_HEX_OUT(K(hex_out_f64), double, f64)

#undef HEX_FUSE_OUT
#if X86_VEC && VL == 4
#define HEX_FUSE_OUT 1
/* hex_out with the dither computed from the stream words w on the way (decompress on AVX2):
   the same dither (hex_dither8i scaled, hex_dither) and the same reconstruction, without the
   round trip of ux, uy through memory; a = the lattice's minimum distance. The dither's integers
   are interleaved (sx0 sy0 sx1 sy1 ..., one unpack each way) and converted pair by pair, scaled by
   (a25, c24, a25, c24): the vector of pairs p, p + 1 is then (ux, uy, ux', uy'), in the layout
   of two codewords and of the output, so no shuffle is left between the codeword loads and the
   stores (the loop was bound by port-5 shuffles: 20 per 8 pairs, now 14). */
static ALWAYS_INLINE void K(hex_store2_f32)(float *y, __m256d r) {
    _mm_storeu_ps(y, _mm256_cvtpd_ps(r));
}
static ALWAYS_INLINE void K(hex_store2_f64)(double *y, __m256d r) { _mm256_storeu_pd(y, r); }

#define DEFINE_HEX_OUT_W(NAME, YT, T)                                                           \
    NOINLINE                                                                                   \
    static void NAME(const int32_t *RESTRICT k, const uint64_t *RESTRICT w, Py_ssize_t n,      \
                     Py_ssize_t half, const hexcode *hc, double sp, double md, YT *RESTRICT y) {\
        const double *RESTRICT pxy = hc->pxy;                                                  \
        const Py_ssize_t m = n < half ? n : half;                                              \
        double a25, c24;                                                                       \
        K(hex_dither_scales)(hc->a, &a25, &c24);                                               \
        const __m256d sc = _mm256_setr_pd(a25, c24, a25, c24);                                 \
        const __m256d vsp = _mm256_set1_pd(sp), vmd = _mm256_set1_pd(md);                      \
        Py_ssize_t p = 0;                                                                      \
        for (; p + 8 <= m; p += 8) {                                                           \
            __m256i sx, sy;                                                                    \
            K(hex_dither8i)(w + p, &sx, &sy);                                                  \
            const __m256i lo = _mm256_unpacklo_epi32(sx, sy); /* pairs 0 1 | 4 5 */            \
            const __m256i hi = _mm256_unpackhi_epi32(sx, sy); /* pairs 2 3 | 6 7 */            \
            const __m128i s2[4] = {_mm256_castsi256_si128(lo), _mm256_castsi256_si128(hi),     \
                                   _mm256_extracti128_si256(lo, 1),                            \
                                   _mm256_extracti128_si256(hi, 1)};                           \
            for (int q = 0; q < 4; q++) {                                                      \
                const Py_ssize_t e = p + 2 * q;                                                \
                __m256d u = _mm256_mul_pd(sc, _mm256_cvtepi32_pd(s2[q]));                      \
                __m256d c = _mm256_insertf128_pd(                                              \
                    _mm256_castpd128_pd256(_mm_loadu_pd(pxy + 2 * (Py_ssize_t)k[e])),          \
                    _mm_loadu_pd(pxy + 2 * (Py_ssize_t)k[e + 1]), 1);                          \
                K(hex_store2_##T)(y + 2 * e,                                                   \
                                  _mm256_add_pd(_mm256_mul_pd(_mm256_sub_pd(c, u), vsp), vmd)); \
            }                                                                                  \
        }                                                                                      \
        for (; p < n; p++) {                                                                   \
            double ux, uy;                                                                     \
            K(hex_dither)(w[p], a25, c24, &ux, &uy);                                           \
            y[2 * p] = (YT)((pxy[2 * k[p]] - ux) * sp + md);                                   \
            if (p < m) y[2 * p + 1] = (YT)((pxy[2 * k[p] + 1] - uy) * sp + md);                \
        }                                                                                      \
    }

DEFINE_HEX_OUT_W(K(hex_out_w_f32), float, f32)
DEFINE_HEX_OUT_W(K(hex_out_w_f64), double, f64)
#else
#define HEX_FUSE_OUT 0
#endif

#undef HEX_IN_VEC
#undef HEX_IN_VEC_f32
#undef HEX_IN_VEC_f64
#if X86_VEC && VL == 4
/* hex_in of float32 pairs 0 .. m - m % 4 without the clamp, 4 per vector; returns how many it
   did. One permutation takes the 8 floats of 4 pairs to (x0..x3 | y0..y3); max(v, -0.5) is
   `v >= -0.5 ? v : -0.5` (vmaxpd returns its second operand for a NaN and for equal values). */
static ALWAYS_INLINE Py_ssize_t K(hex_in_vec_f32)(const float *xr, Py_ssize_t m, double l,
                                                  double s, double *X, double *Y) {
    const __m256d vl = _mm256_set1_pd(l), vs = _mm256_set1_pd(s);
    const __m256d half = _mm256_set1_pd(0.5), corner = _mm256_set1_pd(-0.5);
    const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    Py_ssize_t p = 0;
    for (; p + 4 <= m; p += 4) {
        __m256 v = _mm256_permutevar8x32_ps(_mm256_loadu_ps(xr + 2 * p), split);
        __m256d x = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        __m256d y = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        x = _mm256_sub_pd(_mm256_mul_pd(_mm256_sub_pd(x, vl), vs), half);
        y = _mm256_sub_pd(_mm256_mul_pd(_mm256_sub_pd(y, vl), vs), half);
        _mm256_storeu_pd(X + p, _mm256_max_pd(x, corner));
        _mm256_storeu_pd(Y + p, _mm256_max_pd(y, corner));
    }
    return p;
}
#define HEX_IN_VEC(T, xr, m, l, s, X, Y) HEX_IN_VEC_##T(xr, m, l, s, X, Y)
#define HEX_IN_VEC_f32(xr, m, l, s, X, Y) K(hex_in_vec_f32)(xr, m, l, s, X, Y)
#define HEX_IN_VEC_f64(xr, m, l, s, X, Y) 0
#else
#define HEX_IN_VEC(T, xr, m, l, s, X, Y) 0
#endif

/* The centred unit-box coordinate of the entry v of a row of range l, 1/span s; NaN -> a box
   corner (the call raises). */
static inline double K(hex_box)(double v, double l, double s) {
    double X = (v - l) * s - 0.5;
    return X >= -0.5 ? X : -0.5;
}

/* Centred unit-box coordinates of the pairs p0 .. p0 + n - 1 of a row (padding: the centre);
   entries are clamped into [l, h] and counted as in CLAMP_COUNT. The loop starts at the
   pair FIRST of xr (the pairs before it done by HEX_IN_VEC). */
#define HEX_IN_LOOP(CLAMP, FIRST)                                                               \
    for (Py_ssize_t p = (FIRST); p < m; p++) {                                                 \
        double v0 = (double)xr[2 * p], v1 = (double)xr[2 * p + 1];                             \
        if (CLAMP) {                                                                           \
            CLAMP_COUNT(v0, l, h, clip, bad);                                                  \
            CLAMP_COUNT(v1, l, h, clip, bad);                                                  \
        }                                                                                      \
        X[p] = K(hex_box)(v0, l, s);                                                           \
        Y[p] = K(hex_box)(v1, l, s);                                                           \
    }

/* clamp = 0 (a row's own min-max range, which contains every finite entry of the row: the
   clamp would change nothing; a non-finite entry makes the range non-finite, which the caller
   checks) skips the clamp and the counts. */
#define DEFINE_HEX_IN(NAME, XT, T)                                                              \
    NOINLINE                                                                                   \
    static void NAME(const XT *xr, Py_ssize_t n, Py_ssize_t half, double l, double h,          \
                     double s, int clamp, double *RESTRICT X, double *RESTRICT Y,              \
                     int64_t *nclip, int64_t *nbad) {                                          \
        int64_t clip = 0, bad = 0;                                                             \
        Py_ssize_t m = n < half ? n : half;                                                    \
        if (clamp) HEX_IN_LOOP(1, 0)                                                           \
        else HEX_IN_LOOP(0, HEX_IN_VEC(T, xr, m, l, s, X, Y))                                  \
        if (m < n) {                                                                           \
            double v0 = (double)xr[2 * m];                                                     \
            CLAMP_COUNT(v0, l, h, clip, bad);                                                  \
            X[m] = K(hex_box)(v0, l, s);                                                       \
            Y[m] = 0.0;                                                                        \
        }                                                                                      \
        *nclip += clip;                                                                        \
        *nbad += bad;                                                                          \
    }

DEFINE_HEX_IN(K(hex_in_f32), float, f32)
DEFINE_HEX_IN(K(hex_in_f64), double, f64)

/* Row constants of the hexagonal quantizer: 1/span (0 for an empty range), span, centre. */
static inline void K(hex_consts)(double l, double h, double *inv, double *span, double *mid) {
    *span = h - l;
    *inv = *span > 0.0 ? 1.0 / *span : 0.0;
    *mid = l + 0.5 * *span;
}

/* Load indices (from the wire) into k, clamped into the codebook; count the bad ones. */
#define DEFINE_HEX_LOAD(NAME, IT)                                                               \
    NOINLINE                                                                                   \
    static int64_t NAME(const IT *idx, Py_ssize_t n, int32_t size, int32_t *k) {               \
        int64_t bad = 0;                                                                       \
        for (Py_ssize_t p = 0; p < n; p++) {                                                   \
            int32_t v = (int32_t)idx[p];                                                       \
            bad += v >= size;                                                                  \
            k[p] = v < size ? v : size - 1;                                                    \
        }                                                                                      \
        return bad;                                                                            \
    }

DEFINE_HEX_LOAD(K(hex_load_u8), uint8_t)
DEFINE_HEX_LOAD(K(hex_load_u16), uint16_t)

#undef HEX_SCREEN
#if X86_VEC && VL == 4
#define HEX_SCREEN 1
/* The float32 screen of the nearest point (compress on AVX2; float32 rows in their own min-max
   range, with dither). A message holds only the indices, and an index depends only on the
   decisions of a2_nearest_scaled: the four roundings m0 = rne(x), m1 = rne(x - 1/2), n0, n1 and
   the coset choice d1 < d0. The screen computes the same formulas in float32 (hex_box, the
   dither from the same integers, (X + ux) ia, ...), 8 pairs per ymm, and keeps a lane's index only
   if every decision is certified to be the one the float64 code makes; the other lanes are
   recomputed by the float64 code (hex_index), so the indices are those of every other path.
   Bound (u = 2^-24; float64 roundings are 2^29 times smaller and inside the slack): the data of a
   screened row are floats in [l, h] with l a float and s = 1/(h - l) a normal float (or 0), and
   ia = 1/a, isa < ia, |ux| <= a/2, |uy| <= a/sqrt3 (the Voronoi cell). Against the reals of the
   float64 formulas: (v - l) s carries 3 roundings of a value <= 1 and X one more of a value
   <= 1/2: |dX| <= 3.6u; ux, uy carry 3 each: <= 1.8u a; X + ux one of a value <= 1/2 + 0.6a; the
   product with ia two more: |x32 - x64| <= u (5.1 ia + 3.5), and x - 1/2 one more rounding of a
   value <= ia/2 + 1.1: <= u (5.6 ia + 4.6) < E = 16u (ia + 1) (likewise y, with isa < ia). (The
   result of a float subtraction that is subnormal is exact; an underflowing product adds at most
   2^-150.) Roundings: rne(x32) = rne(x64) if x32 is more than E from every half-integer, i.e.
   |dx0| < 1/2 - E with dx0 = x32 - rne(x32) (exact); likewise dx1, dy0, dy1 (checked as
   max(|dx0|, |dx1|) < lim = fl(1/2 - E); fl moves lim by at most u/2, inside the slack). With
   the same roundings each of dx0 .. dy1 differs from its float64 value by at most E, and
   |dx|, |dy| <= 1/2, so |d32 - d64| <= E + 3E + 3u (the squares, the product by 3 and the sum, all
   <= 1) and the two differences d1 - d0 by at most 8E + 6u; fl(d1 - d0) has relative error u.
   |fl32(d1 - d0)| > Ed = 16E (> (8E + 7u)(1 + u) as E >= 16u) certifies the sign, hence d1 < d0,
   and excludes the float64 tie (first coset) as well. The call needs E <= 2^-8 and ia <= 2^20
   (every |x| < 2^21: the rounding by 1.5 2^23 is exact; its low bits are the integer). Pairs
   left to the float64 code, measured on standard normal rows (4096, 256): 6.5 10^-5 (b = 2),
   1.7 10^-4 (b = 3), 3.9 10^-4 (b = 4).
   tests/test_hex_screen.py compares the indices with a float64 transcription on points placed
   within 2^-24 .. 2^-8 of every decision boundary, on every path. */
typedef struct {
    float ia, isa, a25, c24, lim, ed;
    double a25d, c24d; /* the float64 dither scales (hex_dither_scales), for hex_index */
} K(hexscreen);

/* The margin E = 2^-20 (ia + 1) divided by 2^CVFL_HEX_SCREEN_SHRINK: 0 here; tests build the
   kernels with a margin too small (16 times) to show that tests/test_hex_screen.py then fails. */
#ifndef CVFL_HEX_SCREEN_SHRINK
#define CVFL_HEX_SCREEN_SHRINK 0
#endif

/* The screen's constants; 0 if the codebook rules the screen out. */
static int K(hex_screen_consts)(const K(hexnear) *nc, double a, K(hexscreen) *sc) {
    const double e = ldexp(0x1p-20, -CVFL_HEX_SCREEN_SHRINK) * (nc->ia + 1.0);
    K(hex_dither_scales)(a, &sc->a25d, &sc->c24d);
    if (!(e <= 0x1p-8 && nc->ia <= 0x1p20 && sc->a25d >= 0x1p-100)) return 0;
    sc->ia = (float)nc->ia;
    sc->isa = (float)nc->isa;
    sc->a25 = (float)sc->a25d;
    sc->c24 = (float)sc->c24d;
    sc->lim = (float)(0.5 - e);
    sc->ed = (float)(16.0 * e);
    return 1;
}

/* Whether the screen's bound holds for a row of range [l, h], s = 1/(h - l) or 0 (NaN and
   infinite ranges fail: the float64 code runs and the call raises). */
static inline int K(hex_screen_row)(double l, double h, double s) {
    return (double)(float)l == l && h - l <= 0x1p126 &&
           (s == 0.0 || (s >= 0x1p-126 && s <= 0x1.fffffep127));
}

/* The index of pair (v0, v1) of a row with stream word w, the float64 code (hex_box,
   hex_dither, hex_cell, the table). */
static int32_t K(hex_index)(double v0, double v1, double l, double s, uint64_t w,
                            const K(hexscreen) *sc, const K(hexnear) *c, const int32_t *lut) {
    double ux, uy;
    K(hex_dither)(w, sc->a25d, sc->c24d, &ux, &uy);
    const double x = (K(hex_box)(v0, l, s) + ux) * c->ia, y = (K(hex_box)(v1, l, s) + uy) * c->isa;
    return lut[K(hex_cell)(x, y, c->i0, c->j0, c->imax, c->jmax, c->dwidth)];
}

/* The indices k of the pairs 0 .. m - m % 8 (m <= HB) of a screened row segment (xr: its
   float32 entries, w: the pairs' stream words); returns how many pairs it did. Three loops, each
   a short dependency chain (one loop from the entries to the table lookup is a chain of about 90
   cycles per 8 pairs, more than the out-of-order window hides: compress took 1.69-1.73 ms
   against 1.50-1.52 ms): the scaled points x, y; the decisions, certified, and the table
   cells; the table lookups (scalar: vpgatherdd was no faster). */
NOINLINE static Py_ssize_t K(hex_screen_f32)(const float *RESTRICT xr, Py_ssize_t m, double l,
                                             double s, const uint64_t *RESTRICT w,
                                             const K(hexscreen) *sc, const K(hexnear) *c,
                                             const int32_t *RESTRICT lut, int32_t *RESTRICT k) {
    float xs[HB], ys[HB];
    uint8_t redo[HB / 8]; /* per 8 pairs: the lanes to recompute */
    const Py_ssize_t n = m - m % 8;
    const __m256 half = _mm256_set1_ps(0.5f);
    {
        const __m256 vl = _mm256_set1_ps((float)l), vs = _mm256_set1_ps((float)s);
        const __m256 corner = _mm256_set1_ps(-0.5f);
        const __m256 ia = _mm256_set1_ps(sc->ia), isa = _mm256_set1_ps(sc->isa);
        const __m256 a25 = _mm256_set1_ps(sc->a25), c24 = _mm256_set1_ps(sc->c24);
        for (Py_ssize_t p = 0; p < n; p += 8) {
            /* pairs p, p + 1 | p + 4, p + 5 and p + 2, p + 3 | p + 6, p + 7: one in-lane
               shuffle from the 8 first and the 8 second entries in order (as in hex_dither8i) */
            const float *v = xr + 2 * p;
            __m256 v0145 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(v)),
                                                _mm_loadu_ps(v + 8), 1);
            __m256 v2367 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(v + 4)),
                                                _mm_loadu_ps(v + 12), 1);
            __m256 X = _mm256_shuffle_ps(v0145, v2367, 0x88);
            __m256 Y = _mm256_shuffle_ps(v0145, v2367, 0xDD);
            X = _mm256_max_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_sub_ps(X, vl), vs), half), corner);
            Y = _mm256_max_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_sub_ps(Y, vl), vs), half), corner);
            __m256i sx, sy;
            K(hex_dither8i)(w + p, &sx, &sy);
            __m256 ux = _mm256_mul_ps(a25, _mm256_cvtepi32_ps(sx));
            __m256 uy = _mm256_mul_ps(c24, _mm256_cvtepi32_ps(sy));
            _mm256_storeu_ps(xs + p, _mm256_mul_ps(_mm256_add_ps(X, ux), ia));
            _mm256_storeu_ps(ys + p, _mm256_mul_ps(_mm256_add_ps(Y, uy), isa));
        }
    }
    {
        const __m256 three = _mm256_set1_ps(3.0f), sign = _mm256_set1_ps(-0.0f);
        const __m256 magic = _mm256_set1_ps(12582912.0f); /* 1.5 * 2^23 */
        const __m256 lim = _mm256_set1_ps(sc->lim), ed = _mm256_set1_ps(sc->ed);
        const __m256i imagic = _mm256_castps_si256(magic);
        const __m256i i0 = _mm256_set1_epi32((int32_t)c->i0);
        const __m256i j0 = _mm256_set1_epi32((int32_t)c->j0);
        const __m256i imax = _mm256_set1_epi32((int32_t)c->imax);
        const __m256i jmax = _mm256_set1_epi32((int32_t)c->jmax);
        const __m256i width = _mm256_set1_epi32((int32_t)c->dwidth);
        const __m256i zero = _mm256_setzero_si256();
        for (Py_ssize_t p = 0; p < n; p += 8) {
            __m256 x = _mm256_loadu_ps(xs + p), y = _mm256_loadu_ps(ys + p);
            __m256 x1 = _mm256_sub_ps(x, half), y1 = _mm256_sub_ps(y, half);
            __m256 rx0 = _mm256_add_ps(x, magic), ry0 = _mm256_add_ps(y, magic);
            __m256 rx1 = _mm256_add_ps(x1, magic), ry1 = _mm256_add_ps(y1, magic);
            __m256 dx0 = _mm256_sub_ps(x, _mm256_sub_ps(rx0, magic));
            __m256 dy0 = _mm256_sub_ps(y, _mm256_sub_ps(ry0, magic));
            __m256 dx1 = _mm256_sub_ps(x1, _mm256_sub_ps(rx1, magic));
            __m256 dy1 = _mm256_sub_ps(y1, _mm256_sub_ps(ry1, magic));
            __m256 d0 = _mm256_add_ps(_mm256_mul_ps(dx0, dx0),
                                      _mm256_mul_ps(three, _mm256_mul_ps(dy0, dy0)));
            __m256 d1 = _mm256_add_ps(_mm256_mul_ps(dx1, dx1),
                                      _mm256_mul_ps(three, _mm256_mul_ps(dy1, dy1)));
            __m256 big = _mm256_max_ps(
                _mm256_max_ps(_mm256_andnot_ps(sign, dx0), _mm256_andnot_ps(sign, dx1)),
                _mm256_max_ps(_mm256_andnot_ps(sign, dy0), _mm256_andnot_ps(sign, dy1)));
            __m256 ok = _mm256_and_ps(
                _mm256_cmp_ps(big, lim, _CMP_LT_OQ),
                _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(d1, d0)), ed, _CMP_GT_OQ));
            redo[p / 8] = (uint8_t)~_mm256_movemask_ps(ok);
            /* the integer part as in hex_nearest_vec: m0 .. n1 = the roundings' low bits */
            __m256i use1 = _mm256_castps_si256(_mm256_cmp_ps(d1, d0, _CMP_LT_OQ));
            __m256i m0 = _mm256_sub_epi32(_mm256_castps_si256(rx0), imagic);
            __m256i n0 = _mm256_sub_epi32(_mm256_castps_si256(ry0), imagic);
            __m256i m1 = _mm256_sub_epi32(_mm256_castps_si256(rx1), imagic);
            __m256i n1 = _mm256_sub_epi32(_mm256_castps_si256(ry1), imagic);
            __m256i j = _mm256_blendv_epi8(n0, n1, use1);
            __m256i i = _mm256_sub_epi32(_mm256_blendv_epi8(m0, m1, use1), j);
            j = _mm256_sub_epi32(_mm256_add_epi32(j, j), use1);
            i = _mm256_min_epi32(_mm256_max_epi32(_mm256_sub_epi32(i, i0), zero), imax);
            j = _mm256_min_epi32(_mm256_max_epi32(_mm256_sub_epi32(j, j0), zero), jmax);
            _mm256_storeu_si256((__m256i *)(k + p),
                                _mm256_add_epi32(_mm256_mullo_epi32(j, width), i));
        }
    }
    for (Py_ssize_t p = 0; p < n; p++) k[p] = lut[k[p]];
    for (Py_ssize_t g = 0; g < n / 8; g++)
        for (unsigned r = redo[g]; r; r &= r - 1) {
            const Py_ssize_t q = 8 * g + CTZ64(r);
            k[q] = K(hex_index)(xr[2 * q], xr[2 * q + 1], l, s, w[q], sc, c, lut);
        }
    return n;
}
#else
#define HEX_SCREEN 0
#endif

/* perf (issue 13): HexLatticeQuantizer(3) compress + decompress of a (4096, 256) float32 array,
   kernel CPU time (medians of 150, three interleaved runs; perf record for the shares). Before:
   AVX2 2.53 + 1.54 = 4.07 ms, AVX-512 1.63 + 1.02 = 2.65 ms. On AVX2 the plain loops compiled to
   code dominated by lane shuffles (port 5): the dither deinterleaved each 8 words into halves
   with 10 shuffles, the reconstruction assembled px[k], py[k] from scalar loads with vmovhpd /
   vinsertf128 (14 shuffles per 8 pairs), hex_in clamped with compare + blend; the nearest-point
   loop spilled (16 ymm registers) and spent 17 double operations per 4 pairs on exact integers;
   and every phase ran once per row (4096 calls each, two divisions per nearest-point call). Now,
   with the same bits on every path: AVX2 2.10 + 1.17 = 3.27 ms (-20%), AVX-512 1.61 + 0.84 =
   2.45 ms (-7%). What is left on AVX2, of compress + decompress: the nearest point 30%, the
   dither 25% (both sides), the stream 15%, hex_out 10%, hex_in 8%, row ranges, chunk loop and
   index stores 8%, index loads 3%. Each loop now runs near the vector throughput of its
   float64 operations, which are fixed (same operations, same order, no FMA: the same bits on
   every path); AVX2 executes them 4 wide against AVX-512's 8, without masked selects and
   without the 64-bit rotate (vprolq) the stream uses on AVX-512.
   Second pass (main-thread CPU time of 150 calls, medians, three interleaved runs per build,
   same machine): decompress on AVX2 computes the dither inside the reconstruction loop
   (hex_out_w: ux, uy never go through memory) and hex_dither8 spends two fewer integer
   operations, and the nearest point one fewer subtraction: AVX2 compress 2.19 -> 2.17 ms,
   decompress 1.24 -> 1.18 ms, compress + decompress 3.51 -> 3.38 ms (-4%); AVX-512 unchanged
   (2.62 -> 2.60 ms, noise). Tried and dropped, all on AVX2: hex_in and the dither fused into
   the nearest-point loop (slower: 2.55 ms compress; each iteration's dependency chain, about
   80 cycles from the input to the table lookup, and the spills of 16 ymm registers leave too
   few iterations in flight), four scalar table lookups instead of vpgatherdd (slower, 2.40),
   the lookup moved to a separate loop (no gain), hex_load_u8 fused into hex_out_w (no gain,
   1.17-1.21 against 1.18 ms). What is left is the float64 work itself, fixed by the bits.
   Third pass: the indices need only the nearest point's decisions, not its float64 values, so
   on AVX2 a float32 screen (hex_screen_f32: 8 pairs per ymm, from the float32 entries and the
   dither's integers, no float64 X, Y, ux, uy) with a certified error bound makes them, and the
   float64 code redoes the rare uncertain pairs. Interleaved CPU-time medians of 60 calls:
   AVX2 compress 2.18 -> 1.62 ms, compress + decompress 3.35 -> 2.80 ms (-16%); the same bits
   (tests/test_hex_screen.py places points within 2^-24 .. 2^-8 of every decision boundary).
   Dropping the 8 index shifts of hex_out_w changed nothing (1.21 -> 1.20 ms): the loop was bound
   by port 5 (20 shuffles per 8 pairs); the dither converted pair by pair in the output's layout
   (14 shuffles) gives decompress 1.22 -> 1.16 ms. */

/* The whole hexagonal quantizer, in chunks of HB consecutive pairs of the row-major pair array
   (a chunk may hold several rows, and a row may span chunks), each phase a simple loop: the
   dither of the chunk; its rows' unit-box coordinates (or the indices read); the nearest points
   of the whole chunk; the rows' reconstructions. With x == NULL the indices idx are read
   (decompress; counts[1] = indices outside the codebook); else they are computed (and stored
   if idx; counts = clipped, non-finite entries). With y the reconstruction is written. xt/yt:
   T_F32 or T_F64; it: T_U8 or T_U16. */
static void K(hex_run)(const void *x, int xt, Py_ssize_t B, Py_ssize_t P, int rowmode,
                    rowparam lo, rowparam hi, const hexcode *hc, int dither, uint64_t seed,
                    void *idx, int it, void *y, int yt, int64_t *counts) {
    const Py_ssize_t npairs = (P + 1) / 2, total = B * npairs;
    double X[HB], Y[HB], ux[HB], uy[HB];
    int32_t k[HB];
    stream_t st;
    K(hexnear) nc;
    uint64_t w[HB]; /* the stream words of a chunk (the screen, hex_out_w: the dither there) */
    K(stream_init)(&st, seed);
    K(hex_near_consts)(hc, &nc);
#if HEX_SCREEN
    K(hexscreen) sc;
    const int screen = dither && rowmode && xt == T_F32 && x != NULL &&
                       K(hex_screen_consts)(&nc, hc->a, &sc);
#else
    const int screen = 0;
#endif
#if HEX_FUSE_OUT
    const int fuse_out = dither && y != NULL && (x == NULL || screen); /* see hex_out_w */
#else
    const int fuse_out = 0;
#endif
    counts[0] = counts[1] = 0;
    double l = 0.0, h = 0.0, s = 0.0, sp = 0.0, md = 0.0;
    for (Py_ssize_t b = 0; npairs == 0 && x != NULL && b < B; b++) { /* no pairs: ranges only */
        if (xt == T_F32)
            ROW_BOUNDS(K(row_range_f32), rowmode, lo, hi, b, (const float *)x + b * P, P, l, h);
        else
            ROW_BOUNDS(K(row_range_f64), rowmode, lo, hi, b, (const double *)x + b * P, P, l, h);
    }
    for (Py_ssize_t g0 = 0; g0 < total; g0 += HB) {
        const Py_ssize_t nchunk = total - g0 < HB ? total - g0 : HB;
        Py_ssize_t b, p0, n;
        if (fuse_out || screen) {
            K(stream_words)(&st, w, nchunk); /* the dither: in hex_screen_f32, hex_out_w */
        } else if (dither) {
            K(hex_dither_block)(&st, nchunk, hc->a, ux, uy);
        } else {
            memset(ux, 0, (size_t)nchunk * sizeof(double));
            memset(uy, 0, (size_t)nchunk * sizeof(double));
        }
        if (x != NULL) {
            for (Py_ssize_t q = 0; q < nchunk; q += n) {
                K(hex_segment)(g0, q, nchunk, npairs, &b, &p0, &n);
                if (p0 == 0 && xt == T_F32) /* a new row: its range (stored in rowmode) */
                    ROW_BOUNDS(K(row_range_f32), rowmode, lo, hi, b, (const float *)x + b * P, P, l, h);
                else if (p0 == 0)
                    ROW_BOUNDS(K(row_range_f64), rowmode, lo, hi, b, (const double *)x + b * P, P, l, h);
                if (p0 == 0) K(hex_consts)(l, h, &s, &sp, &md);
#if HEX_SCREEN
                if (screen) { /* the screen, then the float64 code for the pairs it left */
                    const float *xr = (const float *)x + b * P + 2 * p0;
                    const Py_ssize_t half = P / 2 - p0;
                    Py_ssize_t d = 0;
                    if (K(hex_screen_row)(l, h, s))
                        d = K(hex_screen_f32)(xr, n < half ? n : half, l, s, w + q, &sc, &nc,
                                              hc->lut, k + q);
                    if (d < n) {
                        K(hex_dither_words)(w + q + d, n - d, hc->a, ux + q + d, uy + q + d);
                        K(hex_in_f32)(xr + 2 * d, n - d, half - d, l, h, s, 0, X + q + d,
                                      Y + q + d, &counts[0], &counts[1]);
                        K(hex_nearest_block)(X + q + d, Y + q + d, ux + q + d, uy + q + d, n - d,
                                             &nc, hc->lut, k + q + d);
                    }
                    continue;
                }
#endif
                if (xt == T_F32)
                    K(hex_in_f32)((const float *)x + b * P + 2 * p0, n, P / 2 - p0, l, h, s,
                                  !rowmode, X + q, Y + q, &counts[0], &counts[1]);
                else
                    K(hex_in_f64)((const double *)x + b * P + 2 * p0, n, P / 2 - p0, l, h, s,
                                  !rowmode, X + q, Y + q, &counts[0], &counts[1]);
            }
            if (!screen) K(hex_nearest_block)(X, Y, ux, uy, nchunk, &nc, hc->lut, k);
            if (idx != NULL && it == T_U8)
                for (Py_ssize_t p = 0; p < nchunk; p++) ((uint8_t *)idx)[g0 + p] = (uint8_t)k[p];
            else if (idx != NULL)
                for (Py_ssize_t p = 0; p < nchunk; p++) ((uint16_t *)idx)[g0 + p] = (uint16_t)k[p];
        } else if (it == T_U8) {
            counts[1] += K(hex_load_u8)((const uint8_t *)idx + g0, nchunk, (int32_t)hc->size, k);
        } else {
            counts[1] += K(hex_load_u16)((const uint16_t *)idx + g0, nchunk, (int32_t)hc->size, k);
        }
        for (Py_ssize_t q = 0; y != NULL && q < nchunk; q += n) {
            K(hex_segment)(g0, q, nchunk, npairs, &b, &p0, &n);
            if (p0 == 0 || q == 0) /* the row's range: given, or computed above (rowmode) */
                K(hex_consts)(ROW(lo, b), ROW(hi, b), &s, &sp, &md);
#if HEX_FUSE_OUT
            if (fuse_out && yt == T_F32)
                K(hex_out_w_f32)(k + q, w + q, n, P / 2 - p0, hc, sp, md,
                                 (float *)y + b * P + 2 * p0);
            else if (fuse_out)
                K(hex_out_w_f64)(k + q, w + q, n, P / 2 - p0, hc, sp, md,
                                 (double *)y + b * P + 2 * p0);
            else
#endif
            if (yt == T_F32)
                K(hex_out_f32)(k + q, ux + q, uy + q, n, P / 2 - p0, hc, sp, md,
                               (float *)y + b * P + 2 * p0);
            else
                K(hex_out_f64)(k + q, ux + q, uy + q, n, P / 2 - p0, hc, sp, md,
                               (double *)y + b * P + 2 * p0);
        }
    }
}

/* ------------------------------------------------------------------------------------------- */
/* top-k by magnitude (C5.4)                                                                   */
/* Keys: the IEEE bits of |x| (monotone in |x| for finite x). The k-th largest key T is found  */
/* by a bracketed search on #{key >= t} (SEARCH_STEP), stopping early when exactly k keys are  */
/* >= the probe; kept: keys > T, then keys == T in column order until k are kept.              */

/* Counts and flags over blocks of 64 keys. The key arrays are zero-padded to a multiple of 64
   (PAD64) and every threshold counted is >= 1, so the pads never count; the flags and the
   gathers mask them out. */

/* count_ge_*(a, n, t) = #{i < n : a[i] >= t} (n a multiple of 64). AVX-512 compares a vector
   of keys into a mask register and adds its popcount: the compiler's loop on an unknown n kept
   vector counters and summed them across lanes at every probe of the search (about 1.4x
   slower, measured). AVX2 compares a > t - 1 (t >= 1: its only integer comparison) into four
   vector counters summed once. The compiler's loop took min(a, t) == t for 32-bit keys (one
   instruction more) and narrowed 64-bit comparisons into 32-bit counters: against it the
   float32 selection is 1.07x faster (its compress + decompress 1.05x) and the float64
   compress + decompress 1.2x, measured on an AVX2 EPYC (Zen 3); the compiler's loop was
   itself 1.2x faster than movemask and popcount. */
#if X86_VEC && VL == 8
#define COUNT_BODY(LANES, SET1, CMPMASK)                                                        \
    const __m512i tv = SET1(t);                                                                \
    Py_ssize_t n0 = 0, n1 = 0;                                                                 \
    for (Py_ssize_t i = 0; i < n; i += 2 * LANES) {                                            \
        n0 += __builtin_popcountll((uint64_t)CMPMASK(_mm512_loadu_si512(a + i), tv));          \
        n1 += __builtin_popcountll((uint64_t)CMPMASK(_mm512_loadu_si512(a + i + LANES), tv));  \
    }                                                                                          \
    return n0 + n1;
#define GE_I32(x, tv) _mm512_cmpge_epi32_mask(x, tv)
#define GE_I64(x, tv) _mm512_cmpge_epi64_mask(x, tv)
#define SET_I32(v) _mm512_set1_epi32(v)
#define SET_I64(v) _mm512_set1_epi64(v)
#define COUNT_I32 COUNT_BODY(16, SET_I32, GE_I32)
#define COUNT_I64 COUNT_BODY(8, SET_I64, GE_I64)
#elif X86_VEC /* AVX2 */
/* a comparison's lane is -1 or 0: subtracting it counts; STEP keys per vector */
#define COUNT_BODY(STEP, SET1, GT, SUB, ADD, ADD128, LAST)                                     \
    const __m256i tv = SET1(t - 1);                                                            \
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;                            \
    for (Py_ssize_t i = 0; i < n; i += 4 * STEP) {                                             \
        c0 = SUB(c0, GT(_mm256_loadu_si256((const __m256i *)(a + i)), tv));                    \
        c1 = SUB(c1, GT(_mm256_loadu_si256((const __m256i *)(a + i + STEP)), tv));             \
        c2 = SUB(c2, GT(_mm256_loadu_si256((const __m256i *)(a + i + 2 * STEP)), tv));         \
        c3 = SUB(c3, GT(_mm256_loadu_si256((const __m256i *)(a + i + 3 * STEP)), tv));         \
    }                                                                                          \
    const __m256i c = ADD(ADD(c0, c1), ADD(c2, c3));                                           \
    __m128i h = ADD128(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));             \
    h = ADD128(h, _mm_unpackhi_epi64(h, h));                                                   \
    return (Py_ssize_t)LAST(h);
#define LAST_I32(h) (_mm_cvtsi128_si32(h) + _mm_cvtsi128_si32(_mm_srli_si128(h, 4)))
#define COUNT_I32                                                                              \
    COUNT_BODY(8, _mm256_set1_epi32, _mm256_cmpgt_epi32, _mm256_sub_epi32, _mm256_add_epi32,  \
               _mm_add_epi32, LAST_I32)
#define COUNT_I64                                                                              \
    COUNT_BODY(4, _mm256_set1_epi64x, _mm256_cmpgt_epi64, _mm256_sub_epi64, _mm256_add_epi64, \
               _mm_add_epi64, _mm_cvtsi128_si64)
#else
/* the compiler's loop; a 32-bit count lets it add the comparisons' lanes without widening
   them */
#define COUNT_PLAIN(CT)                                                                        \
    CT cnt = 0;                                                                                \
    for (Py_ssize_t i = 0; i < n; i++) cnt += (CT)(a[i] >= t);                                 \
    return (Py_ssize_t)cnt;
#define COUNT_I32 COUNT_PLAIN(int32_t)
#define COUNT_I64 COUNT_PLAIN(int32_t)
#endif

static ALWAYS_INLINE Py_ssize_t K(count_ge_i32)(const int32_t *a, Py_ssize_t n, int32_t t) {
    COUNT_I32
}
static ALWAYS_INLINE Py_ssize_t K(count_ge_i64)(const int64_t *a, Py_ssize_t n, int64_t t) {
    COUNT_I64
}
#undef COUNT_BODY
#undef LAST_I32
#undef COUNT_PLAIN
#undef COUNT_I32
#undef COUNT_I64
#undef GE_I32
#undef GE_I64
#undef SET_I32
#undef SET_I64

/* The flags key >= t of keys a[0..63] as the bits of an integer (key i -> bit i), for
   non-negative keys (gather_ge_* without AVX-512). AVX2 compares key > t - 1 (its only
   integer comparison) and takes the lanes' sign bits (movemask, 8 or 4 flags at a time: the
   part of a row's select that is not the search, 2.4x faster than with the flags stored as
   bytes and packed, measured on an AVX2 EPYC); the portable path stores the flags as bytes
   and packs them. */
#if X86_VEC && VL == 4
static ALWAYS_INLINE uint64_t K(ge_bits_i32)(const int32_t *a, int32_t t, uint8_t *sel) {
    (void)sel;
    const __m256i tv = _mm256_set1_epi32(t - 1);
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++) {
        __m256i g = _mm256_cmpgt_epi32(_mm256_loadu_si256((const __m256i *)(a + 8 * i)), tv);
        bits |= (uint64_t)(uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(g)) << (8 * i);
    }
    return bits;
}
static ALWAYS_INLINE uint64_t K(ge_bits_i64)(const int64_t *a, int64_t t, uint8_t *sel) {
    (void)sel;
    const __m256i tv = _mm256_set1_epi64x((long long)(t - 1));
    uint64_t bits = 0;
    for (int i = 0; i < 16; i++) {
        __m256i g = _mm256_cmpgt_epi64(_mm256_loadu_si256((const __m256i *)(a + 4 * i)), tv);
        bits |= (uint64_t)(uint32_t)_mm256_movemask_pd(_mm256_castsi256_pd(g)) << (4 * i);
    }
    return bits;
}
#elif !X86_VEC
/* The 8 flags (bytes 0/1) at p as the bits of an integer, flag i -> bit i. */
static inline uint64_t K(PACK8)(const uint8_t *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t w;
    memcpy(&w, p, 8);
    return (w * 0x0102040810204080ULL) >> 56; /* byte i (0/1) lands on bit 56 + i */
#else
    uint64_t b = 0;
    for (int i = 0; i < 8; i++) b |= (uint64_t)p[i] << i;
    return b;
#endif
}

#define GE_BITS                                                                                \
    for (int i = 0; i < 64; i++) sel[i] = (uint8_t)(a[i] >= t);                                \
    uint64_t bits = 0;                                                                         \
    for (int i = 0; i < 8; i++) bits |= K(PACK8)(sel + 8 * i) << (8 * i);                      \
    return bits;
static ALWAYS_INLINE uint64_t K(ge_bits_i32)(const int32_t *a, int32_t t, uint8_t *sel) {
    GE_BITS
}
static ALWAYS_INLINE uint64_t K(ge_bits_i64)(const int64_t *a, int64_t t, uint8_t *sel) {
    GE_BITS
}
#undef GE_BITS
#endif

/* gather_ge_*(keys, x, P, t, cols, vals): the columns c < P with keys[c] >= t, in order, and
   their values x[c]; returns how many. AVX-512 packs the flagged lanes of a vector together
   (compress, register form: the memory form is microcoded on AMD Zen 4) and stores them with
   a masked store, with no branch on the data (the loop over the flags' bits mispredicts at
   each vector's end); elsewhere the loop over the set bits of ge_bits_*. keys is padded to a
   multiple of 64 (columns c >= P are masked out). */
#if X86_VEC && VL == 8
static ALWAYS_INLINE Py_ssize_t K(gather_ge_f32)(const int32_t *keys, const float *x,
                                                 Py_ssize_t P, int32_t t, uint8_t *sel,
                                                 int32_t *cols, float *vals) {
    (void)sel;
    const __m512i tv = _mm512_set1_epi32(t), step = _mm512_set1_epi32(16);
    __m512i iv = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    Py_ssize_t m = 0;
    for (Py_ssize_t c = 0; c < P; c += 16, iv = _mm512_add_epi32(iv, step)) {
        __mmask16 in = P - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (P - c)) - 1);
        __mmask16 ge = _mm512_mask_cmpge_epi32_mask(in, _mm512_loadu_si512(keys + c), tv);
        __m512 xv = _mm512_maskz_loadu_ps(in, x + c);
        __mmask16 out = (__mmask16)((1u << __builtin_popcount((unsigned)ge)) - 1);
        _mm512_mask_storeu_epi32(cols + m, out, _mm512_maskz_compress_epi32(ge, iv));
        _mm512_mask_storeu_ps(vals + m, out, _mm512_maskz_compress_ps(ge, xv));
        m += __builtin_popcount((unsigned)ge);
    }
    return m;
}
static ALWAYS_INLINE Py_ssize_t K(gather_ge_f64)(const int64_t *keys, const double *x,
                                                 Py_ssize_t P, int64_t t, uint8_t *sel,
                                                 int32_t *cols, double *vals) {
    (void)sel;
    const __m512i tv = _mm512_set1_epi64(t);
    const __m256i step = _mm256_set1_epi32(8);
    __m256i iv = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    Py_ssize_t m = 0;
    for (Py_ssize_t c = 0; c < P; c += 8, iv = _mm256_add_epi32(iv, step)) {
        __mmask8 in = P - c >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (P - c)) - 1);
        __mmask8 ge = _mm512_mask_cmpge_epi64_mask(in, _mm512_loadu_si512(keys + c), tv);
        __m512d xv = _mm512_maskz_loadu_pd(in, x + c);
        __mmask8 out = (__mmask8)((1u << __builtin_popcount((unsigned)ge)) - 1);
        _mm256_mask_storeu_epi32(cols + m, out, _mm256_maskz_compress_epi32(ge, iv));
        _mm512_mask_storeu_pd(vals + m, out, _mm512_maskz_compress_pd(ge, xv));
        m += __builtin_popcount((unsigned)ge);
    }
    return m;
}
#else
#define GATHER_GE(NAME, KT, XT, GEBITS)                                                        \
    static ALWAYS_INLINE Py_ssize_t NAME(const KT *keys, const XT *x, Py_ssize_t P, KT t,      \
                                         uint8_t *sel, int32_t *cols, XT *vals) {              \
        Py_ssize_t m = 0;                                                                      \
        for (Py_ssize_t c0 = 0; c0 < P; c0 += 64) {                                            \
            uint64_t bits = GEBITS(keys + c0, t, sel);                                         \
            if (P - c0 < 64) bits &= ((uint64_t)1 << (P - c0)) - 1; /* not the pads */         \
            while (bits) {                                                                     \
                Py_ssize_t c = c0 + CTZ64(bits);                                               \
                cols[m] = (int32_t)c;                                                          \
                vals[m] = x[c];                                                                \
                m++;                                                                           \
                bits &= bits - 1;                                                              \
            }                                                                                  \
        }                                                                                      \
        return m;                                                                              \
    }
GATHER_GE(K(gather_ge_f32), int32_t, float, K(ge_bits_i32))
GATHER_GE(K(gather_ge_f64), int64_t, double, K(ge_bits_i64))
#undef GATHER_GE
#endif

/* The k-th largest key of each row by a bracketed search on the count #{keys >= t}: the
   bracket [lo, hi) holds it, with #{keys >= lo} = clo >= k > chi = #{keys >= hi}. Each probe
   is one counting pass (COUNT). The first probe is the threshold of the row TOPK_ROWS rows
   before (rows of one matrix have similar tails), then the point where the straight line
   through (lo, clo) and (hi, chi) reaches k (the count is smooth in the key for most data:
   4-5 probes a row of 256 Gaussians, against 15-30 passes of the earlier descent, one key bit
   per pass); from the ninth probe on the midpoint, so that whatever the data the bracket
   halves at every probe past the eighth (at most 8 + NBITS - 1 probes). Each probe lies
   strictly inside the bracket, so the bracket shrinks at every probe. A row stops with
   exact = 1 as soon as exactly k keys are >= the probe (its threshold tx); else its
   threshold is lo, the k-th largest key, once hi = lo + 1 (ties there). The keys are the
   magnitudes' bit patterns, so a straight line in key space is one in log |x| within an
   exponent.

   A probe's count depends on the probe before it, so one row's search is a chain of
   dependent passes. TOPK_ROWS rows are searched in lockstep, one probe of each unfinished row
   per round: independent chains the core can overlap. The state updates are selects, not
   branches (either way about half the time). The result does not depend on the probes
   taken: the k keys >= any threshold with exactly k keys above it are the same k. TOPK_ROWS
   (at most TOPK_GROUP, the rows the caller's key buffer holds): 4 on AVX2, 1.1x faster than
   one at a time; 1 on AVX-512, where 4 were 1.05-1.2x slower (both measured on an AMD EPYC,
   Zen 4, the AVX2 path forced); 4 on the portable path (no difference measured there). */
#if X86_VEC && VL == 8
#define TOPK_ROWS 1
#else
#define TOPK_ROWS TOPK_GROUP
#endif
#define SEARCH_STEP(COUNT, KEYS, KT, UKT, R)                                                   \
    {                                                                                          \
        const UKT l = lo[R], h = hi[R], w = h - l, pv = (UKT)prev[R];                          \
        const double f = (double)(clo[R] - k) / (double)(clo[R] - chi[R]);                     \
        const double offd = f * (double)w;                                                     \
        UKT off = offd >= (double)(w - 1) ? w - 1 : (UKT)offd;                                 \
        off = off < 1 ? 1 : off;                                                               \
        UKT cand = probe >= 8 ? l + w / 2 : l + off;                                           \
        cand = probe == 0 && pv > l && pv < h ? pv : cand;                                     \
        const Py_ssize_t cnt = COUNT(KEYS, Pp, (KT)cand);                                      \
        /* selects as masks: the compiler turns a ?: here into a branch */                     \
        const UKT um = (UKT)0 - (UKT)(cnt > k);                                                \
        const Py_ssize_t cm = -(Py_ssize_t)(cnt > k);                                          \
        lo[R] = (cand & um) | (l & ~um);                                                       \
        hi[R] = (h & um) | (cand & ~um);                                                       \
        clo[R] = (cnt & cm) | (clo[R] & ~cm);                                                  \
        chi[R] = (chi[R] & cm) | (cnt & ~cm);                                                  \
        exact[R] = cnt == k;                                                                   \
        tx[R] = (KT)cand;                                                                      \
    }

/* keys: TOPK_ROWS * PAD64(P) entries, sel: PAD64(P) zero bytes (the caller's buffers) */
#define DEFINE_TOPK(NAME, XT, KT, UKT, NBITS, EXPMASK, COUNTK, GATHER)                         \
    static int64_t NAME(const XT *x, Py_ssize_t B, Py_ssize_t P, Py_ssize_t k, KT *keys,       \
                        uint8_t *sel, int32_t *cols, XT *vals) {                               \
        const UKT mask = ((UKT)1 << (NBITS - 1)) - 1;                                          \
        const Py_ssize_t Pp = PAD64(P);                                                        \
        int64_t bad_rows = 0; /* rows holding NaN or inf: their largest key is >= EXPMASK */   \
        KT prev[TOPK_ROWS] = {0}; /* the thresholds of the group before: first probes */       \
        for (int r = 0; r < TOPK_ROWS; r++)                                                    \
            for (Py_ssize_t c = P; c < Pp; c++) keys[r * Pp + c] = 0;                          \
        for (Py_ssize_t b0 = 0; b0 < B; b0 += TOPK_ROWS) {                                     \
            UKT lo[TOPK_ROWS], hi[TOPK_ROWS];                                                  \
            Py_ssize_t clo[TOPK_ROWS], chi[TOPK_ROWS];                                         \
            KT tx[TOPK_ROWS];                                                                  \
            int exact[TOPK_ROWS], live[TOPK_ROWS];                                             \
            for (int r = 0; r < TOPK_ROWS; r++) {                                              \
                lo[r] = hi[r] = 0, clo[r] = P, chi[r] = 0, tx[r] = 0;                          \
                exact[r] = k == P, live[r] = 0;                                                \
                if (b0 + r >= B) continue;                                                     \
                const UKT *ru = (const UKT *)(x + (b0 + r) * P);                               \
                KT *kr = keys + r * Pp;                                                        \
                KT top = 0;                                                                    \
                for (Py_ssize_t c = 0; c < P; c++) {                                           \
                    KT key = (KT)(ru[c] & mask);                                               \
                    kr[c] = key;                                                               \
                    top = key > top ? key : top;                                               \
                }                                                                              \
                bad_rows += top >= (KT)EXPMASK;                                                \
                hi[r] = (UKT)top + 1;                                                          \
                live[r] = !exact[r] && hi[r] > 1;                                              \
            }                                                                                  \
            for (int probe = 0;; probe++) {                                                    \
                int any = 0;                                                                   \
                for (int r = 0; r < TOPK_ROWS; r++) {                                          \
                    if (!live[r]) continue;                                                    \
                    SEARCH_STEP(COUNTK, keys + r * Pp, KT, UKT, r);                            \
                    live[r] = !exact[r] && hi[r] - lo[r] > 1;                                  \
                    any |= live[r];                                                            \
                }                                                                              \
                if (!any) break;                                                               \
            }                                                                                  \
            for (int r = 0; r < TOPK_ROWS && b0 + r < B; r++) {                                \
                const XT *rx = x + (b0 + r) * P;                                               \
                const KT *kr = keys + r * Pp;                                                  \
                const KT T = exact[r] ? tx[r] : (KT)lo[r];                                     \
                prev[r] = T;                                                                   \
                int32_t *oc = cols + (b0 + r) * k;                                             \
                XT *ov = vals + (b0 + r) * k;                                                  \
                if (exact[r]) { /* exactly k keys >= T (or k == P, T = 0): in order */         \
                    GATHER(kr, rx, P, T, sel, oc, ov);                                         \
                } else { /* ties at T: all keys > T, then keys == T in column order */         \
                    Py_ssize_t gt = 0, m = 0;                                                  \
                    for (Py_ssize_t c = 0; c < P; c++) gt += kr[c] > T;                        \
                    Py_ssize_t need = k - gt;                                                  \
                    for (Py_ssize_t c = 0; c < P && m < k; c++) {                              \
                        int take = kr[c] > T || (kr[c] == T && need > 0);                      \
                        if (kr[c] == T && need > 0) need--;                                    \
                        if (take) {                                                            \
                            oc[m] = (int32_t)c;                                                \
                            ov[m] = rx[c];                                                     \
                            m++;                                                               \
                        }                                                                      \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        return bad_rows;                                                                       \
    }

DEFINE_TOPK(K(topk_f32), float, int32_t, uint32_t, 32, 0x7F800000, K(count_ge_i32),
            K(gather_ge_f32))
DEFINE_TOPK(K(topk_f64), double, int64_t, uint64_t, 64, 0x7FF0000000000000LL, K(count_ge_i64),
            K(gather_ge_f64))
#undef TOPK_ROWS
#undef SEARCH_STEP
#define DEFINE_SCATTER(NAME, VT)                                                                \
    static void NAME(const int32_t *cols, const VT *vals, Py_ssize_t B, Py_ssize_t P,          \
                     Py_ssize_t k, VT *y) {                                                    \
        for (Py_ssize_t b = 0; b < B; b++) {                                                   \
            VT *yr = y + b * P;                                                                \
            memset(yr, 0, (size_t)P * sizeof(VT));                                             \
            for (Py_ssize_t m = 0; m < k; m++) yr[cols[b * k + m]] = vals[b * k + m];          \
        }                                                                                      \
    }

DEFINE_SCATTER(K(scatter_f32), float)
DEFINE_SCATTER(K(scatter_f64), double)

/* The scalar quantizer's words h_e, e = e0 .. e0 + n - 1 (the stream from its start). */
static void K(dither_words_run)(uint64_t seed, Py_ssize_t e0, Py_ssize_t n, uint32_t *out) {
    stream_t st;
    K(stream_init)(&st, seed);
    uint32_t skip[BLOCK];
    for (Py_ssize_t s = 0; s < e0; s += BLOCK)
        K(stream_halves)(&st, skip, e0 - s < BLOCK ? e0 - s : BLOCK);
    for (Py_ssize_t s = 0; s < n; s += BLOCK)
        K(stream_halves)(&st, out + s, n - s < BLOCK ? n - s : BLOCK);
}

/* The hexagonal quantizer's dither of pairs g0 .. g0 + n - 1 (the stream from its start). */
static void K(hex_dither_run)(uint64_t seed, Py_ssize_t g0, Py_ssize_t n, double a, double *ux,
                              double *uy) {
    stream_t st;
    K(stream_init)(&st, seed);
    uint64_t skip[HB];
    for (Py_ssize_t s0 = 0; s0 < g0; s0 += HB)
        K(stream_words)(&st, skip, g0 - s0 < HB ? g0 - s0 : HB);
    for (Py_ssize_t s0 = 0; s0 < n; s0 += HB)
        K(hex_dither_block)(&st, n - s0 < HB ? n - s0 : HB, a, ux + s0, uy + s0);
}

static void K(a2_nearest_run)(const double *X, const double *Y, Py_ssize_t n, double *I,
                              double *J) {
    for (Py_ssize_t q = 0; q < n; q++) K(a2_nearest_scaled)(X[q], Y[q], &I[q], &J[q]);
}

/* Fixed-order row sums (the definition is above py_row_sums). RS_LANES accumulators: two
   AVX-512, four AVX2 or eight SSE2 vectors of independent chains, so the loop runs at memory
   speed on every path without reassociating anything. */
#define RS_LANES 16
#define DEFINE_ROW_SUMS(NAME, T)                                                                \
    static void NAME(const T *x, Py_ssize_t n, Py_ssize_t d, double *out) {                    \
        for (Py_ssize_t i = 0; i < n; i++) {                                                   \
            const T *r = x + i * d;                                                            \
            double a[RS_LANES];                                                                \
            for (int l = 0; l < RS_LANES; l++) a[l] = 0.0;                                     \
            Py_ssize_t j = 0;                                                                  \
            for (; j + RS_LANES <= d; j += RS_LANES)                                           \
                for (int l = 0; l < RS_LANES; l++) a[l] = a[l] + (double)r[j + l];             \
            for (int l = 0; j + l < d; l++) a[l] = a[l] + (double)r[j + l];                    \
            for (int h = RS_LANES / 2; h >= 1; h /= 2)                                         \
                for (int l = 0; l < h; l++) a[l] = a[l] + a[l + h];                            \
            out[i] = a[0];                                                                     \
        }                                                                                      \
    }

DEFINE_ROW_SUMS(K(row_sums_f32), float)
DEFINE_ROW_SUMS(K(row_sums_f64), double)
#undef RS_LANES
#undef DEFINE_ROW_SUMS

static const kernels_t K(table) = {
    .row_ranges_f32 = K(row_ranges_f32), .row_ranges_f64 = K(row_ranges_f64),
    .sq_f32_u8_f32 = K(sq_f32_u8_f32), .sq_f32_u8_f64 = K(sq_f32_u8_f64),
    .sq_f32_u16_f32 = K(sq_f32_u16_f32), .sq_f32_u16_f64 = K(sq_f32_u16_f64),
    .sq_f64_u8_f32 = K(sq_f64_u8_f32), .sq_f64_u8_f64 = K(sq_f64_u8_f64),
    .sq_f64_u16_f32 = K(sq_f64_u16_f32), .sq_f64_u16_f64 = K(sq_f64_u16_f64),
    .sdq_u8_f32 = K(sdq_u8_f32), .sdq_u8_f64 = K(sdq_u8_f64),
    .sdq_u16_f32 = K(sdq_u16_f32), .sdq_u16_f64 = K(sdq_u16_f64),
    .hex_run = K(hex_run), .topk_f32 = K(topk_f32), .topk_f64 = K(topk_f64),
    .scatter_f32 = K(scatter_f32), .scatter_f64 = K(scatter_f64),
    .dither_words = K(dither_words_run), .hex_dither = K(hex_dither_run),
    .a2_nearest = K(a2_nearest_run),
    .row_sums_f32 = K(row_sums_f32), .row_sums_f64 = K(row_sums_f64),
};

#endif /* CVFL_BODY */

/*
 * Native kernels of the exact ranking metrics (see _ranking.py and _roc_auc.py): the check
 * of a batch and its keys written straight into the state (or, for other scores, its copy
 * into the chunk being filled), the split of keys into ranges that
 * threads sort apart, a radix sort of order keys, and one pass over sorted labeled keys
 * for each metric.
 *
 * Why native: NumPy 1.x sorts integers with a vectorized quicksort only on CPUs whose
 * AVX-512 compress-store is fast; elsewhere (AVX2-only CPUs, AMD Zen 4) np.sort of 1e7
 * int32 keys takes about 0.5 s, six times this radix sort, which takes the same time on
 * every CPU. Each metric, in NumPy, is a handful of passes over the examples with a
 * temporary array each; here it is one pass with none. And a batch's checks in NumPy are
 * a dozen calls, each costing more than the work on 1024 examples.
 *
 * Keys are int32 or int64 NumPy arrays (C-contiguous). "Labeled keys" hold
 * order_key << 1 | label, so one score's examples are one run of keys differing in bit 0,
 * negatives first. Every function releases the GIL while it works, so Python threads
 * run them in parallel on separate ranges.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * The GIL is released only around work on at least this many keys: releasing it costs
 * little, but taking it back may wait for another thread to give it up (up to Python's
 * switch interval, 5 ms), which would cost a batch of 1024 examples far more than its
 * microsecond of work.
 */
#define GIL_FREE_MIN ((Py_ssize_t)1 << 16)
#define RELEASE_GIL_IF_LONG(size) PyThreadState *gil_state = (size) >= GIL_FREE_MIN ? PyEval_SaveThread() : NULL
#define RESTORE_GIL()                         \
    if (gil_state != NULL) {                  \
        PyEval_RestoreThread(gil_state);      \
    }

/* Reads a C-contiguous buffer of int32 or int64 keys; returns 0 and sets an error if not one. */
static int get_keys(PyObject *object, Py_buffer *view, int writable) {
    int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object, view, flags) != 0) {
        return 0;
    }
    const char *format = view->format ? view->format : "B";
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') {
        format++;
    }
    int is_signed = format[1] == '\0' && strchr("ilq", format[0]) != NULL;
    if (view->ndim != 1 || !is_signed || (view->itemsize != 4 && view->itemsize != 8)) {
        PyErr_Format(PyExc_TypeError, "expected a 1-D array of int32 or int64 keys, got format '%s' and %d dimension(s)",
                     view->format ? view->format : "B", view->ndim);
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/*
 * Least significant digit radix sort, one byte per pass. One read pass counts every
 * digit at once; a pass whose digit is the same for all keys is skipped (the high bytes
 * of probabilities, the low bytes of coarse scores). Keys are compared as signed: the
 * sign bit is flipped when the top digit is taken.
 */
#define DEFINE_RADIX_SORT(NAME, SIGNED, UNSIGNED)                                                  \
    static void NAME(SIGNED *keys, Py_ssize_t size, SIGNED *scratch) {                             \
        enum { DIGITS = sizeof(SIGNED) };                                                          \
        const UNSIGNED sign = (UNSIGNED)1 << (8 * sizeof(SIGNED) - 1);                             \
        Py_ssize_t counts[DIGITS][256];                                                            \
        memset(counts, 0, sizeof counts);                                                          \
        for (Py_ssize_t i = 0; i < size; i++) {                                                    \
            UNSIGNED key = (UNSIGNED)keys[i] ^ sign;                                               \
            for (int digit = 0; digit < DIGITS; digit++) {                                         \
                counts[digit][(key >> (8 * digit)) & 255]++;                                       \
            }                                                                                      \
        }                                                                                          \
        SIGNED *source = keys, *target = scratch;                                                  \
        for (int digit = 0; digit < DIGITS; digit++) {                                             \
            Py_ssize_t *count = counts[digit], offset = 0;                                         \
            int constant = 0;                                                                      \
            for (int value = 0; value < 256; value++) {                                            \
                constant |= count[value] == size;                                                  \
            }                                                                                      \
            if (constant) {                                                                        \
                continue;                                                                          \
            }                                                                                      \
            for (int value = 0; value < 256; value++) { /* counts become first positions */        \
                Py_ssize_t here = count[value];                                                    \
                count[value] = offset;                                                             \
                offset += here;                                                                    \
            }                                                                                      \
            const int shift = 8 * digit;                                                           \
            for (Py_ssize_t i = 0; i < size; i++) {                                                \
                UNSIGNED key = (UNSIGNED)source[i] ^ sign;                                         \
                target[count[(key >> shift) & 255]++] = source[i];                                 \
            }                                                                                      \
            SIGNED *swap = source;                                                                 \
            source = target;                                                                       \
            target = swap;                                                                         \
        }                                                                                          \
        if (source != keys) {                                                                      \
            memcpy(keys, source, (size_t)size * sizeof(SIGNED));                                   \
        }                                                                                          \
    }

DEFINE_RADIX_SORT(radix_sort_32, int32_t, uint32_t)
DEFINE_RADIX_SORT(radix_sort_64, int64_t, uint64_t)

PyDoc_STRVAR(sort_doc,
             "sort(keys, scratch=None)\n--\n\n"
             "Sorts a 1-D int32 or int64 array in place, in increasing order (a radix sort).\n"
             "scratch: an array of the same type and size to work in; one is allocated if None.");

static PyObject *sort(PyObject *module, PyObject *args) {
    PyObject *keys_object, *scratch_object = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:sort", &keys_object, &scratch_object)) {
        return NULL;
    }
    Py_buffer view, scratch_view;
    if (!get_keys(keys_object, &view, 1)) {
        return NULL;
    }
    Py_ssize_t size = view.len / view.itemsize;
    void *scratch = NULL;
    int own_scratch = scratch_object == Py_None;
    if (!own_scratch) {
        if (!get_keys(scratch_object, &scratch_view, 1)) {
            PyBuffer_Release(&view);
            return NULL;
        }
        if (scratch_view.len != view.len || scratch_view.itemsize != view.itemsize) {
            PyBuffer_Release(&scratch_view);
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "sort: scratch must be of the keys' type and size");
            return NULL;
        }
        scratch = scratch_view.buf;
    } else if (size > 1) {
        scratch = malloc((size_t)view.len);
        if (scratch == NULL) {
            PyBuffer_Release(&view);
            return PyErr_NoMemory();
        }
    }
    if (size > 1) {
        RELEASE_GIL_IF_LONG(size);
        if (view.itemsize == 4) {
            radix_sort_32(view.buf, size, scratch);
        } else {
            radix_sort_64(view.buf, size, scratch);
        }
        RESTORE_GIL();
    }
    if (own_scratch) {
        free(scratch);
    } else {
        PyBuffer_Release(&scratch_view);
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/*
 * Splitting keys into parts at increasing bounds, so that each part can be sorted on a
 * thread of its own: key k goes to part j, the number of bounds <= k. count_parts adds each
 * part's keys to counts; split_parts copies each key to offsets[j] of its part and advances
 * that offset, keeping the keys' order within a part.
 */
static inline Py_ssize_t part_of(int64_t key, const int64_t *bounds, Py_ssize_t parts) {
    Py_ssize_t part = 0;
    for (Py_ssize_t bound = 0; bound < parts - 1; bound++) {
        part += key >= bounds[bound];
    }
    return part;
}

#define DEFINE_SPLIT(COUNT, SPLIT, SIGNED)                                                                    \
    static void COUNT(const SIGNED *keys, Py_ssize_t size, const int64_t *bounds, Py_ssize_t parts,          \
                      int64_t *counts) {                                                                      \
        for (Py_ssize_t i = 0; i < size; i++) {                                                               \
            counts[part_of(keys[i], bounds, parts)]++;                                                        \
        }                                                                                                     \
    }                                                                                                         \
    /* Returns 0 once a part would pass its end (nothing is written there), else 1. */                       \
    static int SPLIT(const SIGNED *keys, Py_ssize_t size, const int64_t *bounds, Py_ssize_t parts,           \
                     SIGNED *out, int64_t *offsets, const int64_t *ends) {                                    \
        for (Py_ssize_t i = 0; i < size; i++) {                                                               \
            Py_ssize_t part = part_of(keys[i], bounds, parts);                                                \
            if (offsets[part] >= ends[part]) {                                                                \
                return 0;                                                                                     \
            }                                                                                                 \
            out[offsets[part]++] = keys[i];                                                                   \
        }                                                                                                     \
        return 1;                                                                                             \
    }

DEFINE_SPLIT(count_parts_32, split_parts_32, int32_t)
DEFINE_SPLIT(count_parts_64, split_parts_64, int64_t)

/* An int64 array (writable if asked) of `parts` entries, or of any length if `parts` < 0; or 0 with an error set. */
static int get_int64s(PyObject *object, Py_buffer *view, Py_ssize_t parts, int writable, const char *name) {
    if (!get_keys(object, view, writable)) {
        return 0;
    }
    if (view->itemsize != 8 || (parts >= 0 && view->len / 8 != parts)) {
        if (parts >= 0) {
            PyErr_Format(PyExc_ValueError, "%s must be an int64 array of %zd entries", name, parts);
        } else {
            PyErr_Format(PyExc_ValueError, "%s must be an int64 array", name);
        }
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(count_parts_doc,
             "count_parts(keys, bounds, counts)\n--\n\n"
             "Adds to counts[j] the keys of part j: those with j bounds at or below them.\n"
             "bounds: increasing int64; counts: int64, one more entry than bounds.");

static PyObject *count_parts(PyObject *module, PyObject *args) {
    PyObject *objects[3];
    if (!PyArg_ParseTuple(args, "OOO:count_parts", &objects[0], &objects[1], &objects[2])) {
        return NULL;
    }
    Py_buffer keys, bounds, counts;
    if (!get_keys(objects[0], &keys, 0)) {
        return NULL;
    }
    if (!get_int64s(objects[1], &bounds, -1, 0, "bounds")) {
        PyBuffer_Release(&keys);
        return NULL;
    }
    Py_ssize_t parts = bounds.len / 8 + 1, size = keys.len / keys.itemsize;
    if (!get_int64s(objects[2], &counts, parts, 1, "counts")) {
        PyBuffer_Release(&bounds);
        PyBuffer_Release(&keys);
        return NULL;
    }
    RELEASE_GIL_IF_LONG(size);
    if (keys.itemsize == 4) {
        count_parts_32(keys.buf, size, bounds.buf, parts, counts.buf);
    } else {
        count_parts_64(keys.buf, size, bounds.buf, parts, counts.buf);
    }
    RESTORE_GIL();
    PyBuffer_Release(&counts);
    PyBuffer_Release(&bounds);
    PyBuffer_Release(&keys);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(split_parts_doc,
             "split_parts(keys, bounds, out, offsets, ends)\n--\n\n"
             "Copies each key of part j (see count_parts) to out[offsets[j]] and advances offsets[j].\n"
             "ends[j]: where part j's room in out ends; a part with no room left raises ValueError.\n"
             "out: of the keys' type; offsets, ends: int64, one entry per part.");

static PyObject *split_parts(PyObject *module, PyObject *args) {
    PyObject *objects[5];
    if (!PyArg_ParseTuple(args, "OOOOO:split_parts", &objects[0], &objects[1], &objects[2], &objects[3],
                          &objects[4])) {
        return NULL;
    }
    Py_buffer keys, bounds, out, offsets, ends;
    int acquired = get_keys(objects[0], &keys, 0);
    acquired += acquired == 1 && get_int64s(objects[1], &bounds, -1, 0, "bounds");
    Py_ssize_t parts = acquired == 2 ? bounds.len / 8 + 1 : 0;
    acquired += acquired == 2 && get_keys(objects[2], &out, 1);
    acquired += acquired == 3 && get_int64s(objects[3], &offsets, parts, 1, "offsets");
    acquired += acquired == 4 && get_int64s(objects[4], &ends, parts, 0, "ends");
    int done = 0;
    if (acquired == 5) {
        /* Every part's room must lie in out, so that no write can pass out's end. */
        Py_ssize_t out_size = out.len / out.itemsize;
        int fits = out.itemsize == keys.itemsize;
        for (Py_ssize_t j = 0; j < parts; j++) {
            fits &= ((int64_t *)offsets.buf)[j] >= 0 && ((int64_t *)ends.buf)[j] <= out_size;
        }
        if (fits) {
            Py_ssize_t size = keys.len / keys.itemsize;
            RELEASE_GIL_IF_LONG(size);
            if (keys.itemsize == 4) {
                done = split_parts_32(keys.buf, size, bounds.buf, parts, out.buf, offsets.buf, ends.buf);
            } else {
                done = split_parts_64(keys.buf, size, bounds.buf, parts, out.buf, offsets.buf, ends.buf);
            }
            RESTORE_GIL();
        }
        if (!done) {
            PyErr_SetString(PyExc_ValueError,
                            "split_parts: out is of another type than the keys, or a part has no room left");
        }
    }
    Py_buffer *views[5] = {&keys, &bounds, &out, &offsets, &ends};
    for (int i = 0; i < acquired; i++) {
        PyBuffer_Release(views[i]);
    }
    if (!done) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/*
 * AUC credit of sorted labeled keys: each positive beats the negatives below it, and ties
 * with the negatives of its own score for one half. Returned doubled, so it is an
 * integer. Negatives come first among equal scores, so at a positive every negative of
 * its score is already counted: its doubled credit is the negatives below it plus those
 * below its score. Branch-free: groups of equal scores are tracked by conditional moves.
 * Exact while 2 * positives * negatives < 2**63, so for fewer than 2**31 examples.
 */
#define DEFINE_AUC_CREDIT(NAME, SIGNED)                                                              \
    static void NAME(const SIGNED *keys, Py_ssize_t size, long long *positives, long long *credit) { \
        long long negatives_below = 0, negatives_below_score = 0, twice = 0;                        \
        SIGNED previous = size ? (keys[0] >> 1) : 0;                                                \
        for (Py_ssize_t i = 0; i < size; i++) {                                                     \
            const SIGNED score = keys[i] >> 1;                                                      \
            const long long positive = keys[i] & 1;                                                 \
            negatives_below_score = score != previous ? negatives_below : negatives_below_score;    \
            previous = score;                                                                       \
            twice += positive * (negatives_below + negatives_below_score);                          \
            negatives_below += 1 - positive;                                                        \
        }                                                                                           \
        *positives = (long long)size - negatives_below;                                             \
        *credit = twice;                                                                            \
    }

DEFINE_AUC_CREDIT(auc_credit_32, int32_t)
DEFINE_AUC_CREDIT(auc_credit_64, int64_t)

PyDoc_STRVAR(auc_credit_doc,
             "auc_credit(keys)\n--\n\n"
             "(positives, twice the AUC credit) of sorted labeled keys (fewer than 2**31).");

static PyObject *auc_credit(PyObject *module, PyObject *keys_object) {
    Py_buffer view;
    if (!get_keys(keys_object, &view, 0)) {
        return NULL;
    }
    Py_ssize_t size = view.len / view.itemsize;
    if (size >= ((Py_ssize_t)1 << 31)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_OverflowError, "auc_credit: more than 2**31 - 1 keys");
        return NULL;
    }
    long long positives = 0, credit = 0;
    RELEASE_GIL_IF_LONG(size);
    if (view.itemsize == 4) {
        auc_credit_32(view.buf, size, &positives, &credit);
    } else {
        auc_credit_64(view.buf, size, &positives, &credit);
    }
    RESTORE_GIL();
    PyBuffer_Release(&view);
    return Py_BuildValue("LL", positives, credit);
}

/*
 * Sum over the positives of sorted labeled keys of the precision at their score: the
 * positives at or above the score over the examples at or above it. top_positives and
 * top_examples count the examples at or above the lowest key (this range's and those
 * above it). In blocks: a branch-free pass lists each positive's numerator and
 * denominator (groups of equal scores tracked by conditional moves), then the block's
 * quotients are summed, the divisions independent of each other. The block sums are added
 * with Neumaier's compensation, so 1e7 terms keep the error of a few.
 */
enum { PRECISION_BLOCK = 512 };

#define DEFINE_PRECISION_SUM(NAME, SIGNED)                                                              \
    static double NAME(const SIGNED *keys, Py_ssize_t size, long long top_positives,                   \
                       long long top_examples) {                                                       \
        double sum = 0.0, compensation = 0.0;                                                          \
        long long numerators[PRECISION_BLOCK], denominators[PRECISION_BLOCK];                          \
        long long positives_below = 0, positives_below_score = 0, score_start = 0;                     \
        SIGNED previous = size ? (keys[0] >> 1) : 0;                                                   \
        for (Py_ssize_t block = 0; block < size; block += PRECISION_BLOCK) {                           \
            const Py_ssize_t stop = size - block < PRECISION_BLOCK ? size : block + PRECISION_BLOCK;   \
            Py_ssize_t listed = 0;                                                                     \
            for (Py_ssize_t i = block; i < stop; i++) {                                                \
                const SIGNED score = keys[i] >> 1;                                                     \
                const int new_score = score != previous;                                               \
                previous = score;                                                                      \
                score_start = new_score ? i : score_start;                                             \
                positives_below_score = new_score ? positives_below : positives_below_score;           \
                numerators[listed] = top_positives - positives_below_score;                            \
                denominators[listed] = top_examples - score_start;                                     \
                const int positive = keys[i] & 1;                                                      \
                listed += positive;                                                                    \
                positives_below += positive;                                                           \
            }                                                                                          \
            double partial[4] = {0.0, 0.0, 0.0, 0.0};                                                  \
            for (Py_ssize_t j = 0; j < listed; j++) {                                                  \
                partial[j & 3] += (double)numerators[j] / (double)denominators[j];                     \
            }                                                                                          \
            double term = (partial[0] + partial[1]) + (partial[2] + partial[3]);                       \
            double total = sum + term;                                                                 \
            compensation += fabs(sum) >= fabs(term) ? (sum - total) + term : (term - total) + sum;     \
            sum = total;                                                                               \
        }                                                                                              \
        return sum + compensation;                                                                     \
    }

DEFINE_PRECISION_SUM(precision_sum_32, int32_t)
DEFINE_PRECISION_SUM(precision_sum_64, int64_t)

PyDoc_STRVAR(precision_sum_doc,
             "precision_sum(keys, top_positives, top_examples)\n--\n\n"
             "Sum over the positives of sorted labeled keys of the precision at their score.");

static PyObject *precision_sum(PyObject *module, PyObject *args) {
    PyObject *keys_object;
    long long top_positives, top_examples;
    if (!PyArg_ParseTuple(args, "OLL:precision_sum", &keys_object, &top_positives, &top_examples)) {
        return NULL;
    }
    Py_buffer view;
    if (!get_keys(keys_object, &view, 0)) {
        return NULL;
    }
    Py_ssize_t size = view.len / view.itemsize;
    double sum;
    RELEASE_GIL_IF_LONG(size);
    if (view.itemsize == 4) {
        sum = precision_sum_32(view.buf, size, top_positives, top_examples);
    } else {
        sum = precision_sum_64(view.buf, size, top_positives, top_examples);
    }
    RESTORE_GIL();
    PyBuffer_Release(&view);
    return PyFloat_FromDouble(sum);
}

PyDoc_STRVAR(count_positives_doc,
             "count_positives(keys)\n--\n\n"
             "How many labeled keys have label 1 (bit 0 set).");

static PyObject *count_positives(PyObject *module, PyObject *keys_object) {
    Py_buffer view;
    if (!get_keys(keys_object, &view, 0)) {
        return NULL;
    }
    Py_ssize_t size = view.len / view.itemsize;
    long long positives = 0;
    RELEASE_GIL_IF_LONG(size);
    if (view.itemsize == 4) {
        for (Py_ssize_t i = 0; i < size; i++) {
            positives += ((const int32_t *)view.buf)[i] & 1;
        }
    } else {
        for (Py_ssize_t i = 0; i < size; i++) {
            positives += ((const int64_t *)view.buf)[i] & 1;
        }
    }
    RESTORE_GIL();
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(positives);
}

/*
 * One batch copied into the chunk being filled, checked on the way: labels must be 0 or 1
 * (any integer, bool or float type), scores must not be NaN (infinities rank fine).
 */
enum { APPENDED = 0, NOT_BINARY = 1, NAN_SCORE = 2, UNUSUAL = 3, NO_ROOM = 4 };

/* Integer labels: x >> 1, unsigned, is nonzero for any x but 0 and 1 (negatives included). */
#define DEFINE_COPY_LABELS(NAME, TYPE)                                                                    \
    static int NAME(const TYPE *restrict labels, Py_ssize_t size, unsigned char *restrict is_positive) { \
        TYPE high_bits = 0;                                                                               \
        for (Py_ssize_t i = 0; i < size; i++) {                                                           \
            high_bits |= labels[i] >> 1;                                                                  \
            is_positive[i] = (unsigned char)labels[i];                                                    \
        }                                                                                                 \
        return high_bits != 0;                                                                            \
    }

DEFINE_COPY_LABELS(copy_labels_8, uint8_t)
DEFINE_COPY_LABELS(copy_labels_16, uint16_t)
DEFINE_COPY_LABELS(copy_labels_32, uint32_t)
DEFINE_COPY_LABELS(copy_labels_64, uint64_t)

#define DEFINE_COPY_FLOAT_LABELS(NAME, TYPE)                                                              \
    static int NAME(const TYPE *restrict labels, Py_ssize_t size, unsigned char *restrict is_positive) { \
        int invalid = 0;                                                                                  \
        for (Py_ssize_t i = 0; i < size; i++) {                                                           \
            invalid |= (labels[i] != 0) & (labels[i] != 1);                                               \
            is_positive[i] = labels[i] == 1;                                                              \
        }                                                                                                 \
        return invalid;                                                                                   \
    }

DEFINE_COPY_FLOAT_LABELS(copy_labels_float, float)
DEFINE_COPY_FLOAT_LABELS(copy_labels_double, double)

/* Copies labels of the struct-module type `code` and `itemsize`; UNUSUAL for another type. */
static int copy_labels(const void *labels, char code, Py_ssize_t itemsize, Py_ssize_t size, unsigned char *is_positive) {
    if (code == 'f' || code == 'd') {
        return itemsize == 4 ? copy_labels_float(labels, size, is_positive)
                             : copy_labels_double(labels, size, is_positive);
    }
    /* Integers of either sign, read unsigned: a negative label has high bits set. */
    switch (itemsize) {
        case 1:
            return copy_labels_8(labels, size, is_positive);
        case 2:
            return copy_labels_16(labels, size, is_positive);
        case 4:
            return copy_labels_32(labels, size, is_positive);
        case 8:
            return copy_labels_64(labels, size, is_positive);
        default:
            return UNUSUAL;
    }
}

/* NaN is checked on the bits (a magnitude above infinity's), which compilers vectorize, unlike x != x. */
#define DEFINE_COPY_SCORES(NAME, BITS, MAGNITUDE, INFINITY_BITS)                                   \
    static int NAME(const void *scores, Py_ssize_t size, void *target) {                          \
        const BITS *restrict from = scores;                                                        \
        BITS *restrict to = target;                                                                \
        BITS nan = 0;                                                                              \
        for (Py_ssize_t i = 0; i < size; i++) {                                                    \
            nan |= (BITS)((from[i] & (MAGNITUDE)) > (INFINITY_BITS));                              \
            to[i] = from[i];                                                                       \
        }                                                                                          \
        return nan != 0;                                                                           \
    }

DEFINE_COPY_SCORES(copy_scores_float, uint32_t, 0x7fffffffu, 0x7f800000u)
DEFINE_COPY_SCORES(copy_scores_double, uint64_t, 0x7fffffffffffffffull, 0x7ff0000000000000ull)

/* The struct-module type code of a buffer's items: its format less a byte-order prefix. */
static char type_code(const Py_buffer *view) {
    const char *format = view->format ? view->format : "B";
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') {
        format++;
    }
    return format[0] != '\0' && format[1] == '\0' ? format[0] : '\0';
}

static int append_views(Py_buffer *labels, Py_buffer *scores, Py_buffer *chunk_scores, Py_buffer *chunk_labels,
                        Py_ssize_t offset) {
    char score_code = type_code(scores), label_code = type_code(labels);
    Py_ssize_t size = scores->len / scores->itemsize;
    int scores_usual = (score_code == 'f' && scores->itemsize == 4) || (score_code == 'd' && scores->itemsize == 8);
    int labels_usual = label_code != '\0' && strchr("?bBhHiIlLqQfd", label_code) != NULL;
    int chunk_usual = type_code(chunk_scores) == score_code && chunk_scores->itemsize == scores->itemsize &&
                      type_code(chunk_labels) == '?' && chunk_labels->itemsize == 1;
    if (!scores_usual || !labels_usual || !chunk_usual || labels->len / labels->itemsize != size || offset < 0) {
        return UNUSUAL;
    }
    if (offset + size > chunk_scores->len / chunk_scores->itemsize || offset + size > chunk_labels->len) {
        return NO_ROOM;
    }
    int status;
    RELEASE_GIL_IF_LONG(size);
    unsigned char *is_positive = (unsigned char *)chunk_labels->buf + offset;
    status = copy_labels(labels->buf, label_code, labels->itemsize, size, is_positive);
    if (status == APPENDED) {
        int nan = score_code == 'f'
                      ? copy_scores_float(scores->buf, size, (uint32_t *)chunk_scores->buf + offset)
                      : copy_scores_double(scores->buf, size, (uint64_t *)chunk_scores->buf + offset);
        status = nan ? NAN_SCORE : APPENDED;
    }
    RESTORE_GIL();
    return status;
}

/*
 * The shared start of the METH_FASTCALL functions below: exactly `expected` arguments, the last
 * one the offset. Returns 0, with the exception set, when they are not.
 */
static int offset_argument(const char *name, PyObject *const *objects, Py_ssize_t num_args, Py_ssize_t expected,
                           Py_ssize_t *offset) {
    if (num_args != expected) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", name, expected, num_args);
        return 0;
    }
    *offset = PyLong_AsSsize_t(objects[expected - 1]);
    return !(*offset == -1 && PyErr_Occurred());
}

PyDoc_STRVAR(append_batch_doc,
             "append_batch(labels, scores, chunk_scores, chunk_labels, offset)\n--\n\n"
             "Copies a batch into a chunk from `offset` on, checking it; returns 0 when copied, 1 when a\n"
             "label is not 0 or 1, 2 when a score is NaN, 3 when an array is of another type or size, 4\n"
             "when the chunk has no room left for the batch (nothing is copied but in case 0).\n"
             "Labels: any C-contiguous integer, bool or float array; scores: float32 or float64, of the\n"
             "chunk's scores' type, the same number of elements; chunk_labels: bool.");

/* METH_FASTCALL: it runs for every batch, and parsing a tuple of arguments costs about what copying 1024 labels does. */
static PyObject *append_batch(PyObject *module, PyObject *const *objects, Py_ssize_t num_args) {
    Py_ssize_t offset;
    if (!offset_argument("append_batch", objects, num_args, 5, &offset)) {
        return NULL;
    }
    Py_buffer views[4];
    int flags[4] = {PyBUF_FORMAT | PyBUF_C_CONTIGUOUS, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS,
                    PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE,
                    PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE};
    int acquired = 0;
    for (; acquired < 4; acquired++) {
        if (PyObject_GetBuffer(objects[acquired], &views[acquired], flags[acquired]) != 0) {
            break;
        }
    }
    long status = UNUSUAL;
    if (acquired == 4) {
        status = append_views(&views[0], &views[1], &views[2], &views[3], offset);
    } else {
        PyErr_Clear(); /* not a contiguous buffer: the caller's general path handles it */
    }
    for (int i = 0; i < acquired; i++) {
        PyBuffer_Release(&views[i]);
    }
    return PyLong_FromLong(status);
}

PyDoc_STRVAR(label_keys_doc,
             "label_keys(scores, is_positive, keys)\n--\n\n"
             "Writes the labeled keys of float32 scores (see _ranking.labeled) into int32 keys, in one pass;\n"
             "returns False, the keys unfinished, when a score's key leaves no bit free (outside (-2, 2)).\n"
             "scores: float32 without NaN; is_positive: bool; keys: int32; all 1-D of one length.");

/* The order key of a float32 score, as its bits (see _ranking.order_keys). */
static inline uint32_t float32_order_key(float score) {
    score += 0.0f; /* -0.0 becomes +0.0: equal scores, equal keys */
    uint32_t bits;
    memcpy(&bits, &score, sizeof bits);
    return bits ^ ((uint32_t)((int32_t)bits >> 31) & 0x7fffffffu); /* negative scores: order as integers */
}

/* Nonzero if an order key leaves no bit free for the label: outside [-2**30, 2**30). */
#define NO_BIT_FREE(key) (((key) + 0x40000000u) >> 31)

/* The labeled keys of float32 scores; nonzero if some key leaves no bit free.
 * Not inlined: inlined into its caller, GCC no longer vectorizes the loop (restrict is lost). */
__attribute__((noinline)) static uint32_t label_float32(const float *restrict scores, const unsigned char *restrict is_positive,
                              uint32_t *restrict keys, Py_ssize_t size) {
    uint32_t out_of_range = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        uint32_t key = float32_order_key(scores[i]);
        out_of_range |= NO_BIT_FREE(key);
        keys[i] = (key << 1) | (is_positive[i] & 1u);
    }
    return out_of_range;
}

static PyObject *label_keys(PyObject *module, PyObject *const *objects, Py_ssize_t num_args) {
    if (num_args != 3) {
        PyErr_Format(PyExc_TypeError, "label_keys takes 3 arguments (%zd given)", num_args);
        return NULL;
    }
    Py_buffer scores, labels, keys;
    int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS;
    if (PyObject_GetBuffer(objects[0], &scores, flags) != 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(objects[1], &labels, flags) != 0) {
        PyBuffer_Release(&scores);
        return NULL;
    }
    if (!get_keys(objects[2], &keys, 1)) {
        PyBuffer_Release(&labels);
        PyBuffer_Release(&scores);
        return NULL;
    }
    Py_ssize_t size = keys.len / keys.itemsize;
    PyObject *result = NULL;
    if (type_code(&scores) != 'f' || scores.itemsize != 4 || type_code(&labels) != '?' || labels.itemsize != 1 ||
        keys.itemsize != 4 || scores.len / 4 != size || labels.len != size) {
        PyErr_SetString(PyExc_ValueError,
                        "label_keys: scores must be float32, is_positive bool and keys int32, all of one length");
    } else {
        RELEASE_GIL_IF_LONG(size);
        uint32_t out_of_range = label_float32(scores.buf, labels.buf, keys.buf, size);
        RESTORE_GIL();
        result = PyBool_FromLong(!out_of_range);
    }
    PyBuffer_Release(&keys);
    PyBuffer_Release(&labels);
    PyBuffer_Release(&scores);
    return result;
}

/*
 * A batch of float32 scores keyed straight into a chunk of labeled keys: the labels checked,
 * the scores checked for NaN and keyed, in one pass and one call. The keys are the state
 * itself, so nothing is staged and no second pass keys a chunk. AVX2 doubles the pass's
 * speed where the CPU has it; the default clone runs on any x86-64 (and elsewhere the plain
 * function is built). target_clones needs the loader's ifunc, which glibc has.
 */
#if defined(__x86_64__) && defined(__GLIBC__) && \
    ((defined(__clang__) && __clang_major__ >= 14) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 6))
#define FAST_ON_EVERY_X86 __attribute__((target_clones("avx2", "default")))
#else
#define FAST_ON_EVERY_X86
#endif

/* Bit flags of what a keyed batch holds besides keys: folded over the batch, checked once at its end. */
enum { KEY_NOT_BINARY = 1, KEY_NAN = 2, KEY_NO_BIT_FREE = 4 };

/* Integer labels (bool among them), read unsigned: x >> 1 is nonzero for any x but 0 and 1. */
#define DEFINE_KEY_INTEGER_LABELS(NAME, TYPE)                                                              \
    FAST_ON_EVERY_X86 __attribute__((noinline)) static uint32_t NAME(                                      \
        const TYPE *restrict labels, const float *restrict scores, uint32_t *restrict keys, Py_ssize_t size) { \
        TYPE high_bits = 0;                                                                                \
        uint32_t nan = 0, out_of_range = 0;                                                                \
        for (Py_ssize_t i = 0; i < size; i++) {                                                            \
            uint32_t key = float32_order_key(scores[i]);                                                   \
            /* NaN keys: above +inf's (0x7f800000), or below -inf's flipped bits (0x807fffff). */           \
            nan |= (uint32_t)(((key ^ (uint32_t)((int32_t)key >> 31)) & 0x7fffffffu) > 0x7f800000u);        \
            out_of_range |= NO_BIT_FREE(key);                                                              \
            high_bits |= labels[i] >> 1;                                                                   \
            keys[i] = (key << 1) | (uint32_t)(labels[i] & 1u);                                             \
        }                                                                                                  \
        return (high_bits != 0 ? KEY_NOT_BINARY : 0) | (nan ? KEY_NAN : 0) | (out_of_range ? KEY_NO_BIT_FREE : 0); \
    }

#define DEFINE_KEY_FLOAT_LABELS(NAME, TYPE)                                                                \
    FAST_ON_EVERY_X86 __attribute__((noinline)) static uint32_t NAME(                                      \
        const TYPE *restrict labels, const float *restrict scores, uint32_t *restrict keys, Py_ssize_t size) { \
        uint32_t invalid = 0, nan = 0, out_of_range = 0;                                                   \
        for (Py_ssize_t i = 0; i < size; i++) {                                                            \
            uint32_t key = float32_order_key(scores[i]);                                                   \
            nan |= (uint32_t)(((key ^ (uint32_t)((int32_t)key >> 31)) & 0x7fffffffu) > 0x7f800000u);        \
            out_of_range |= NO_BIT_FREE(key);                                                              \
            invalid |= (uint32_t)((labels[i] != 0) & (labels[i] != 1));                                    \
            keys[i] = (key << 1) | (uint32_t)(labels[i] == 1);                                             \
        }                                                                                                  \
        return (invalid ? KEY_NOT_BINARY : 0) | (nan ? KEY_NAN : 0) | (out_of_range ? KEY_NO_BIT_FREE : 0); \
    }

DEFINE_KEY_INTEGER_LABELS(key_labels_8, uint8_t)
DEFINE_KEY_INTEGER_LABELS(key_labels_16, uint16_t)
DEFINE_KEY_INTEGER_LABELS(key_labels_32, uint32_t)
DEFINE_KEY_INTEGER_LABELS(key_labels_64, uint64_t)
DEFINE_KEY_FLOAT_LABELS(key_labels_float, float)
DEFINE_KEY_FLOAT_LABELS(key_labels_double, double)

/* What key_batch returns besides APPENDED, NOT_BINARY, NAN_SCORE, UNUSUAL and NO_ROOM. */
enum { NO_FREE_BIT = 5 };

static long key_views(Py_buffer *labels, Py_buffer *scores, Py_buffer *keys, Py_ssize_t offset) {
    char label_code = type_code(labels);
    Py_ssize_t size = scores->len / 4;
    int labels_usual = label_code != '\0' && strchr("?bBhHiIlLqQfd", label_code) != NULL &&
                       ((label_code != 'f' && label_code != 'd') || labels->itemsize == (label_code == 'f' ? 4 : 8));
    if (type_code(scores) != 'f' || scores->itemsize != 4 || !labels_usual || labels->len / labels->itemsize != size ||
        keys->itemsize != 4 || strchr("iIlL", type_code(keys)) == NULL || offset < 0) {
        return UNUSUAL;
    }
    if (offset + size > keys->len / 4) {
        return NO_ROOM;
    }
    uint32_t *target = (uint32_t *)keys->buf + offset;
    uint32_t found;
    RELEASE_GIL_IF_LONG(size);
    if (label_code == 'f' || label_code == 'd') {
        found = label_code == 'f' ? key_labels_float(labels->buf, scores->buf, target, size)
                                  : key_labels_double(labels->buf, scores->buf, target, size);
    } else {
        switch (labels->itemsize) {
            case 1:
                found = key_labels_8(labels->buf, scores->buf, target, size);
                break;
            case 2:
                found = key_labels_16(labels->buf, scores->buf, target, size);
                break;
            case 4:
                found = key_labels_32(labels->buf, scores->buf, target, size);
                break;
            case 8:
                found = key_labels_64(labels->buf, scores->buf, target, size);
                break;
            default:
                found = KEY_NOT_BINARY;
                label_code = '\0';
        }
    }
    RESTORE_GIL();
    if (label_code == '\0') {
        return UNUSUAL;
    }
    /* The checks in the order the thorough ones word them: labels, then NaN, then keys without a free bit. */
    return (found & KEY_NOT_BINARY) ? NOT_BINARY : (found & KEY_NAN) ? NAN_SCORE : (found & KEY_NO_BIT_FREE) ? NO_FREE_BIT : APPENDED;
}

PyDoc_STRVAR(key_batch_doc,
             "key_batch(labels, scores, keys, offset)\n--\n\n"
             "Writes the labeled keys of a batch (see _ranking.labeled) into int32 keys from `offset` on,\n"
             "checking it on the way; returns 0 when keyed, 1 when a label is not 0 or 1, 2 when a score\n"
             "is NaN, 3 when an array is of another type or size, 4 when the keys have no room left for\n"
             "the batch, 5 when a score's key leaves no bit free for the label (outside (-2, 2)). Keys past\n"
             "offset may be written whatever it returns. Labels: any C-contiguous integer, bool or float\n"
             "array; scores: float32, the same number of elements; keys: int32.");

/*
 * key_views on the buffers of three objects; UNUSUAL if one is not a contiguous buffer of the
 * right kind. *keyed is set to the number of examples keyed (0 unless it returns APPENDED).
 */
static long key_objects(PyObject *labels, PyObject *scores, PyObject *keys, Py_ssize_t offset, Py_ssize_t *keyed) {
    PyObject *objects[3] = {labels, scores, keys};
    Py_buffer views[3];
    int flags[3] = {PyBUF_FORMAT | PyBUF_C_CONTIGUOUS, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS,
                    PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE};
    int acquired = 0;
    for (; acquired < 3; acquired++) {
        if (PyObject_GetBuffer(objects[acquired], &views[acquired], flags[acquired]) != 0) {
            break;
        }
    }
    long status = UNUSUAL;
    if (acquired == 3) {
        status = key_views(&views[0], &views[1], &views[2], offset);
    } else {
        PyErr_Clear(); /* not a contiguous buffer: the caller's general path handles it */
    }
    /* Keyed scores are float32: 4 bytes each. */
    *keyed = status == APPENDED ? views[1].len / 4 : 0;
    for (int i = 0; i < acquired; i++) {
        PyBuffer_Release(&views[i]);
    }
    return status;
}

/* METH_FASTCALL, like append_batch: it runs for every batch. */
static PyObject *key_batch(PyObject *module, PyObject *const *objects, Py_ssize_t num_args) {
    Py_ssize_t offset;
    if (!offset_argument("key_batch", objects, num_args, 4, &offset)) {
        return NULL;
    }
    Py_ssize_t keyed;
    return PyLong_FromLong(key_objects(objects[0], objects[1], objects[2], offset, &keyed));
}

PyDoc_STRVAR(key_metric_doc,
             "key_metric(metric, keys, offset)\n--\n\n"
             "key_batch of a batch as accumulate() receives it: a dict of exactly \"labels\" and\n"
             "\"predictions\", both numpy.ndarray (not a subclass). Returns the offset after the batch\n"
             "when keyed, else minus what key_batch would return (-3 for a metric of another form).");

/* The keys of the metric dict, interned once. */
static PyObject *labels_key, *predictions_key;

/* A NumPy array, told by its type's name so that the module needs no NumPy headers. */
static int is_exact_ndarray(PyObject *object) {
    return object != NULL && strcmp(Py_TYPE(object)->tp_name, "numpy.ndarray") == 0;
}

/*
 * key_batch with the dict unpacked here: the Python around the common batch (a dict lookup
 * and a type check per array, the size added to the offset) cost about as much as keying it.
 */
static PyObject *key_metric(PyObject *module, PyObject *const *objects, Py_ssize_t num_args) {
    Py_ssize_t offset;
    if (!offset_argument("key_metric", objects, num_args, 3, &offset)) {
        return NULL;
    }
    PyObject *metric = objects[0];
    if (!PyDict_CheckExact(metric) || PyDict_GET_SIZE(metric) != 2) {
        return PyLong_FromLong(-UNUSUAL);
    }
    /* Borrowed references. A key's lookup can only fail for a missing key (its hash is cached). */
    PyObject *labels = PyDict_GetItemWithError(metric, labels_key);
    PyObject *scores = labels == NULL ? NULL : PyDict_GetItemWithError(metric, predictions_key);
    if (!is_exact_ndarray(labels) || !is_exact_ndarray(scores)) {
        PyErr_Clear();
        return PyLong_FromLong(-UNUSUAL);
    }
    Py_ssize_t keyed;
    long status = key_objects(labels, scores, objects[1], offset, &keyed);
    return PyLong_FromSsize_t(status == APPENDED ? offset + keyed : -status);
}

static PyMethodDef methods[] = {
    {"key_batch", (PyCFunction)(void (*)(void))key_batch, METH_FASTCALL, key_batch_doc},
    {"key_metric", (PyCFunction)(void (*)(void))key_metric, METH_FASTCALL, key_metric_doc},
    {"label_keys", (PyCFunction)(void (*)(void))label_keys, METH_FASTCALL, label_keys_doc},
    {"sort", sort, METH_VARARGS, sort_doc},
    {"count_parts", count_parts, METH_VARARGS, count_parts_doc},
    {"split_parts", split_parts, METH_VARARGS, split_parts_doc},
    {"auc_credit", auc_credit, METH_O, auc_credit_doc},
    {"precision_sum", precision_sum, METH_VARARGS, precision_sum_doc},
    {"count_positives", count_positives, METH_O, count_positives_doc},
    {"append_batch", (PyCFunction)(void (*)(void))append_batch, METH_FASTCALL, append_batch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "_ranking_kernels", "Native kernels of the exact ranking metrics.", -1, methods,
};

PyMODINIT_FUNC PyInit__ranking_kernels(void) {
    labels_key = PyUnicode_InternFromString("labels");
    predictions_key = PyUnicode_InternFromString("predictions");
    if (labels_key == NULL || predictions_key == NULL) {
        return NULL;
    }
    return PyModule_Create(&module_definition);
}

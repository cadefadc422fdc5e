/* aftertrace's line engine: single passes over a chunk of a text file, in C.
 *
 * Plain C with no Python headers: the library is loaded with ctypes (ingest/native/__init__.py)
 * and every function works on buffers the caller owns, so nothing here allocates or keeps state.
 * Outputs are Arrow buffers (int64 offsets + UTF-8 data, a validity bitmap) that pyarrow wraps
 * without a copy.
 *
 * Lines are the bytes between newlines. A line loses one trailing '\r' (a "\r\n" ending). Bytes
 * that are not UTF-8 are replaced by U+FFFD, one for each maximal subpart of an ill-formed
 * sequence (Unicode's recommended practice, which Python's "replace" error handler and Rust's
 * from_utf8_lossy follow): "\xE2\x82" is one U+FFFD, "\xC0\x80" two.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* The build writes the SHA-256 of this file here (-DAT_SOURCE_HASH), so the loader can tell a
 * library built from other source. */
#ifndef AT_SOURCE_HASH
#define AT_SOURCE_HASH "unknown"
#endif
const char *at_source_hash(void) { return AT_SOURCE_HASH; }

/* Number of '\n' bytes in buf[0:n]. */
int64_t at_count_newlines(const uint8_t *buf, int64_t n) {
    int64_t count = 0;
    const uint8_t *p = buf, *end = buf + n;
    while (p < end) {
        const uint8_t *q = memchr(p, '\n', (size_t)(end - p));
        if (!q) break;
        count++;
        p = q + 1;
    }
    return count;
}

/* Whether p[0:n] is ASCII; *nul: whether it holds a NUL byte (one pass over the words: a word
 * has a zero byte when subtracting 1 from each byte borrows into a byte whose high bit was clear) */
static int ascii_nul(const uint8_t *p, int64_t n, int *nul) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    int64_t i = 0;
    uint64_t acc = 0, zero = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        acc |= w;
        zero |= (w - ones) & ~w & highs;
    }
    for (; i < n; i++) {
        acc |= p[i];
        zero |= p[i] == 0;
    }
    *nul = zero != 0;
    return (acc & highs) == 0;
}

static int is_ascii(const uint8_t *p, int64_t n) {
    int64_t i = 0;
    uint64_t acc = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        acc |= w;
    }
    for (; i < n; i++) acc |= p[i];
    return (acc & 0x8080808080808080ULL) == 0;
}

/* Length of the valid UTF-8 sequence starting at p (1-4), or 0 when the sequence is ill-formed;
 * then *sub is the length of its maximal subpart (the bytes to replace by one U+FFFD). */
static int utf8_seq(const uint8_t *p, const uint8_t *end, int *sub) {
    uint8_t c = p[0];
    int need;
    uint8_t lo = 0x80, hi = 0xBF;   /* the range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else { *sub = 1; return 0; }
    int k = 1;
    for (; k <= need; k++) {
        if (p + k >= end) { *sub = k; return 0; }
        uint8_t b = p[k];
        uint8_t l = (k == 1) ? lo : 0x80, h = (k == 1) ? hi : 0xBF;
        if (b < l || b > h) { *sub = k; return 0; }
    }
    return need + 1;
}

/* Bytes that p[0:n] takes once its ill-formed sequences are replaced (n when it is UTF-8);
 * *bad is set when there is one. */
static int64_t lossy_len(const uint8_t *p, int64_t n, int *bad) {
    const uint8_t *end = p + n;
    int64_t len = 0;
    while (p < end) {
        if (*p < 0x80) { len++; p++; continue; }
        int sub = 0, l = utf8_seq(p, end, &sub);
        if (l) { len += l; p += l; } else { len += 3; p += sub; *bad = 1; }
    }
    return len;
}

/* Copy p[0:n] to out, each ill-formed sequence replaced by U+FFFD (lossy_len bytes). */
static void copy_lossy(const uint8_t *p, int64_t n, uint8_t *out) {
    const uint8_t *end = p + n;
    uint8_t *o = out;
    while (p < end) {
        if (*p < 0x80) { *o++ = *p++; continue; }
        int sub = 0, len = utf8_seq(p, end, &sub);
        if (len) {
            memcpy(o, p, (size_t)len);
            o += len;
            p += len;
        } else {
            *o++ = 0xEF; *o++ = 0xBF; *o++ = 0xBD;
            p += sub;
        }
    }
}

/* Split buf[0:n] into lines, as Arrow string views (the layout Polars holds strings in, so the
 * lines reach it without a copy).
 *
 * complete: the text after the last newline is a line too (the end of the file); otherwise it is
 * left out and *used says where the lines end (the caller keeps the rest for the next chunk).
 * The lines' bytes are buf's: buf[0:*used] is copied to data once, and each view points into it
 * (data is given as buffers 0, 1, ... of the array, each starting WINDOW bytes after the one before,
 * so an offset in a view stays under 2^31 in a buffer of any size). A line whose bytes are not
 * UTF-8 is written with its replacements to extra (buffer extra_buf, capacity cap bytes; *extra_len
 * says how much it holds). A line of 12 bytes or fewer lives in its view. views: 16 bytes per
 * line; bad[i]: bit 0 for a line whose bytes were not UTF-8, bit 1 for a line that holds a NUL
 * byte; valid: the validity bitmap (bit i clear: line i is empty and blank_as_null is set). The
 * caller sizes views, bad and valid for at_count_newlines(buf, n) + 1 lines.
 *
 * Returns the number of lines; -(bytes needed) when extra's capacity is too small (only possible
 * with bytes that are not UTF-8), with nothing usable written; INT64_MIN when a line is longer
 * than a view can say (2^31 - 1 bytes).
 */
#define WINDOW_BITS 30

static inline void put_view(uint8_t *v, const uint8_t *bytes, int64_t len, int32_t buf, int64_t off) {
    int32_t l = (int32_t)len;
    memset(v, 0, 16);
    memcpy(v, &l, 4);
    if (len <= 12) {
        memcpy(v + 4, bytes, (size_t)len);
        return;
    }
    int32_t o = (int32_t)off;
    memcpy(v + 4, bytes, 4);
    memcpy(v + 8, &buf, 4);
    memcpy(v + 12, &o, 4);
}

int64_t at_split_views(const uint8_t *buf, int64_t n, int complete, int blank_as_null, uint8_t *data,
                       uint8_t *views, uint8_t *bad, uint8_t *valid, uint8_t *extra, int64_t cap, int32_t extra_buf,
                       int64_t *used, int64_t *nulls, int64_t *extra_len) {
    const uint8_t *p = buf, *end = buf + n;
    int64_t count = 0, e = 0, null_count = 0;
    int overflow = 0, nul_all;
    /* (most chunks are ASCII without a NUL byte: one test of the whole chunk spares one per line) */
    int plain = ascii_nul(buf, n, &nul_all) && !nul_all;
    while (p < end) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *stop;
        if (nl) stop = nl;
        else if (complete) stop = end;
        else break;
        int64_t len = stop - p;
        if (len > 0 && p[len - 1] == '\r') len--;
        if (len > INT32_MAX) return INT64_MIN;
        int is_bad = 0, nul = 0;
        int64_t take = len;
        if (!plain && !ascii_nul(p, len, &nul)) take = lossy_len(p, len, &is_bad);
        uint8_t *v = views + 16 * count;
        if (blank_as_null && len == 0) {
            valid[count >> 3] &= (uint8_t)~(1u << (count & 7));
            null_count++;
            memset(v, 0, 16);
        } else {
            valid[count >> 3] |= (uint8_t)(1u << (count & 7));
            if (is_bad) {
                if (e + take > cap) overflow = 1;
                if (!overflow) {
                    copy_lossy(p, len, extra + e);
                    put_view(v, extra + e, take, extra_buf, e);
                }
                e += take;
            } else {
                int64_t off = p - buf;
                put_view(v, p, len, (int32_t)(off >> WINDOW_BITS), off & ((INT64_C(1) << WINDOW_BITS) - 1));
            }
        }
        bad[count] = (uint8_t)(is_bad | nul << 1);
        count++;
        p = nl ? nl + 1 : end;
    }
    *used = p - buf;
    *nulls = null_count;
    *extra_len = e;
    if (overflow) return -e;
    memcpy(data, buf, (size_t)*used);
    return count;
}

/* ---------------------------------------------------------------------------------------------
 * Step lines: the values the log engine's STEP, LOSS and STEP_TIME regexes read from a message
 * (ingest/formats/logs/grammar.py; engine.py: _messages), read in one pass. A message that holds
 * "step" or "iteration" in any case is lowercased; the leftmost STEP match gives the step (its
 * first run of digits) and the total (its second); the leftmost LOSS match's number is the loss;
 * the leftmost STEP_TIME match's first run of digits and dots is the step time, in s (ms for
 * "elapsed time per iteration (ms):"). The regexes follow Rust's semantics: leftmost-first,
 * greedy; their \d, \s and \b and their case-insensitive matching are Unicode's. Only ASCII
 * messages are read here, where those are the ASCII ones: the others are left to the regexes.
 */
enum { NO = 0, MATCH = 1 };

typedef struct { const uint8_t *p; int64_t n; } line_t;

/* the byte at i, or -1 past the end */
static inline int at(line_t l, int64_t i) { return i < l.n ? l.p[i] : -1; }
static inline int is_d(int c) { return c >= '0' && c <= '9'; }
static inline int is_s(int c) { return c == ' ' || (c >= 9 && c <= 13); }   /* \s's ASCII members */

/* A column of text as Arrow lays it out, either way: large_string (offs, data) or string_view
 * (views: 16 bytes per row, its length, then the bytes themselves when they fit in 12, else a
 * 4-byte prefix, the number of the data buffer and the offset in it; bufs: the data buffers),
 * which is how Polars holds strings (read without a copy). */
typedef struct {
    const int64_t *offs;
    const uint8_t *data;
    const uint8_t *views;
    const uint8_t *const *bufs;
    const uint8_t *valid;           /* validity bitmap (bit 0: the first row), NULL: no nulls */
} col_t;

static inline line_t line_of(const col_t *c, int64_t i) {
    if (c->views == NULL) {
        line_t l = {c->data + c->offs[i], c->offs[i + 1] - c->offs[i]};
        return l;
    }
    const uint8_t *v = c->views + 16 * i;
    int32_t len, buf, off;
    memcpy(&len, v, 4);
    if (len <= 12) {
        line_t l = {v + 4, len};
        return l;
    }
    memcpy(&buf, v + 8, 4);
    memcpy(&off, v + 12, 4);
    line_t l = {c->bufs[buf] + off, len};
    return l;
}

static inline int is_valid(const col_t *c, int64_t i) {
    return c->valid == NULL || (c->valid[i >> 3] >> (i & 7)) & 1;
}

/* Cuts of a text column as a string_view column that shares the column's bytes: row i is
 * col[i][start[i] : start[i] + len[i]] (len NULL or len[i] < 0: to the end; clipped to the text),
 * null where col[i] is null or start[i] < 0. Offsets count bytes: the callers cut ASCII prefixes,
 * where bytes are characters (a cut that falls inside a character moves to its edge: the output
 * is UTF-8 whenever the input is). A cut of 12 bytes or fewer is held in its view; a longer one points
 * into the column's data buffer (string_view: the buffer the row's own view names; large_string:
 * buffer 0, which must stay under 2 GiB). views: 16 bytes per row; valid: the validity bitmap.
 * Returns the number of nulls. */
int64_t at_slice_views(const col_t *col, int64_t n, const int32_t *start, const int32_t *len, uint8_t *views,
                       uint8_t *valid) {
    int64_t nulls = 0;
    memset(valid, 0, (size_t)((n + 7) / 8));
    for (int64_t i = 0; i < n; i++) {
        uint8_t *v = views + 16 * i;
        memset(v, 0, 16);
        if (!is_valid(col, i) || start[i] < 0) { nulls++; continue; }
        valid[i >> 3] |= (uint8_t)(1u << (i & 7));
        line_t l = line_of(col, i);
        int64_t a = start[i] < l.n ? start[i] : l.n;
        int64_t k = l.n - a;
        if (len != NULL && len[i] >= 0 && len[i] < k) k = len[i];
        /* (a cut inside a character would leave bytes that are not UTF-8: its start moves past
         * the character, its end back before it) */
        while (k > 0 && (l.p[a] & 0xC0) == 0x80) { a++; k--; }
        while (k > 0 && a + k < l.n && (l.p[a + k] & 0xC0) == 0x80) k--;
        int32_t k32 = (int32_t)k;
        memcpy(v, &k32, 4);
        if (k <= 12) { memcpy(v + 4, l.p + a, (size_t)k); continue; }
        int32_t buf, off;
        if (col->views == NULL) {
            buf = 0;
            off = (int32_t)(col->offs[i] + a);
        } else {            /* (a row longer than 12 bytes: its view names its buffer and offset) */
            const uint8_t *src = col->views + 16 * i;
            memcpy(&buf, src + 8, 4);
            memcpy(&off, src + 12, 4);
            off += (int32_t)a;
        }
        memcpy(v + 4, l.p + a, 4);
        memcpy(v + 8, &buf, 4);
        memcpy(v + 12, &off, 4);
    }
    return nulls;
}

static inline int w_ascii(int c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* The readers below work on the lowercased message (l); every test the regexes make there is
 * a test of ASCII bytes. */

/* \b before a letter at i: i is a word start */
static inline int word_start(line_t l, int64_t i) { return i == 0 || !w_ascii(l.p[i - 1]); }
/* \b after a letter ending at i */
static inline int word_end(line_t l, int64_t i) { return !w_ascii(at(l, i)); }

static inline int64_t skip_s(line_t l, int64_t i) { while (is_s(at(l, i))) i++; return i; }
static inline int64_t skip_d(line_t l, int64_t i) { while (is_d(at(l, i))) i++; return i; }

/* the next occurrence of needle (length k) at or after i, or -1: memchr for the needle's byte at
 * `rare`, then a compare (on lines of a hundred bytes this beats memmem, which studies the needle
 * anew on every call). Best is a byte that seldom occurs in the text ('=' of "opId=", 'C' of
 * " opCount "): a common letter stops memchr at every word. */
static inline int64_t find_by(line_t l, int64_t i, const char *needle, size_t k, size_t rare) {
    const uint8_t *end = l.p + l.n;
    const uint8_t *p = l.p + i + rare;
    while (p + (k - rare) <= end) {
        const uint8_t *q = memchr(p, (uint8_t)needle[rare], (size_t)(end - p) - (k - rare) + 1);
        if (!q) return -1;
        if (memcmp(q - rare, needle, k) == 0) return q - rare - l.p;
        p = q + 1;
    }
    return -1;
}

/* find_by() at the needle's first byte that is not a space */
static inline int64_t find(line_t l, int64_t i, const char *needle, size_t k) {
    size_t a = 0;
    while (a + 1 < k && needle[a] == ' ') a++;
    return find_by(l, i, needle, k, a);
}

static inline int starts(line_t l, int64_t i, const char *s, size_t k) {
    return i >= 0 && i + (int64_t)k <= l.n && memcmp(l.p + i, s, k) == 0;
}

/* the int64 of the digits [a, b), or 0 with *ok = 0 when it does not fit */
static int64_t digits_i64(line_t l, int64_t a, int64_t b, int *ok) {
    int64_t v = 0;
    for (int64_t i = a; i < b; i++) {
        int d = l.p[i] - '0';
        if (v > (INT64_MAX - d) / 10) { *ok = 0; return 0; }
        v = v * 10 + d;
    }
    *ok = 1;
    return v;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14,
                               1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* the double of the text [a, b), which must be all of a decimal number (Polars' cast: else null).
 * A number of at most 15 significant digits and a power of ten within 10^22 is exactly m x 10^k
 * or m / 10^-k of two exact doubles, one correctly rounded operation (Clinger's fast path, what
 * strtod itself gives); any other goes to strtod. */
static double text_f64(line_t l, int64_t a, int64_t b, int *ok) {
    const uint8_t *p = l.p + a, *end = l.p + b;
    *ok = 0;
    if (a >= b) return 0;
    int neg = 0, digits = 0, frac = 0, seen = 0;
    uint64_t m = 0;
    if (*p == '-' || *p == '+') { neg = *p == '-'; p++; }
    for (; p < end && *p >= '0' && *p <= '9'; p++, seen++) {
        if (m || *p != '0') { m = m * 10 + (uint64_t)(*p - '0'); digits++; }
        if (digits > 15) break;
    }
    if (digits <= 15 && p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9'; p++, seen++) {
            if (m || *p != '0') { if (digits == 15) break; m = m * 10 + (uint64_t)(*p - '0'); digits++; }
            frac++;
        }
    }
    if (digits <= 15 && seen && p == end) {
        double v = (double)m;
        if (frac <= 22) {
            v = frac ? v / POW10[frac] : v;
            *ok = 1;
            return neg ? -v : v;
        }
    }
    char small[128], *buf = small;
    int64_t n = b - a;
    if (n >= (int64_t)sizeof(small) && !(buf = (char *)malloc((size_t)n + 1))) return 0;
    memcpy(buf, l.p + a, (size_t)n);
    buf[n] = 0;
    char *e;
    double v = strtod(buf, &e);
    *ok = e == buf + n;
    if (buf != small) free(buf);
    return v;
}

/* STEP's alternative 1 at q (after "step" or "global_step"): \s*[=:]\s*\d+ */
static int step_eq(line_t l, int64_t q, int64_t *s0, int64_t *s1) {
    int64_t r = skip_s(l, q);
    if (at(l, r) != '=' && at(l, r) != ':') return NO;
    r = skip_s(l, r + 1);
    int64_t e = skip_d(l, r);
    if (e == r) return NO;
    *s0 = r; *s1 = e;
    return MATCH;
}

/* STEP's alternatives 2 and 3 at a (after "iteration" or "step"): \s+\d+\s*[/]\s*\d+ */
static int step_of(line_t l, int64_t a, int64_t *s0, int64_t *s1, int64_t *t0, int64_t *t1) {
    int64_t r = skip_s(l, a);
    if (r == a) return NO;
    int64_t e = skip_d(l, r);
    if (e == r) return NO;
    int64_t u = skip_s(l, e);
    if (at(l, u) != '/') return NO;
    u = skip_s(l, u + 1);
    int64_t v = skip_d(l, u);
    if (v == u) return NO;
    *s0 = r; *s1 = e; *t0 = u; *t1 = v;
    return MATCH;
}

/* STEP: \b(?:global_step|step)\s*[=:]\s*\d+ | \biteration\s+\d+\s*[/]\s*\d+ | \bstep\s+\d+\s*[/]\s*\d+
 * The leftmost position where an alternative matches, the first alternative there. Every match
 * starts at an occurrence of "step" (alternatives 1 and 3; "global_step" at 7 before one) or of
 * "iteration" (2), taken in the order of their starts (st, it: the first of each, -1 for none).
 * The match's first and second digit runs: (s0, s1) and (t0, t1), t0 = -1 when there is none. */
static int find_step(line_t l, int64_t st, int64_t it, int64_t *s0, int64_t *s1, int64_t *t0, int64_t *t1) {
    while (st >= 0 || it >= 0) {
        /* the start of the candidate at this "step": "global_step" begins 7 before it */
        int64_t gs = (st >= 7 && starts(l, st - 7, "global_", 7)) ? st - 7 : -1;
        int64_t sp = gs >= 0 && word_start(l, gs) ? gs : st;
        if (st >= 0 && (it < 0 || sp < it)) {
            if (sp == gs) {                              /* "global_step": alternative 1 only */
                if (step_eq(l, st + 4, s0, s1) == MATCH) { *t0 = *t1 = -1; return MATCH; }
                /* (not a match there: "step" 7 on is inside a word) */
            } else if (word_start(l, st)) {
                if (step_eq(l, st + 4, s0, s1) == MATCH) { *t0 = *t1 = -1; return MATCH; }
                if (step_of(l, st + 4, s0, s1, t0, t1) == MATCH) return MATCH;
            }
            st = find(l, st + 1, "step", 4);
        } else {
            if (word_start(l, it) && step_of(l, it + 9, s0, s1, t0, t1) == MATCH) return MATCH;
            it = find(l, it + 1, "iteration", 9);
        }
    }
    return NO;
}

/* LOSS: \b(?:lm )?loss\b\s*[=:]?\s*[-+]?\d+\.?\d*(?:[ee][-+]?\d+)? , leftmost: the number's span.
 * Every match ends its words at an occurrence of "loss" ("lm " may stand 3 before it); both
 * readings of one occurrence go on alike after it, so it matches or not as a whole (q: the first
 * occurrence, -1 for none). */
static int find_loss(line_t l, int64_t q, int64_t *a, int64_t *b) {
    for (; q >= 0; q = find(l, q + 1, "loss", 4)) {
        int lm = q >= 3 && starts(l, q - 3, "lm ", 3) && word_start(l, q - 3);
        if ((!lm && !word_start(l, q)) || !word_end(l, q + 4)) continue;
        /* \s*[=:]?\s* then the number: every way of taking the spaces leads to one number start */
        int64_t r = skip_s(l, q + 4);
        if (at(l, r) == '=' || at(l, r) == ':') r = skip_s(l, r + 1);
        int64_t n0 = r;
        if (at(l, r) == '-' || at(l, r) == '+') r++;
        int64_t e = skip_d(l, r);
        if (e == r) continue;
        if (at(l, e) == '.') e = skip_d(l, e + 1);
        if (at(l, e) == 'e') {
            int64_t x = e + 1;
            if (at(l, x) == '-' || at(l, x) == '+') x++;
            int64_t y = skip_d(l, x);
            if (y > x) e = y;
        }
        *a = n0; *b = e;
        return MATCH;
    }
    return NO;
}

static const char ITER_MS[] = "elapsed time per iteration (ms):";

/* STEP_TIME: step_time\s*[=:]\s*[\d.]+\s*s | elapsed time per iteration \(ms\):\s*[\d.]+ , leftmost:
 * the value's span and its unit (1: s, 1000: ms); st, el: the first occurrence of each, -1 for none */
static int find_step_time(line_t l, int64_t st, int64_t el, int64_t *a, int64_t *b, double *unit) {
    while (st >= 0 || el >= 0) {
        if (st >= 0 && (el < 0 || st < el)) {
            int64_t r = skip_s(l, st + 9);
            if (at(l, r) == '=' || at(l, r) == ':') {
                r = skip_s(l, r + 1);
                int64_t e = r;
                while (is_d(at(l, e)) || at(l, e) == '.') e++;
                if (e > r && at(l, skip_s(l, e)) == 's') { *a = r; *b = e; *unit = 1.0; return MATCH; }
            }
            st = find(l, st + 1, "step_time", 9);
        } else {
            int64_t r = skip_s(l, el + (int64_t)sizeof ITER_MS - 1), e = r;
            while (is_d(at(l, e)) || at(l, e) == '.') e++;
            if (e > r) { *a = r; *b = e; *unit = 1000.0; return MATCH; }
            el = find(l, el + 1, ITER_MS, sizeof ITER_MS - 1);
        }
    }
    return NO;
}

/* l: the ASCII text m lowercased, in *buf (grown as needed, *cap its size). -1 when memory ran
 * out (*buf is then freed). Eight bytes at a time: a byte's high bit marks it as >= 'A' and as
 * > 'Z' after adding to its low seven bits (no carry crosses into the next byte); ASCII bytes
 * with the first mark and not the second get 0x20. */
static int lowered(line_t m, uint8_t **buf, int64_t *cap, line_t *l) {
    if (m.n > *cap) {
        int64_t want = m.n > 256 ? m.n : 256;
        uint8_t *grown = (uint8_t *)realloc(*buf, (size_t)want);
        if (!grown) { free(*buf); *buf = NULL; return -1; }
        *buf = grown;
        *cap = want;
    }
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    int64_t k = 0;
    for (; k + 8 <= m.n; k += 8) {
        uint64_t w, low7;
        memcpy(&w, m.p + k, 8);
        low7 = w & ~highs;
        uint64_t ge_a = low7 + (0x80 - 'A') * ones, gt_z = low7 + (0x7f - 'Z') * ones;
        w |= ((ge_a & ~gt_z & ~w & highs) >> 2);
        memcpy(*buf + k, &w, 8);
    }
    for (; k < m.n; k++) {
        uint8_t c = m.p[k];
        (*buf)[k] = (c >= 'A' && c <= 'Z') ? (uint8_t)(c + 32) : c;
    }
    l->p = *buf;
    l->n = m.n;
    return 0;
}

/* The first occurrence of each word the readers start from (-1: none). */
typedef struct { int64_t step, iteration, loss, step_time, iter_ms; } firsts_t;

static firsts_t first_words(line_t l) {
    firsts_t f;
    f.step = find(l, 0, "step", 4);
    f.step_time = f.step >= 0 ? find(l, f.step, "step_time", 9) : -1;
    f.iteration = find(l, 0, "iteration", 9);
    f.loss = find(l, 0, "loss", 4);
    /* (ITER_MS holds "iteration" 17 bytes in: it starts no earlier than 17 before the first one) */
    f.iter_ms = f.iteration < 0 ? -1 : find(l, f.iteration > 17 ? f.iteration - 17 : 0, ITER_MS, sizeof ITER_MS - 1);
    return f;
}

/* For messages [0, n) of col: code[i] 0 (not a step line), 1 (a step line; the
 * values below) or 255 (not ASCII: left to the regexes). step/total (int64), loss/stime (double),
 * each with a byte that says whether it has a value. Returns the number left to the regexes, or
 * -1 when memory ran out. */
int64_t at_step_values(const col_t *col, int64_t n, uint8_t *code, int64_t *step, uint8_t *step_ok,
                       int64_t *total, uint8_t *total_ok, double *loss, uint8_t *loss_ok,
                       double *stime, uint8_t *stime_ok) {
    int64_t left = 0, cap = 0;
    uint8_t *low = NULL;
    for (int64_t i = 0; i < n; i++) {
        step_ok[i] = total_ok[i] = loss_ok[i] = stime_ok[i] = 0;
        step[i] = total[i] = 0;
        loss[i] = stime[i] = 0;
        code[i] = 0;
        if (!is_valid(col, i)) continue;
        line_t m = line_of(col, i);
        if (!is_ascii(m.p, m.n)) { code[i] = 255; left++; continue; }
        line_t l;
        if (lowered(m, &low, &cap, &l) < 0) return -1;
        firsts_t f = first_words(l);
        if (f.step < 0 && f.iteration < 0) continue;
        int64_t s0, s1, t0, t1, a, b;
        if (find_step(l, f.step, f.iteration, &s0, &s1, &t0, &t1) != MATCH) continue;
        code[i] = 1;
        int ok;
        step[i] = digits_i64(l, s0, s1, &ok); step_ok[i] = (uint8_t)ok;
        if (t0 >= 0) { total[i] = digits_i64(l, t0, t1, &ok); total_ok[i] = (uint8_t)ok; }
        if (find_loss(l, f.loss, &a, &b) == MATCH) { loss[i] = text_f64(l, a, b, &ok); loss_ok[i] = (uint8_t)ok; }
        double unit;
        if (find_step_time(l, f.step_time, f.iter_ms, &a, &b, &unit) == MATCH) {
            double v = text_f64(l, a, b, &ok);
            if (ok) { stime[i] = v / unit; stime_ok[i] = 1; }
        }
    }
    free(low);
    return left;
}

/* ---------------------------------------------------------------------------------------------
 * A rank a message states, as the log engine's regexes read it (ingest/formats/logs/grammar.py;
 * engine.py: _ranks): RANK_IN_TEXT, (?i)\[rank:? ?(\d+)\]|\brank[=:](\d+)\b, its leftmost match (g1 from
 * the first alternative, g2 from the second), and c10d's process-group prefix
 * ^\[(?:PG[^\]]*? )?Rank (\d+)\] (pg). ASCII messages only, as for the step lines.
 */

/* the digits [a, b) as a rank value: v and ok (ok = 0 when it does not fit an int64) */
static void put_i64(line_t l, int64_t a, int64_t b, int64_t *v, uint8_t *ok) {
    int fits;
    *v = digits_i64(l, a, b, &fits);
    *ok = (uint8_t)fits;
}

static void rank_in_text(line_t low, int64_t *g1, uint8_t *g1_ok, int64_t *g2, uint8_t *g2_ok) {
    for (int64_t p = find(low, 0, "rank", 4); p >= 0; p = find(low, p + 1, "rank", 4)) {
        /* alternative 1 starts at the "[" before this "rank" (it is tried first there: the
         * "[" stands before the "r" of the second alternative) */
        if (p >= 1 && low.p[p - 1] == '[') {
            int64_t q = p + 4;
            if (at(low, q) == ':') q++;
            if (at(low, q) == ' ') q++;
            int64_t e = skip_d(low, q);
            if (e > q && at(low, e) == ']') { put_i64(low, q, e, g1, g1_ok); return; }
        }
        if (word_start(low, p) && (at(low, p + 4) == '=' || at(low, p + 4) == ':')) {
            int64_t q = p + 5, e = skip_d(low, q);
            if (e > q && word_end(low, e)) { put_i64(low, q, e, g2, g2_ok); return; }
        }
    }
}

/* ^\[(?:PG[^\]]*? )?Rank (\d+)\] on the message as it is (case counts) */
static int pg_rank_at(line_t m, int64_t q, int64_t *v, uint8_t *ok) {
    if (!starts(m, q, "Rank ", 5)) return NO;
    int64_t e = skip_d(m, q + 5);
    if (e == q + 5 || at(m, e) != ']') return NO;
    put_i64(m, q + 5, e, v, ok);
    return MATCH;
}

static void pg_rank(line_t m, int64_t *v, uint8_t *ok) {
    if (at(m, 0) != '[') return;
    if (starts(m, 1, "PG", 2)) {          /* the group, its lazy run the shortest that fits */
        for (int64_t k = 3; k < m.n && m.p[k] != ']'; k++)
            if (m.p[k] == ' ' && pg_rank_at(m, k + 1, v, ok) == MATCH) return;
    }
    pg_rank_at(m, 1, v, ok);
}

/* For messages [0, n) of col: g1, g2 (RANK_IN_TEXT's groups) and pg, each int64 with a byte that says
 * whether it has a value; code[i] 255 where the message is not ASCII (left to the regexes), else
 * 0. Returns the number left, or -1 when memory ran out. */
int64_t at_rank_said(const col_t *col, int64_t n, uint8_t *code,
                     int64_t *g1, uint8_t *g1_ok, int64_t *g2, uint8_t *g2_ok, int64_t *pg, uint8_t *pg_ok) {
    int64_t left = 0, cap = 0;
    uint8_t *low = NULL;
    for (int64_t i = 0; i < n; i++) {
        code[i] = g1_ok[i] = g2_ok[i] = pg_ok[i] = 0;
        g1[i] = g2[i] = pg[i] = 0;
        if (!is_valid(col, i)) continue;
        line_t m = line_of(col, i);
        if (!is_ascii(m.p, m.n)) { code[i] = 255; left++; continue; }
        line_t l;
        if (lowered(m, &low, &cap, &l) < 0) return -1;
        rank_in_text(l, g1 + i, g1_ok + i, g2 + i, g2_ok + i);
        pg_rank(m, pg + i, pg_ok + i);
    }
    free(low);
    return left;
}

/* ---------------------------------------------------------------------------------------------
 * NCCL INFO lines, as the NCCL grammar's collapse step reads them (ingest/formats/logs/
 * nccl_grammar.py: collapse_info): a line holding " NCCL INFO " is cut at its first one into the
 * header (the key: "host:pid:tid [dev]") and the message. The message's kept lines (INFO_KEEP at
 * its start) and spliced lines (" NCCL " in the message) are not collapsed; the others are of
 * class 0 (" opCount "), 1 (an OP_LITERALS literal) or 2. Equal headers get one number (the
 * header's first line keeps it), so the groups can be counted without the text. ASCII lines
 * only: INFO_KEEP's \w and \d are Unicode's.
 */
static inline int w_or(int c, const char *more) { return w_ascii(c) || (c > 0 && strchr(more, c) != NULL); }

/* INFO_KEEP: ^(?:NCCL version|Init timings|Connected all |NET/|Using network |Bootstrap|cudaDriverVersion
 * |comm |\[Rank \d+\] comm |\w+ comm 0x|\d+ coll channels|[\w./\-]+:\d+ -> \d) */
static int info_keep(line_t m) {
    static const char *LIT[] = {"NCCL version", "Init timings", "Connected all ", "NET/", "Using network ",
                                "Bootstrap", "cudaDriverVersion", "comm "};
    for (size_t k = 0; k < sizeof LIT / sizeof LIT[0]; k++)
        if (starts(m, 0, LIT[k], strlen(LIT[k]))) return 1;
    if (starts(m, 0, "[Rank ", 6)) {
        int64_t e = skip_d(m, 6);
        if (e > 6 && starts(m, e, "] comm ", 7)) return 1;
    }
    int64_t w = 0;
    while (w_ascii(at(m, w))) w++;
    if (w > 0 && starts(m, w, " comm 0x", 8)) return 1;
    int64_t d = skip_d(m, 0);
    if (d > 0 && starts(m, d, " coll channels", 14)) return 1;
    int64_t r = 0;
    while (w_or(at(m, r), "./-")) r++;
    if (r > 0 && at(m, r) == ':') {
        int64_t e = skip_d(m, r + 1);
        if (e > r + 1 && starts(m, e, " -> ", 4) && is_d(at(m, e + 4))) return 1;
    }
    return 0;
}

static const char *const OP_LITERALS[] = {" Bytes -> Algo ", "opId=", "ncclPollProxyResponse",
                                          "Received and initiated operation"};
static const size_t OP_RARE[] = {8, 4, 4, 0};       /* '>', '=', 'P', 'R': the byte memchr looks for */

/* A header's hash for the table of headers (equal hashes are compared byte by byte): eight bytes
 * at a time, each word mixed in by a multiply and a shift (a byte-at-a-time hash spent a third of
 * the pass on its chain of multiplies). */
static uint64_t hash_bytes(const uint8_t *p, int64_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    if (i < n) {           /* the last bytes: the header's last eight (overlapping) where it has eight */
        if (n >= 8) memcpy(&w, p + n - 8, 8);
        else for (int64_t k = 0; k < n; k++) w |= (uint64_t)p[k] << (8 * k);
    }
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

/* For lines [0, n) of col: code[i] 0 (not collapsed), 1 + class, or 255 (holds " NCCL INFO " but is not
 * ASCII: left to the regexes); for codes 1-3, kid[i] (the header's number, from 0 in order of
 * first appearance), msg_at[i] (where the message starts) and flags[i] (INFO_BRACKET: the header
 * starts with "["; INFO_CHANNEL: the message starts with "Channel "); first[k]: the line where
 * header k first appears (room for n). Returns the number of headers, -1 when memory ran out. */
enum { INFO_BRACKET = 1, INFO_CHANNEL = 2 };
int64_t at_nccl_info(const col_t *col, int64_t n, uint8_t *code,
                     int32_t *kid, int32_t *msg_at, uint8_t *flags, int64_t *first) {
    int64_t cap = 1024, used = 0;
    int64_t *slot = (int64_t *)malloc(sizeof(int64_t) * (size_t)cap);   /* a header's number + 1, 0: empty */
    uint64_t *hs = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)cap);
    if (!slot || !hs) { free(slot); free(hs); return -1; }
    memset(slot, 0, sizeof(int64_t) * (size_t)cap);
    int64_t nk = 0;
    for (int64_t i = 0; i < n; i++) {
        code[i] = 0; kid[i] = -1; msg_at[i] = -1; flags[i] = 0;
        if (!is_valid(col, i)) continue;
        line_t l = line_of(col, i);
        int64_t at_info = find(l, 0, " NCCL INFO ", 11);
        if (at_info < 0) continue;
        if (!is_ascii(l.p, l.n) || l.n > INT32_MAX) { code[i] = 255; continue; }
        line_t m = {l.p + at_info + 11, l.n - at_info - 11};
        if (info_keep(m) || find(m, 0, " NCCL ", 6) >= 0) continue;
        int cls = 2;
        if (find_by(m, 0, " opCount ", 9, 3) >= 0) cls = 0;
        else
            for (size_t k = 0; k < sizeof OP_LITERALS / sizeof OP_LITERALS[0]; k++)
                if (find_by(m, 0, OP_LITERALS[k], strlen(OP_LITERALS[k]), OP_RARE[k]) >= 0) { cls = 1; break; }
        code[i] = (uint8_t)(1 + cls);
        msg_at[i] = (int32_t)(at_info + 11);
        flags[i] = (uint8_t)((l.p[0] == '[' && at_info > 0 ? INFO_BRACKET : 0)
                             | (starts(m, 0, "Channel ", 8) ? INFO_CHANNEL : 0));
        /* the header's number: its equal's, or the next */
        uint64_t h = hash_bytes(l.p, at_info);
        int64_t j = (int64_t)(h & (uint64_t)(cap - 1));
        for (;;) {
            if (slot[j] == 0) {
                slot[j] = nk + 1;
                hs[j] = h;
                first[nk] = i;
                kid[i] = (int32_t)nk++;
                used++;
                break;
            }
            int64_t k = slot[j] - 1;
            line_t o = line_of(col, first[k]);
            int64_t o_at = msg_at[first[k]] - 11;
            if (hs[j] == h && o_at == at_info && memcmp(o.p, l.p, (size_t)at_info) == 0) { kid[i] = (int32_t)k; break; }
            j = (j + 1) & (cap - 1);
        }
        if (used * 2 > cap) {          /* grow: rehash every header */
            int64_t ncap = cap * 2;
            int64_t *ns = (int64_t *)calloc((size_t)ncap, sizeof(int64_t));
            uint64_t *nh = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)ncap);
            if (!ns || !nh) { free(ns); free(nh); free(slot); free(hs); return -1; }
            for (int64_t q = 0; q < cap; q++) {
                if (!slot[q]) continue;
                int64_t t = (int64_t)(hs[q] & (uint64_t)(ncap - 1));
                while (ns[t]) t = (t + 1) & (ncap - 1);
                ns[t] = slot[q];
                nh[t] = hs[q];
            }
            free(slot); free(hs);
            slot = ns; hs = nh; cap = ncap;
        }
    }
    free(slot); free(hs);
    return nk;
}

/* The collapse groups of n NCCL INFO lines, as at_nccl_info reads them (code, kid and flags; nk
 * headers): a group is (class, header); its lines are the lines with code 1-3 where later[i] is set
 * (later NULL: every line), less those with INFO_BRACKET (a line with a time of its own stays).
 * first[g] and last[g] (the group's first and last row, -1: none) and count[g], for g = class * nk +
 * header (3 * nk groups); keep[i] 0 for a grouped line between its group's first and last, else 1.
 * Returns the lines dropped. */
static inline int64_t group_of(int64_t i, const uint8_t *code, const int32_t *kid, const uint8_t *flags,
                               const uint8_t *later, int64_t nk) {
    if (code[i] < 1 || code[i] > 3 || (flags[i] & INFO_BRACKET) || (later && !later[i]) || kid[i] < 0 || kid[i] >= nk)
        return -1;
    return (int64_t)(code[i] - 1) * nk + kid[i];
}

int64_t at_nccl_groups(int64_t n, const uint8_t *code, const int32_t *kid, const uint8_t *flags,
                       const uint8_t *later, int64_t nk, int64_t *first, int64_t *last, int64_t *count,
                       uint8_t *keep) {
    for (int64_t g = 0; g < 3 * nk; g++) { first[g] = -1; last[g] = -1; count[g] = 0; }
    for (int64_t i = 0; i < n; i++) {
        int64_t g = group_of(i, code, kid, flags, later, nk);
        if (g < 0) continue;
        if (first[g] < 0) first[g] = i;
        last[g] = i;
        count[g]++;
    }
    int64_t dropped = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t g = group_of(i, code, kid, flags, later, nk);
        keep[i] = (uint8_t)(g < 0 || i == first[g] || i == last[g]);
        dropped += !keep[i];
    }
    return dropped;
}

/* NCCL lines that start with their header, "host:pid:tid " (FAST_START in ingest/formats/logs/
 * nccl_grammar.py), cut as nccl_frame's string operations cut them: at the first " NCCL " into the
 * header and the rest; the header at its first blank into the ids "host:pid:tid" and the tail
 * (a device "[3]", or the trace time, source and function that the HEADER_TAIL regex reads); the
 * rest at its first blank into the level and the message. For lines [0, n) of col: code[i] 1 (read),
 * 0 (not that shape) or 255 (not ASCII: FAST_START's \w is Unicode's, left to the string
 * operations). f holds NH_FIELDS int32 columns of n rows each (column k at f + k * n); for code 1,
 * in bytes: the host is [0, HOST_END), the pid [PID_AT, PID_END), the tid [TID_AT, TID_END), the
 * tail [TAIL_AT, TAIL_END) (TAIL_AT -1: none, the header is the ids alone), the device
 * [DEV_AT, DEV_END) where the tail is "simple" (empty, or brackets around no blank: the device is
 * the tail less its leading and trailing brackets; DEV_AT -1 otherwise), the message from MSG_AT
 * (-1: the rest has no blank, the message is empty), the level [LEVEL_AT, LEVEL_END) (the rest up to
 * its first blank; LEVEL_AT -1: no " NCCL "). Returns how many lines were left (255). */
enum { HOST_END, PID_AT, PID_END, TID_AT, TID_END, TAIL_AT, TAIL_END, DEV_AT, DEV_END, LEVEL_AT, LEVEL_END, MSG_AT,
       NH_FIELDS };
int64_t at_nccl_heads(const col_t *col, int64_t n, uint8_t *code, int32_t *f) {
    int64_t left = 0;
    for (int64_t i = 0; i < n; i++) {
        code[i] = 0;
        for (int k = 0; k < NH_FIELDS; k++) f[k * n + i] = -1;
        if (!is_valid(col, i)) continue;
        line_t l = line_of(col, i);
        if (!is_ascii(l.p, l.n)) { code[i] = 255; left++; continue; }
        if (l.n > INT32_MAX) continue;
        /* ^[\w.\-]+:\d+:\d+ (then a blank) */
        int64_t h = 0;
        while (w_or(at(l, h), ".-")) h++;
        if (h == 0 || at(l, h) != ':') continue;
        int64_t pe = skip_d(l, h + 1);
        if (pe == h + 1 || at(l, pe) != ':') continue;
        int64_t te = skip_d(l, pe + 1);
        if (te == pe + 1 || at(l, te) != ' ') continue;
        code[i] = 1;
        f[HOST_END * n + i] = (int32_t)h;
        f[PID_AT * n + i] = (int32_t)(h + 1); f[PID_END * n + i] = (int32_t)pe;
        f[TID_AT * n + i] = (int32_t)(pe + 1); f[TID_END * n + i] = (int32_t)te;
        int64_t cut = find(l, 0, " NCCL ", 6);
        int64_t head_end = cut < 0 ? l.n : cut;
        if (head_end > te) {             /* a blank after the ids inside the header: the tail */
            f[TAIL_AT * n + i] = (int32_t)(te + 1); f[TAIL_END * n + i] = (int32_t)head_end;
            line_t t = {l.p + te + 1, head_end - te - 1};
            int simple = t.n == 0 || (t.p[0] == '[' && t.p[t.n - 1] == ']' && memchr(t.p, ' ', (size_t)t.n) == NULL);
            if (simple) {
                int64_t a = 0, b = t.n;
                while (a < b && (t.p[a] == '[' || t.p[a] == ']')) a++;
                while (b > a && (t.p[b - 1] == '[' || t.p[b - 1] == ']')) b--;
                f[DEV_AT * n + i] = (int32_t)(te + 1 + a); f[DEV_END * n + i] = (int32_t)(te + 1 + b);
            }
        }
        if (cut < 0) continue;
        int64_t a = cut + 6, b = a;
        while (b < l.n && l.p[b] != ' ') b++;
        f[LEVEL_AT * n + i] = (int32_t)a; f[LEVEL_END * n + i] = (int32_t)b;
        if (b < l.n) f[MSG_AT * n + i] = (int32_t)(b + 1);
    }
    return left;
}

/* perf script record headers: "comm pid/tid [cpu] sec.frac: rest", cut as the parser's regexes cut
 * them (ingest/formats/perf_script.py: the leftmost TIME_TOKEN, then PRE on the text before it).
 * For lines [0, n) of col: code[i] 1 (read), 0 (no time token: an untimed header) or 255 (not
 * ASCII, or a header the regexes must judge: PRE does not match, a number does not fit); for code
 * 1: p[i] (where the time token starts, its blank), comm_at[i] and comm_end[i] (-1: no comm;
 * the comm without the blanks around it), pid[i], tid[i] (tid_ok[i] 0: none), cpu[i]
 * (cpu_ok[i] 0: none), ts[i] (sec * 1e9 + the fraction's ns) and rest_at[i] (after the ':' that
 * ends the time). Returns how many rows were left to the regexes. */
int64_t at_perf_headers(const col_t *col, int64_t n, uint8_t *code, int32_t *p, int32_t *comm_at,
                        int32_t *comm_end, int64_t *pid, int64_t *tid, uint8_t *tid_ok, int32_t *cpu,
                        uint8_t *cpu_ok, int64_t *ts, int32_t *rest_at, int64_t max_seconds) {
    int64_t left = 0;
    for (int64_t i = 0; i < n; i++) {
        code[i] = 255; p[i] = -1; comm_at[i] = -1; comm_end[i] = -1; pid[i] = 0; tid[i] = 0; tid_ok[i] = 0;
        cpu[i] = 0; cpu_ok[i] = 0; ts[i] = 0; rest_at[i] = -1;
        if (!is_valid(col, i)) { code[i] = 0; continue; }
        line_t l = line_of(col, i);
        if (!is_ascii(l.p, l.n) || l.n > INT32_MAX) { left++; continue; }
        /* TIME_TOKEN = \s\d+\.\d{6,9}:(?:\s|$), leftmost */
        int64_t t = -1, dot = 0, colon = 0;
        for (int64_t k = 0; k + 1 < l.n && t < 0; k++) {
            if (!is_s(l.p[k]) || !is_d(l.p[k + 1])) continue;
            int64_t a = skip_d(l, k + 1);
            if (at(l, a) != '.') continue;
            int64_t b = skip_d(l, a + 1);
            if (b - a - 1 < 6 || b - a - 1 > 9 || at(l, b) != ':') continue;
            if (b + 1 < l.n && !is_s(l.p[b + 1])) continue;
            t = k; dot = a; colon = b;
        }
        if (t < 0) { code[i] = 0; continue; }
        /* PRE = ^\s*(?:(?P<comm>.*?)\s+)?(?P<pid>-?\d+)(?:/(?P<tid>-?\d+))?(?:\s+\[(?P<cpu>\d+)\])?\s*$ on
         * line[0, t), read from its end: what follows the pid is fixed, so the shortest comm is the
         * text before the blanks before the pid */
        int64_t e = t;
        while (e > 0 && is_s(l.p[e - 1])) e--;
        int64_t c_lo = -1, c_hi = -1;
        if (e > 0 && l.p[e - 1] == ']') {
            int64_t j = e - 2;
            while (j >= 0 && is_d(l.p[j])) j--;
            if (j < 0 || l.p[j] != '[' || j == e - 2 || j == 0 || !is_s(l.p[j - 1])) { left++; continue; }
            c_lo = j + 1; c_hi = e - 1;
            e = j;
            while (e > 0 && is_s(l.p[e - 1])) e--;
        }
        int64_t d1 = e;                      /* the last number: the tid after a '/', else the pid */
        while (d1 > 0 && is_d(l.p[d1 - 1])) d1--;
        if (d1 == e) { left++; continue; }
        int64_t n1 = d1 > 0 && l.p[d1 - 1] == '-' ? d1 - 1 : d1;
        int64_t s = n1, p_lo = n1, p_hi = e, tid_lo = -1;
        if (n1 > 0 && l.p[n1 - 1] == '/') {
            tid_lo = n1;
            p_hi = n1 - 1;
            int64_t d0 = p_hi;
            while (d0 > 0 && is_d(l.p[d0 - 1])) d0--;
            if (d0 == p_hi) { left++; continue; }
            p_lo = s = d0 > 0 && l.p[d0 - 1] == '-' ? d0 - 1 : d0;
        }
        int64_t lead = skip_s(l, 0);
        if (s > lead && !is_s(l.p[s - 1])) { left++; continue; }
        int ok = 1, ok2 = 1, ok3 = 1, ok4 = 1, ok5 = 1;
        int neg = l.p[p_lo] == '-';
        int64_t v = digits_i64(l, p_lo + neg, p_hi, &ok);
        int64_t w = 0;
        if (tid_lo >= 0) {
            int negt = l.p[tid_lo] == '-';
            w = digits_i64(l, tid_lo + negt, e, &ok2);
            if (negt) w = -w;
        }
        int64_t c = c_lo >= 0 ? digits_i64(l, c_lo, c_hi, &ok3) : 0;
        int64_t sec = digits_i64(l, t + 1, dot, &ok4);
        int64_t frac = digits_i64(l, dot + 1, colon, &ok5);
        if (!(ok && ok2 && ok3 && ok4 && ok5) || c > INT32_MAX || sec >= max_seconds) { left++; continue; }
        for (int64_t k = colon - dot - 1; k < 9; k++) frac *= 10;
        code[i] = 1;
        p[i] = (int32_t)t;
        if (s > lead) {
            int64_t ce = s;
            while (ce > lead && is_s(l.p[ce - 1])) ce--;
            comm_at[i] = (int32_t)lead;
            comm_end[i] = (int32_t)ce;
        }
        pid[i] = neg ? -v : v;
        tid[i] = w; tid_ok[i] = tid_lo >= 0;
        cpu[i] = (int32_t)c; cpu_ok[i] = c_lo >= 0;
        ts[i] = sec * 1000000000LL + frac;
        rest_at[i] = (int32_t)(colon + 1);
    }
    return left;
}

/* ---------------------------------------------------------------------------------------------
 * Line families: the header of a log line's body as the log engine's FAMILIES read it
 * (ingest/formats/logs/grammar.py): a line belongs to the first family whose test matches, and
 * that family's prefix regex reads its fields. One pass per body here, in the regexes' order:
 *
 *   c10      ^(?:\[rank\d+\]:)?\[[FEWIV](?:\d{3,4} \d\d:| \w)
 *   elastic  ^(?:\[rank\d+\]:)?[DIWEC]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+
 *   usdt     ^USDT:\d{4}-
 *   dated    ^\[?\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d
 *   syslog   ^(?:Jan|...|Dec) [ \d]\d \d\d:\d\d:\d\d \S+
 *   pylog    ^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:
 *
 * and each family's prefix (see FAMILIES there) as a backtracking matcher would take it,
 * leftmost-first. Only ASCII bodies are read (the regexes' \d, \s and \w are Unicode's, which on
 * ASCII are the ASCII classes); a body that is not ASCII, whose test matches while its prefix does
 * not, whose number does not fit, or whose text would need escaping in the JSON attrs is left to
 * the regexes (code 255).
 */
enum { FAM_NONE = 0, FAM_C10, FAM_ELASTIC, FAM_USDT, FAM_DATED, FAM_SYSLOG, FAM_PYLOG };
/* severities, the engine's SEVERITY values: 0 none */
enum { SV_NONE = 0, SV_CRIT, SV_ERROR, SV_WARNING, SV_INFO, SV_DEBUG, SV_NOTICE };
enum { UNSURE = 255 };

/* The outputs of at_log_heads, one slot per row each (the caller allocates them). The *_ok bytes
 * say whether the value beside them is there (null otherwise). Spans are byte offsets into the
 * body: [f_at, f_end) the file (c10, elastic, usdt), the program (syslog) or the logger (pylog);
 * name_end: where c10's name ends (the file without its last ".ext"); [h_at, h_end) syslog's host. */
typedef struct {
    uint8_t *code, *sev;
    int32_t *msg_at, *f_at, *f_end, *name_end, *h_at, *h_end;
    int64_t *rank, *pid, *tid, *fline, *fns, *res, *off;
    int32_t *y, *mo, *d, *hh, *mi, *ss;
    uint8_t *rank_ok, *pid_ok, *tid_ok, *y_ok, *md_ok, *hms_ok, *fns_ok, *res_ok, *off_ok;
} heads_t;

static inline int fixed_d(line_t l, int64_t i, int k) {     /* k digits at i */
    for (int j = 0; j < k; j++) if (!is_d(at(l, i + j))) return 0;
    return 1;
}

static inline int one_of(int c, const char *set) { return c > 0 && strchr(set, c) != NULL; }

static inline int32_t num2(line_t l, int64_t i) { return (l.p[i] - '0') * 10 + (l.p[i + 1] - '0'); }

static int32_t num_k(line_t l, int64_t i, int k) {
    int32_t v = 0;
    for (int j = 0; j < k; j++) v = v * 10 + (l.p[i + j] - '0');
    return v;
}

/* \d\d:\d\d:\d\d at i */
static inline int hms_at(line_t l, int64_t i) {
    return fixed_d(l, i, 2) && at(l, i + 2) == ':' && fixed_d(l, i + 3, 2) && at(l, i + 5) == ':' && fixed_d(l, i + 6, 2);
}

/* a byte JSON writes escaped (or that the readers leave to the regexes' encoder) */
static inline int json_plain(int c) { return c >= 0x20 && c != '"' && c != '\\' && c != 0x7f; }

static int json_plain_span(line_t l, int64_t a, int64_t b) {
    for (int64_t i = a; i < b; i++) if (!json_plain(l.p[i])) return 0;
    return 1;
}

/* digits [a, b) into *v (1), or 0 when they do not fit an int64 */
static int fit_i64(line_t l, int64_t a, int64_t b, int64_t *v) {
    int ok;
    *v = digits_i64(l, a, b, &ok);
    return ok;
}

/* (?:\[rank(\d+)\]:)? at the start: where the rest begins, and the rank's digits (a0 = -1: none).
 * When the prefix is there the regexes take it: without it they would read "[" then "r", which no
 * family's next token accepts. */
static int64_t rank_prefix(line_t l, int64_t *a0, int64_t *a1) {
    *a0 = -1;
    if (!starts(l, 0, "[rank", 5)) return 0;
    int64_t e = skip_d(l, 5);
    if (e == 5 || at(l, e) != ']' || at(l, e + 1) != ':') return 0;
    *a0 = 5; *a1 = e;
    return e + 2;
}

/* [^\s:\]]+ from q, then ":" \d+ "\]" " ?": the file's end, fline's digits, the message start; 0
 * when it does not match */
static int file_line(line_t l, int64_t q, int64_t *fe, int64_t *d0, int64_t *d1, int64_t *msg) {
    int64_t e = q;
    for (int c = at(l, e); c >= 0 && !is_s(c) && c != ':' && c != ']'; c = at(l, ++e)) {}
    if (e == q || at(l, e) != ':') return 0;
    int64_t x = skip_d(l, e + 1);
    if (x == e + 1 || at(l, x) != ']') return 0;
    *fe = e; *d0 = e + 1; *d1 = x;
    *msg = x + 1 + (at(l, x + 1) == ' ');
    return 1;
}

static int sev_letter(int c) {
    switch (c) {
    case 'F': case 'C': return SV_CRIT;
    case 'E': return SV_ERROR;
    case 'W': return SV_WARNING;
    case 'I': return SV_INFO;
    case 'V': case 'D': return SV_DEBUG;
    default: return SV_NONE;
    }
}

/* the level word at i, in the order of the regexes' alternation: its severity and length */
static const struct { const char *w; int k, sv; } LEVELS[] = {
    {"DEBUG", 5, SV_DEBUG}, {"INFO", 4, SV_INFO}, {"WARNING", 7, SV_WARNING}, {"WARN", 4, SV_WARNING},
    {"ERROR", 5, SV_ERROR}, {"CRITICAL", 8, SV_CRIT}, {"FATAL", 5, SV_CRIT}, {"NOTICE", 6, SV_NOTICE}};

static int level_at(line_t l, int64_t i, int pylog, int *k) {
    for (size_t j = 0; j < sizeof LEVELS / sizeof LEVELS[0]; j++) {
        /* pylog's alternation: DEBUG|INFO|WARNING|ERROR|CRITICAL */
        if (pylog && (LEVELS[j].sv == SV_NOTICE || !strcmp(LEVELS[j].w, "WARN") || !strcmp(LEVELS[j].w, "FATAL")))
            continue;
        if (starts(l, i, LEVELS[j].w, (size_t)LEVELS[j].k)) { *k = LEVELS[j].k; return LEVELS[j].sv; }
    }
    return SV_NONE;
}

static const char MONTHS[] = "JanFebMarAprMayJunJulAugSepOctNovDec";

static int month_at(line_t l) {
    if (l.n < 3) return 0;
    for (int m = 0; m < 12; m++) if (memcmp(l.p, MONTHS + 3 * m, 3) == 0) return m + 1;
    return 0;
}

static inline void set_hms(const heads_t *o, int64_t i, line_t l, int64_t q) {
    o->hh[i] = num2(l, q); o->mi[i] = num2(l, q + 3); o->ss[i] = num2(l, q + 6); o->hms_ok[i] = 1;
}

/* yyyy-mm-dd at q (already tested) */
static inline void set_date(const heads_t *o, int64_t i, line_t l, int64_t q) {
    o->y[i] = num_k(l, q, 4); o->mo[i] = num2(l, q + 5); o->d[i] = num2(l, q + 8);
    o->y_ok[i] = o->md_ok[i] = 1;
}

/* One body: its family and fields into row i of o. */
static int log_head(line_t l, const heads_t *o, int64_t i) {
    int64_t r0 = -1, r1 = 0, fe = 0, d0 = 0, d1 = 0, msg = 0;
    int64_t p = rank_prefix(l, &r0, &r1);
    /* c10 */
    if (at(l, p) == '[' && one_of(at(l, p + 1), "FEWIV")) {
        int64_t q = p + 2, k = skip_d(l, q) - q;
        int test = ((k == 3 || k == 4) && at(l, q + k) == ' ' && fixed_d(l, q + k + 1, 2) && at(l, q + k + 3) == ':')
                   || (at(l, q) == ' ' && w_ascii(at(l, q + 1)));
        if (test) {
            int64_t f0;
            if ((k == 3 || k == 4) && at(l, q + k) == ' ' && hms_at(l, q + k + 1) && at(l, q + k + 9) == '.') {
                int64_t m0 = q + k + 10, m = skip_d(l, m0) - m0;
                if (m < 6 || m > 9 || at(l, m0 + m) != ' ') return UNSURE;
                o->mo[i] = num_k(l, q, (int)k - 2); o->d[i] = num2(l, q + k - 2); o->md_ok[i] = 1;
                set_hms(o, i, l, q + k + 1);
                f0 = m0 + m + 1;
            } else if (at(l, q) == ' ') {
                f0 = q + 1;
            } else {
                return UNSURE;
            }
            if (!file_line(l, f0, &fe, &d0, &d1, &msg) || !json_plain_span(l, f0, fe)) return UNSURE;
            if (!fit_i64(l, d0, d1, &o->fline[i])) return UNSURE;
            if (r0 >= 0) { if (!fit_i64(l, r0, r1, &o->rank[i])) return UNSURE; o->rank_ok[i] = 1; }
            /* the name: the file less \.\w+$ (the last dot, when only word bytes follow it) */
            int64_t ne = fe;
            for (int64_t j = fe - 1; j >= f0; j--) {
                if (l.p[j] == '.') { if (j + 1 < fe) ne = j; break; }
                if (!w_ascii(l.p[j])) break;
            }
            o->sev[i] = (uint8_t)sev_letter(l.p[p + 1]);
            o->f_at[i] = (int32_t)f0; o->f_end[i] = (int32_t)fe; o->name_end[i] = (int32_t)ne;
            o->res[i] = 1000000000; o->res_ok[i] = 1;
            o->msg_at[i] = (int32_t)msg;
            return FAM_C10;
        }
    }
    /* elastic */
    if (one_of(at(l, p), "DIWEC") && fixed_d(l, p + 1, 4) && at(l, p + 5) == ' ' && hms_at(l, p + 6)
        && at(l, p + 14) == '.' && fixed_d(l, p + 15, 6) && at(l, p + 21) == ' ') {
        int64_t q = p + 22, e = skip_d(l, q);
        if (e > q && at(l, e) == ' ') {
            /* the prefix: (\S+?):(\d+)\] ?, the shortest file that lets the rest match */
            int64_t f0 = e + 1, k = f0;
            if (at(l, k) < 0 || is_s(at(l, k))) return UNSURE;
            for (k = f0 + 1;; k++) {
                int c = at(l, k);
                if (c < 0 || is_s(c)) return UNSURE;
                if (c == ':') {
                    int64_t x = skip_d(l, k + 1);
                    if (x > k + 1 && at(l, x) == ']') { d0 = k + 1; d1 = x; msg = x + 1 + (at(l, x + 1) == ' '); break; }
                }
            }
            fe = k;
            if (!json_plain_span(l, f0, fe) || !fit_i64(l, d0, d1, &o->fline[i])) return UNSURE;
            if (!fit_i64(l, q, e, &o->pid[i])) return UNSURE;
            o->pid_ok[i] = 1;
            if (r0 >= 0) { if (!fit_i64(l, r0, r1, &o->rank[i])) return UNSURE; o->rank_ok[i] = 1; }
            o->sev[i] = (uint8_t)sev_letter(l.p[p]);
            o->mo[i] = num2(l, p + 1); o->d[i] = num2(l, p + 3); o->md_ok[i] = 1;
            set_hms(o, i, l, p + 6);
            o->fns[i] = (int64_t)num_k(l, p + 15, 3) * 1000000; o->fns_ok[i] = 1;
            o->res[i] = 1000000; o->res_ok[i] = 1;
            o->f_at[i] = (int32_t)f0; o->f_end[i] = (int32_t)fe;
            o->msg_at[i] = (int32_t)msg;
            return FAM_ELASTIC;
        }
    }
    /* usdt */
    if (starts(l, 0, "USDT:", 5) && fixed_d(l, 5, 4) && at(l, 9) == '-') {
        if (!(fixed_d(l, 10, 2) && at(l, 12) == '-' && fixed_d(l, 13, 2) && at(l, 15) == ' ' && hms_at(l, 16)
              && at(l, 24) == ' ')) return UNSURE;
        int64_t e = skip_d(l, 25);
        if (e == 25 || at(l, e) != ':') return UNSURE;
        int64_t t = skip_d(l, e + 1);
        if (t == e + 1 || at(l, t) != ' ') return UNSURE;
        if (!file_line(l, t + 1, &fe, &d0, &d1, &msg) || !json_plain_span(l, t + 1, fe)) return UNSURE;
        if (!fit_i64(l, d0, d1, &o->fline[i]) || !fit_i64(l, 25, e, &o->pid[i]) || !fit_i64(l, e + 1, t, &o->tid[i]))
            return UNSURE;
        o->pid_ok[i] = o->tid_ok[i] = 1;
        set_date(o, i, l, 5);
        set_hms(o, i, l, 16);
        o->res[i] = 1000000000; o->res_ok[i] = 1;
        o->f_at[i] = (int32_t)(t + 1); o->f_end[i] = (int32_t)fe;
        o->msg_at[i] = (int32_t)msg;
        return FAM_USDT;
    }
    /* dated: past the date and time every piece is optional, so the greedy path is the match */
    {
        int64_t q = at(l, 0) == '[';
        if (fixed_d(l, q, 4) && at(l, q + 4) == '-' && fixed_d(l, q + 5, 2) && at(l, q + 7) == '-'
            && fixed_d(l, q + 8, 2) && (at(l, q + 10) == ' ' || at(l, q + 10) == 'T' || at(l, q + 10) == '_')
            && hms_at(l, q + 11)) {
            set_date(o, i, l, q);
            set_hms(o, i, l, q + 11);
            int64_t e = q + 19;
            o->res[i] = 1000000000; o->res_ok[i] = 1;
            if ((at(l, e) == '.' || at(l, e) == ',') && is_d(at(l, e + 1))) {
                int k = 0;
                int64_t v = 0;
                while (k < 9 && is_d(at(l, e + 1 + k))) { v = v * 10 + (l.p[e + 1 + k] - '0'); k++; }
                int64_t scale = 1;
                for (int j = k; j < 9; j++) scale *= 10;
                o->fns[i] = v * scale; o->fns_ok[i] = 1;
                o->res[i] = scale;
                e += 1 + k;
            }
            if (at(l, e) == 'Z') {
                o->off[i] = 0; o->off_ok[i] = 1; e++;
            } else if ((at(l, e) == '+' || at(l, e) == '-') && fixed_d(l, e + 1, 2)) {
                int64_t c = e + 3 + (at(l, e + 3) == ':');
                if (fixed_d(l, c, 2)) {
                    o->off[i] = (at(l, e) == '-' ? -1 : 1) * ((int64_t)num2(l, e + 1) * 3600 + (int64_t)num2(l, c) * 60);
                    o->off_ok[i] = 1;
                    e = c + 2;
                }
            }
            if (at(l, e) == ']') e++;
            while (at(l, e) == ' ' || at(l, e) == ':' || at(l, e) == '|' || at(l, e) == '-') e++;
            int k, sv = level_at(l, e + (at(l, e) == '['), 0, &k);
            if (sv != SV_NONE) {
                e += (at(l, e) == '[') + k;
                if (at(l, e) == ']') e++;
                o->sev[i] = (uint8_t)sv;
            }
            while (at(l, e) == ' ' || at(l, e) == ':' || at(l, e) == '|' || at(l, e) == '-') e++;
            o->msg_at[i] = (int32_t)e;
            return FAM_DATED;
        }
    }
    /* syslog */
    {
        int mon = month_at(l);
        if (mon && at(l, 3) == ' ' && (at(l, 4) == ' ' || is_d(at(l, 4))) && is_d(at(l, 5)) && at(l, 6) == ' '
            && hms_at(l, 7) && at(l, 15) == ' ') {
            int64_t h0 = 16, h1 = h0;
            while (at(l, h1) >= 0 && !is_s(at(l, h1))) h1++;
            if (h1 > h0 && at(l, h1) == ' ') {
                int64_t g0 = h1 + 1, g1 = g0;
                for (int c = at(l, g1); c >= 0 && !is_s(c) && c != ':' && c != '['; c = at(l, ++g1)) {}
                if (g1 == g0) return UNSURE;
                int64_t e = g1;
                if (at(l, e) == '[') {
                    int64_t x = skip_d(l, e + 1);
                    if (x == e + 1 || at(l, x) != ']' || !fit_i64(l, e + 1, x, &o->pid[i])) return UNSURE;
                    o->pid_ok[i] = 1;
                    e = x + 1;
                }
                if (at(l, e) != ':' || !json_plain_span(l, g0, g1)) return UNSURE;
                e++;
                if (at(l, e) == ' ') e++;
                o->mo[i] = mon; o->d[i] = (at(l, 4) == ' ' ? 0 : (l.p[4] - '0') * 10) + (l.p[5] - '0');
                o->md_ok[i] = 1;
                set_hms(o, i, l, 7);
                o->res[i] = 1000000000; o->res_ok[i] = 1;
                o->h_at[i] = (int32_t)h0; o->h_end[i] = (int32_t)h1;
                o->f_at[i] = (int32_t)g0; o->f_end[i] = (int32_t)g1;
                o->msg_at[i] = (int32_t)e;
                return FAM_SYSLOG;
            }
        }
    }
    /* pylog */
    {
        int k, sv = level_at(l, 0, 1, &k);
        if (sv != SV_NONE && at(l, k) == ':') {
            int64_t e = k + 1;
            while (w_ascii(at(l, e)) || at(l, e) == '.') e++;
            if (at(l, e) == ':') {
                o->sev[i] = (uint8_t)sv;
                o->f_at[i] = (int32_t)(k + 1); o->f_end[i] = (int32_t)e;
                o->msg_at[i] = (int32_t)(e + 1);
                return FAM_PYLOG;
            }
        }
    }
    return FAM_NONE;
}

/* For the bodies [0, n) of col: each one's family (heads_t.code: FAM_*, or 255 where the regexes
 * decide) and its fields. Null bodies are FAM_NONE. Returns the number left to the regexes. */
int64_t at_log_heads(const col_t *col, int64_t n, void *const *outs) {
    heads_t o;
    memcpy(&o, outs, sizeof o);
    int64_t left = 0;
    for (int64_t i = 0; i < n; i++) {
        o.sev[i] = 0;
        o.msg_at[i] = o.f_at[i] = o.f_end[i] = o.name_end[i] = o.h_at[i] = o.h_end[i] = 0;
        o.rank[i] = o.pid[i] = o.tid[i] = o.fline[i] = o.fns[i] = o.res[i] = o.off[i] = 0;
        o.y[i] = o.mo[i] = o.d[i] = o.hh[i] = o.mi[i] = o.ss[i] = 0;
        o.rank_ok[i] = o.pid_ok[i] = o.tid_ok[i] = o.y_ok[i] = o.md_ok[i] = o.hms_ok[i] = 0;
        o.fns_ok[i] = o.res_ok[i] = o.off_ok[i] = 0;
        o.code[i] = FAM_NONE;
        if (!is_valid(col, i)) continue;
        line_t l = line_of(col, i);
        if (l.n > INT32_MAX || !is_ascii(l.p, l.n)) { o.code[i] = UNSURE; left++; continue; }
        int c = log_head(l, &o, i);
        o.code[i] = (uint8_t)c;
        if (c == UNSURE) left++;
    }
    return left;
}

/* ---------------------------------------------------------------------------------------------
 * Raw dmesg records: what the kernel-log parser's RAW grammar (ingest/formats/kernel/dmesg.py)
 * reads from a line,
 *
 *   ^[+ -]?(?:<(\d{1,3})>)?(?:(\w+)\s*:\s*(emerg|alert|crit|err|warn|notice|info|debug)\s*: )?
 *    \[\s*(\d+)\.(\d{6,9})\] ?
 *
 * Each optional group, where it starts to match and then fails, leaves a byte that nothing after
 * it accepts, so the match is the path that takes every group that matches. The stamp in ns:
 * seconds x 10^9 + the fraction; no time from 9e9 s on (MAX_SECONDS). A record whose seconds
 * lie between 4e9 and 9e9 is left to the regexes (the vectorised path reads six-digit stamps as
 * a float, exact below that), and so is any line where a byte the match looks at is not ASCII,
 * and any line that is no record but has a "[" after its start (its prefix sets the severity).
 */
/* the byte at i, noting in *far the furthest byte looked at (for the ASCII check) */
static inline int look(line_t l, int64_t i, int64_t *far) {
    if (i > *far) *far = i;
    return at(l, i);
}

static int64_t look_d(line_t l, int64_t i, int64_t *far) {
    while (is_d(look(l, i, far))) i++;
    return i;
}

static const char *const DECODE_LEVEL_NAMES[] = {"emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"};

/* the level at i (1 + its index in DECODE_LEVEL_NAMES, 0 none) and its length */
static int decode_level(line_t l, int64_t i, int64_t *k) {
    for (int j = 0; j < 8; j++) {
        size_t n = strlen(DECODE_LEVEL_NAMES[j]);
        if (starts(l, i, DECODE_LEVEL_NAMES[j], n)) { *k = (int64_t)n; return j + 1; }
    }
    return 0;
}

/* One line: 1 (a record: the fields), 0 (not one) or UNSURE. *far: the last byte looked at. */
static int dmesg_raw(line_t l, int64_t *ts, uint8_t *ts_ok, int32_t *msg_at, int32_t *prio, uint8_t *prio_ok,
                     uint8_t *lvl, int64_t *far) {
    int64_t p = 0, e, k;
    *far = 0;
    if (one_of(look(l, 0, far), "+ -")) p = 1;
    if (look(l, p, far) == '<') {
        e = look_d(l, p + 1, far);
        if (e > p + 1 && e - p - 1 <= 3 && look(l, e, far) == '>') {
            *prio = num_k(l, p + 1, (int)(e - p - 1)); *prio_ok = 1;
            p = e + 1;
        }
    }
    if (w_ascii(look(l, p, far))) {
        e = p;
        while (w_ascii(look(l, e, far))) e++;
        while (is_s(look(l, e, far))) e++;
        if (look(l, e, far) != ':') return 0;
        e++;
        while (is_s(look(l, e, far))) e++;
        look(l, e + 6, far);                     /* (the longest level, "notice", then its next byte) */
        int lv = decode_level(l, e, &k);
        if (!lv) return 0;
        e += k;
        while (is_s(look(l, e, far))) e++;
        if (look(l, e, far) != ':' || look(l, e + 1, far) != ' ') return 0;
        *lvl = (uint8_t)lv;
        p = e + 2;
    }
    if (look(l, p, far) != '[') return 0;
    e = p + 1;
    while (is_s(look(l, e, far))) e++;
    int64_t s0 = e;
    e = look_d(l, s0, far);
    if (e == s0 || look(l, e, far) != '.') return 0;
    int64_t f0 = e + 1, f1 = look_d(l, f0, far);
    if (f1 - f0 < 6 || f1 - f0 > 9 || look(l, f1, far) != ']') return 0;
    int fits;
    int64_t sec = digits_i64(l, s0, e, &fits);
    if (fits && sec >= 4000000000LL && sec < 9000000000LL) return UNSURE;
    if (fits && sec < 9000000000LL) {
        int64_t frac = num_k(l, f0, (int)(f1 - f0));
        for (int64_t j = f1 - f0; j < 9; j++) frac *= 10;
        *ts = sec * 1000000000LL + frac; *ts_ok = 1;
    }
    *msg_at = (int32_t)(f1 + 1 + (look(l, f1 + 1, far) == ' '));
    return 1;
}

int64_t at_dmesg_raw(const col_t *col, int64_t n, uint8_t *code, int64_t *ts, uint8_t *ts_ok, int32_t *msg_at,
                     int32_t *prio, uint8_t *prio_ok, uint8_t *lvl) {
    int64_t left = 0;
    for (int64_t i = 0; i < n; i++) {
        ts[i] = 0; ts_ok[i] = 0; msg_at[i] = 0; prio[i] = 0; prio_ok[i] = 0; lvl[i] = 0;
        code[i] = 0;
        if (!is_valid(col, i)) continue;
        line_t l = line_of(col, i);
        int64_t far = 0;
        int c = l.n > INT32_MAX ? UNSURE : dmesg_raw(l, &ts[i], &ts_ok[i], &msg_at[i], &prio[i], &prio_ok[i], &lvl[i], &far);
        if (c != UNSURE && !is_ascii(l.p, far + 1 < l.n ? far + 1 : l.n)) c = UNSURE;
        if (c == 0 && l.n > 1 && memchr(l.p + 1, '[', (size_t)(l.n - 1))) c = UNSURE;
        if (c == 0) { ts_ok[i] = 0; msg_at[i] = 0; prio_ok[i] = 0; lvl[i] = 0; }
        code[i] = (uint8_t)c;
        if (c == UNSURE) left++;
    }
    return left;
}

/* ---------------------------------------------------------------------------------------------
 * Wrappers that launchers put before a process's lines: the log engine's WRAP
 * (ingest/formats/logs/grammar.py),
 *
 *   ^(?:> )*(?:\((?P<ray_actor>\w[\w.]*) pid=(?P<ray_pid>\d+)(?:, ip=[\d.]+)?\) )?
 *    (?:\[(?P<mpi_job>\d+),(?P<mpi_rank>\d+)\]<std(?:out|err)>:)?(?:\[default(?P<tee>\d+)\]:)?
 *    (?:(?P<srun>\d{1,6}): )?(?:\[rank(?P<wrank>\d+)\]: )?
 *
 * and Ray's " [repeated (\d+)x across cluster]" at the end of the rest. Every group is optional
 * and the next one starts with a byte the one before cannot end on, so the regex's match takes
 * each group that matches where it stands, in order (a group that starts to match and fails takes
 * nothing). A line where a byte the match looked at is not ASCII is left to the regexes (\d and
 * \w are Unicode's there).
 */
enum { WG_ACTOR, WG_RPID, WG_JOB, WG_MRANK, WG_TEE, WG_SRUN, WG_WRANK, WG_N };

static inline int lstarts(line_t l, int64_t i, const char *s, size_t k, int64_t *far) {
    int64_t last = i + (int64_t)k - 1 < l.n ? i + (int64_t)k - 1 : l.n - 1;
    if (last > *far) *far = last;
    return starts(l, i, s, k);
}

/* "[" digits tail at i (e.g. "[default" digits "]:"): the digits' span and where the group ends, or 0 */
static int bracket_num(line_t l, int64_t i, const char *head, size_t hk, const char *tail, size_t tk,
                       int64_t *d0, int64_t *d1, int64_t *end, int64_t *far) {
    if (!lstarts(l, i, head, hk, far)) return 0;
    int64_t a = i + (int64_t)hk, b = look_d(l, a, far);
    if (b == a || !lstarts(l, b, tail, tk, far)) return 0;
    *d0 = a; *d1 = b; *end = b + (int64_t)tk;
    return 1;
}

/* One line: the groups' spans (g0, g1: -1 where a group took nothing), where the rest starts
 * and its length in bytes when Ray's suffix ends it (-1: to the line's end; *rep: the suffix's
 * count, *rep_ok 0 when the count does not fit an int32). Returns 1 when a group or the suffix matched, 0 when not, UNSURE. */
static int wrap_line(line_t l, int32_t *g0, int32_t *g1, int32_t *body_at, int32_t *body_len, int32_t *rep,
                     uint8_t *rep_ok) {
    int64_t far = 0, q = 0, a, b, c, d, e;
    for (int g = 0; g < WG_N; g++) g0[g] = g1[g] = -1;
    *body_len = -1; *rep = 0; *rep_ok = 0;
    int hit = 0;
    while (look(l, q, &far) == '>' && look(l, q + 1, &far) == ' ') q += 2;
    if (look(l, q, &far) == '(' && w_ascii(look(l, q + 1, &far))) {
        a = q + 1;
        b = a + 1;
        while (w_ascii(look(l, b, &far)) || at(l, b) == '.') b++;
        if (lstarts(l, b, " pid=", 5, &far)) {
            c = b + 5;
            d = look_d(l, c, &far);
            e = d;
            if (d > c && lstarts(l, d, ", ip=", 5, &far)) {
                int64_t r = d + 5, r1 = r;
                while (is_d(look(l, r1, &far)) || at(l, r1) == '.') r1++;
                if (r1 > r && lstarts(l, r1, ") ", 2, &far)) e = r1;
            }
            if (d > c && lstarts(l, e, ") ", 2, &far)) {
                g0[WG_ACTOR] = (int32_t)a; g1[WG_ACTOR] = (int32_t)b;
                g0[WG_RPID] = (int32_t)c; g1[WG_RPID] = (int32_t)d;
                q = e + 2;
            }
        }
    }
    if (look(l, q, &far) == '[') {
        if (is_d(look(l, q + 1, &far))) {
            a = q + 1;
            b = look_d(l, a, &far);
            if (look(l, b, &far) == ',' && is_d(look(l, b + 1, &far))) {
                c = b + 1;
                d = look_d(l, c, &far);
                if (lstarts(l, d, "]<std", 5, &far)
                    && (lstarts(l, d + 5, "out>:", 5, &far) || lstarts(l, d + 5, "err>:", 5, &far))) {
                    g0[WG_JOB] = (int32_t)a; g1[WG_JOB] = (int32_t)b;
                    g0[WG_MRANK] = (int32_t)c; g1[WG_MRANK] = (int32_t)d;
                    q = d + 10;
                }
            }
        }
        if (bracket_num(l, q, "[default", 8, "]:", 2, &a, &b, &e, &far)) {
            g0[WG_TEE] = (int32_t)a; g1[WG_TEE] = (int32_t)b;
            q = e;
        }
    }
    a = q;
    b = look_d(l, a, &far);
    if (b > a && b - a <= 6 && lstarts(l, b, ": ", 2, &far)) {
        g0[WG_SRUN] = (int32_t)a; g1[WG_SRUN] = (int32_t)b;
        q = b + 2;
    }
    if (bracket_num(l, q, "[rank", 5, "]: ", 3, &a, &b, &e, &far)) {
        g0[WG_WRANK] = (int32_t)a; g1[WG_WRANK] = (int32_t)b;
        q = e;
    }
    if (!is_ascii(l.p, far + 1 < l.n ? far + 1 : l.n)) return UNSURE;
    for (int g = 0; g < WG_N; g++) hit |= g0[g] >= 0;
    *body_at = (int32_t)q;
    /* " [repeated N x across cluster]" ends the rest: read from the end back */
    static const char TAIL[] = "x across cluster]", HEAD[] = " [repeated ";
    const int64_t tk = (int64_t)sizeof TAIL - 1, hk = (int64_t)sizeof HEAD - 1;
    if (l.n - q >= tk + 1 + hk && memcmp(l.p + l.n - tk, TAIL, (size_t)tk) == 0) {
        int64_t de = l.n - tk, ds = de;
        while (ds > q && l.p[ds - 1] < 0x80 && is_d(l.p[ds - 1])) ds--;
        if (ds > q && l.p[ds - 1] >= 0x80) return UNSURE;
        if (ds < de && ds - hk >= q && memcmp(l.p + ds - hk, HEAD, (size_t)hk) == 0) {
            int ok = 1;
            int64_t v = digits_i64(l, ds, de, &ok);
            if (ok && v <= INT32_MAX) { *rep = (int32_t)v; *rep_ok = 1; }
            *body_len = (int32_t)(ds - hk - q);
            hit = 1;
        }
    }
    return hit;
}

/* For the lines [0, n) of col: code (0 no wrapper, 1 one read, UNSURE where the regexes decide),
 * where the rest starts and its length (bytes; -1: to the line's end, else Ray's suffix ends it),
 * and the suffix's count (rep, rep_ok); with g0 and g1 (else NULL) the start and end of each group
 * (WG_N arrays of n, -1 where the group took nothing), written on the rows of code 1 only (most
 * logs have no wrapper: their rows of these, the bulk of the output, are never touched).
 * Null lines are code 0. Returns the number left to the regexes. */
int64_t at_wraps(const col_t *col, int64_t n, uint8_t *code, int32_t *g0, int32_t *g1, int32_t *body_at,
                 int32_t *body_len, int32_t *rep, uint8_t *rep_ok) {
    int64_t left = 0;
    int32_t a[WG_N], b[WG_N];
    /* (the groups' spans are written for the lines with a wrapper only, code 1: the other rows of
       g0/g1 are left as they are, and the caller reads them only where code is 1) */
    for (int64_t i = 0; i < n; i++) {
        body_at[i] = 0; body_len[i] = -1; rep[i] = 0; rep_ok[i] = 0;
        code[i] = 0;
        if (!is_valid(col, i)) continue;
        line_t l = line_of(col, i);
        int c = l.n > INT32_MAX ? UNSURE : wrap_line(l, a, b, &body_at[i], &body_len[i], &rep[i], &rep_ok[i]);
        code[i] = (uint8_t)c;
        if (c == UNSURE) { left++; body_at[i] = 0; body_len[i] = -1; rep_ok[i] = 0; continue; }
        if (c == 1 && g0 != NULL)
            for (int g = 0; g < WG_N; g++) { g0[g * n + i] = a[g]; g1[g * n + i] = b[g]; }
    }
    return left;
}

/* ---------------------------------------------------------------------------------------------
 * The subsystem a kernel message names first: the kernel-log engine's SUBSYS
 * (ingest/formats/kernel/engine.py),
 *
 *   ^([A-Za-z][\w.\-/ ]{0,38}?)(?: \([^)]{1,40}\))?(?:\[\d+\])?:
 *
 * The name is lazy: the shortest name after which the rest matches, the rest tried in the
 * regex's order (both groups, the parenthesis alone, the pid alone, neither). A message that is
 * not all ASCII is left to the regex (\w is Unicode's there).
 */
static inline int subsys_c(int c) { return w_ascii(c) || c == '.' || c == '-' || c == '/' || c == ' '; }

/* " \([^)]{1,40}\)" at q: where it ends, or -1 */
static int64_t subsys_paren(line_t l, int64_t q) {
    if (at(l, q) != ' ' || at(l, q + 1) != '(') return -1;
    int64_t e = q + 2;
    while (e - q - 2 < 41 && at(l, e) >= 0 && at(l, e) != ')') e++;
    return (e > q + 2 && e - q - 2 <= 40 && at(l, e) == ')') ? e + 1 : -1;
}

/* "\[\d+\]" at q: where it ends, or -1 */
static int64_t subsys_pid(line_t l, int64_t q) {
    if (at(l, q) != '[') return -1;
    int64_t e = skip_d(l, q + 1);
    return (e > q + 1 && at(l, e) == ']') ? e + 1 : -1;
}

static inline int colon_sp(line_t l, int64_t q) { return q >= 0 && at(l, q) == ':' && at(l, q + 1) == ' '; }

/* code[i]: 1 (the name is [0, end[i])), 0 (no match), 255 (left to the regex) */
int64_t at_subsys(const col_t *col, int64_t n, uint8_t *code, int32_t *end) {
    int64_t left = 0;
    for (int64_t i = 0; i < n; i++) {
        code[i] = 0;
        end[i] = 0;
        if (!is_valid(col, i)) continue;
        line_t l = line_of(col, i);
        if (!is_ascii(l.p, l.n < 128 ? l.n : 128)) { code[i] = UNSURE; left++; continue; }   /* (the rest: below) */
        int c0 = at(l, 0);
        if (!((c0 >= 'A' && c0 <= 'Z') || (c0 >= 'a' && c0 <= 'z'))) continue;
        for (int64_t len = 1; len <= 39; len++) {
            if (len > 1 && !subsys_c(at(l, len - 1))) break;
            int next = at(l, len);
            if (next != ' ' && next != '[' && next != ':') continue;     /* (what every rest starts with) */
            int64_t g1 = subsys_paren(l, len), g2;
            if (g1 >= 0 && (((g2 = subsys_pid(l, g1)) >= 0 && colon_sp(l, g2)) || colon_sp(l, g1))) {
                code[i] = 1; end[i] = (int32_t)len; break;
            }
            if (((g2 = subsys_pid(l, len)) >= 0 && colon_sp(l, g2)) || colon_sp(l, len)) {
                code[i] = 1; end[i] = (int32_t)len; break;
            }
        }
        if (l.n > 128 && !is_ascii(l.p, l.n)) {     /* (a "[pid]" may reach past the 128 bytes) */
            code[i] = UNSURE; left++;
        }
    }
    return left;
}

/* ---------------------------------------------------------------------------------------------
 * Chrome trace events (ingest/formats/_kineto_stream.py): the elements of a JSON array body
 * ("ev, ev, ..." without the brackets) read into columns, as msgspec reads them into the Ev
 * struct of that module: ph (one of KINETO_PHASES; absent: ""), cat, name, pid, tid, ts, dur, id,
 * bp, s and args (its raw bytes). Only what msgspec is sure to read the same way is read here:
 * the body must be ASCII, every element an object, each of those keys at most once and of the
 * type Ev gives it (cat, name, bp, s: a string or null; pid, tid, id: an integer that fits int64,
 * a string or null; ts, dur: a number or null), strings without \u escapes (and those that become
 * columns without any escape), at most KT_DEPTH levels deep. Anything else (and any JSON error)
 * returns -1: the caller then decodes the body with msgspec, which also says whether it is JSON.
 * For element i: ph[i] (index into KINETO_PHASES), the spans (offset into the body, length; -1:
 * null) of cat, name, args and of pid/tid/id where they are strings, their ints where they are
 * integers (with ok bytes), ts/dur with ok bytes, and the element's own span (start, end). Returns the
 * number of elements, -2 when there are more than cap. */
#define KT_DEPTH 64
static const char *const KINETO_PHASES[] = {"X", "i", "I", "C", "s", "t", "f", "M", "B", "E", "b", "e", "n",
                                            "O", "P", "N", "D", "R", "c", ""};

typedef struct { const uint8_t *b, *p, *e; } kt_t;

static inline void kt_ws(kt_t *k) {
    while (k->p < k->e && (*k->p == ' ' || *k->p == '\n' || *k->p == '\r' || *k->p == '\t')) k->p++;
}

/* a string at k->p (its opening quote); *esc: it holds an escape. 0 when it is not one read here */
static int kt_string(kt_t *k, int *esc) {
    const uint8_t *p = k->p + 1, *e = k->e;
    *esc = 0;
    while (p < e) {
        uint8_t c = *p;
        if (c == '"') { k->p = p + 1; return 1; }
        if (c < 0x20 || c >= 0x80) return 0;
        if (c == '\\') {
            if (p + 1 >= e) return 0;
            uint8_t d = p[1];
            if (d != '"' && d != '\\' && d != '/' && d != 'b' && d != 'f' && d != 'n' && d != 'r' && d != 't')
                return 0;             /* (\u: left to msgspec) */
            *esc = 1;
            p += 2;
            continue;
        }
        p++;
    }
    return 0;
}

/* a number at k->p (JSON's grammar); *integral: no fraction, no exponent */
static int kt_number(kt_t *k, int *integral) {
    const uint8_t *p = k->p, *e = k->e;
    *integral = 1;
    if (p < e && *p == '-') p++;
    if (p >= e) return 0;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') { while (p < e && is_d(*p)) p++; }
    else return 0;
    if (p < e && *p == '.') {
        *integral = 0;
        p++;
        if (p >= e || !is_d(*p)) return 0;
        while (p < e && is_d(*p)) p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        *integral = 0;
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || !is_d(*p)) return 0;
        while (p < e && is_d(*p)) p++;
    }
    k->p = p;
    return 1;
}

static int kt_value(kt_t *k, int depth);

static int kt_literal(kt_t *k, const char *w, size_t n) {
    if ((size_t)(k->e - k->p) < n || memcmp(k->p, w, n) != 0) return 0;
    k->p += n;
    return 1;
}

static int kt_container(kt_t *k, int depth) {
    uint8_t close = *k->p == '{' ? '}' : ']';
    int obj = close == '}';
    if (depth > KT_DEPTH) return 0;
    k->p++;
    kt_ws(k);
    if (k->p < k->e && *k->p == close) { k->p++; return 1; }
    for (;;) {
        int esc;
        if (obj) {
            if (k->p >= k->e || *k->p != '"' || !kt_string(k, &esc)) return 0;
            kt_ws(k);
            if (k->p >= k->e || *k->p != ':') return 0;
            k->p++;
            kt_ws(k);
        }
        if (!kt_value(k, depth + 1)) return 0;
        kt_ws(k);
        if (k->p >= k->e) return 0;
        if (*k->p == ',') { k->p++; kt_ws(k); continue; }
        if (*k->p == close) { k->p++; return 1; }
        return 0;
    }
}

static int kt_value(kt_t *k, int depth) {
    if (k->p >= k->e) return 0;
    int esc, integral;
    switch (*k->p) {
    case '"': return kt_string(k, &esc);
    case '{': case '[': return kt_container(k, depth);
    case 't': return kt_literal(k, "true", 4);
    case 'f': return kt_literal(k, "false", 5);
    case 'n': return kt_literal(k, "null", 4);
    default: return kt_number(k, &integral);
    }
}

/* an int64 from the integral number text [a, b) (0 with *ok = 0 when it does not fit) */
static int64_t kt_int(const uint8_t *a, const uint8_t *b, int *ok) {
    int neg = *a == '-';
    line_t l = {a, b - a};
    int64_t v = digits_i64(l, neg, b - a, ok);
    if (!*ok && neg && b - a == 20 && memcmp(a, "-9223372036854775808", 20) == 0) { *ok = 1; return INT64_MIN; }
    return neg ? -v : v;
}

int64_t at_kineto_events(const uint8_t *body, int64_t n, int64_t cap, uint8_t *ph,
                         int64_t *cat_at, int32_t *cat_len, int64_t *name_at, int32_t *name_len,
                         uint8_t *int_ok, int64_t *ints, int64_t *str_at, int32_t *str_len,
                         double *ts, uint8_t *ts_ok, double *dur, uint8_t *dur_ok,
                         int64_t *args_at, int32_t *args_len, int64_t *ev_start, int64_t *ev_end) {
    /* int_ok/ints/str_at/str_len hold pid, tid and id: row i's at [i], [cap + i], [2 * cap + i] */
    kt_t k = {body, body, body + n};
    int64_t m = 0;
    kt_ws(&k);
    if (k.p >= k.e) return 0;
    for (;;) {
        if (*k.p != '{') return -1;
        if (m >= cap) return -2;
        ev_start[m] = k.p - body;
        ph[m] = 19;                                  /* "" */
        cat_at[m] = name_at[m] = args_at[m] = -1;
        cat_len[m] = name_len[m] = args_len[m] = 0;
        for (int j = 0; j < 3; j++) { int_ok[j * cap + m] = 0; ints[j * cap + m] = 0; str_at[j * cap + m] = -1; str_len[j * cap + m] = 0; }
        ts[m] = dur[m] = 0.0;
        ts_ok[m] = dur_ok[m] = 0;
        unsigned seen = 0;
        k.p++;
        kt_ws(&k);
        if (k.p < k.e && *k.p == '}') k.p++;
        else for (;;) {
            int esc;
            const uint8_t *ks = k.p + 1;
            if (k.p >= k.e || *k.p != '"' || !kt_string(&k, &esc) || esc) return -1;
            size_t kl = (size_t)(k.p - 1 - ks);
            kt_ws(&k);
            if (k.p >= k.e || *k.p != ':') return -1;
            k.p++;
            kt_ws(&k);
            if (k.p >= k.e) return -1;
            /* which field: 1 ph, 2 cat, 3 name, 4 pid, 5 tid, 6 id, 7 ts, 8 dur, 9 args, 10 bp, 11 s */
            int f = 0;
            if (kl == 2 && !memcmp(ks, "ph", 2)) f = 1;
            else if (kl == 3 && !memcmp(ks, "cat", 3)) f = 2;
            else if (kl == 4 && !memcmp(ks, "name", 4)) f = 3;
            else if (kl == 3 && !memcmp(ks, "pid", 3)) f = 4;
            else if (kl == 3 && !memcmp(ks, "tid", 3)) f = 5;
            else if (kl == 2 && !memcmp(ks, "id", 2)) f = 6;
            else if (kl == 2 && !memcmp(ks, "ts", 2)) f = 7;
            else if (kl == 3 && !memcmp(ks, "dur", 3)) f = 8;
            else if (kl == 4 && !memcmp(ks, "args", 4)) f = 9;
            else if (kl == 2 && !memcmp(ks, "bp", 2)) f = 10;
            else if (kl == 1 && ks[0] == 's') f = 11;
            if (f) {
                if (seen & (1u << f)) return -1;       /* (a key twice: left to msgspec) */
                seen |= 1u << f;
            }
            const uint8_t *vs = k.p;
            int is_null = *vs == 'n', is_str = *vs == '"', is_num = *vs == '-' || is_d(*vs), integral = 0;
            if (f == 0 || f == 9) {
                if (!kt_value(&k, 1)) return -1;
                if (f == 9) { args_at[m] = vs - body; args_len[m] = (int32_t)(k.p - vs); }
            } else if (is_null) {
                if (!kt_literal(&k, "null", 4)) return -1;
                if (f == 1) return -1;                 /* (ph is never null in Ev) */
            } else if (is_str) {
                if (!kt_string(&k, &esc) || esc) return -1;
                int64_t a = vs + 1 - body;
                int32_t len = (int32_t)(k.p - vs - 2);
                if (f == 1) {
                    int hit = -1;
                    for (int q = 0; q < 20; q++)
                        if ((size_t)len == strlen(KINETO_PHASES[q]) && !memcmp(vs + 1, KINETO_PHASES[q], (size_t)len)) { hit = q; break; }
                    if (hit < 0) return -1;
                    ph[m] = (uint8_t)hit;
                } else if (f == 2) { cat_at[m] = a; cat_len[m] = len; }
                else if (f == 3) { name_at[m] = a; name_len[m] = len; }
                else if (f >= 4 && f <= 6) { str_at[(f - 4) * cap + m] = a; str_len[(f - 4) * cap + m] = len; }
                else if (f == 7 || f == 8) return -1;  /* (a time as text: left to msgspec) */
            } else if (is_num) {
                if (!kt_number(&k, &integral)) return -1;
                if (f >= 4 && f <= 6) {
                    int ok = 1;
                    if (!integral) return -1;
                    int64_t v = kt_int(vs, k.p, &ok);
                    if (!ok) return -1;
                    int_ok[(f - 4) * cap + m] = 1; ints[(f - 4) * cap + m] = v;
                } else if (f == 7 || f == 8) {
                    double v;
                    int ok = 1;
                    int64_t iv = integral ? kt_int(vs, k.p, &ok) : 0;
                    if (integral && ok) v = (double)iv;
                    else {
                        char tmp[64];
                        size_t tl = (size_t)(k.p - vs);
                        if (tl >= sizeof tmp) return -1;
                        memcpy(tmp, vs, tl);
                        tmp[tl] = 0;
                        v = strtod(tmp, NULL);
                        if (!isfinite(v)) return -1;
                    }
                    if (f == 7) { ts[m] = v; ts_ok[m] = 1; } else { dur[m] = v; dur_ok[m] = 1; }
                } else return -1;                      /* (ph, cat, name, bp, s as a number) */
            } else return -1;                          /* (true, false, an object ... for a field) */
            kt_ws(&k);
            if (k.p >= k.e) return -1;
            if (*k.p == ',') { k.p++; kt_ws(&k); continue; }
            if (*k.p == '}') { k.p++; break; }
            return -1;
        }
        ev_end[m] = k.p - body;
        m++;
        kt_ws(&k);
        if (k.p >= k.e) return m;
        if (*k.p != ',') return -1;
        k.p++;
        kt_ws(&k);
        if (k.p >= k.e) return -1;                     /* (a trailing comma) */
    }
}

/* The spans (at[i], len[i]; at < 0: null) of a buffer as Arrow string views into it (buffer 0):
 * 16 bytes per row, a string of at most 12 bytes inline; valid[i] says whether row i has one.
 * Returns how many rows are null. */
int64_t at_views(const uint8_t *src, int64_t n, const int64_t *at, const int32_t *len, uint8_t *views,
                 uint8_t *valid) {
    int64_t nulls = 0;
    for (int64_t i = 0; i < n; i++) {
        uint8_t *v = views + 16 * i;
        int64_t a = at[i];
        memset(v, 0, 16);
        if (a < 0) { valid[i] = 0; nulls++; continue; }
        int32_t l = len[i];
        valid[i] = 1;
        memcpy(v, &l, 4);
        if (l <= 12) memcpy(v + 4, src + a, (size_t)l);
        else {
            int32_t buf = 0, off = (int32_t)a;
            memcpy(v + 4, src + a, 4);
            memcpy(v + 8, &buf, 4);
            memcpy(v + 12, &off, 4);
        }
    }
    return nulls;
}

/* ---- Multi-line blocks: Python tracebacks, faulthandler dumps, ChildFailedError summaries ----
 *
 * The walk of ingest/formats/logs/blocks.py (group_blocks and its walkers) over one output
 * stream's candidate rows: from each block start not inside the block before, to the row after
 * the block. Python's str tests are byte tests here where the bytes they look at are ASCII
 * (str.isspace's ASCII members include \x1c-\x1f); where a test would have to know what a
 * character that is not ASCII is (a space? a digit? a word character?), or a row is null, the walk
 * stops and the block is left to Python's walkers.
 *
 * One record of BLK_N int32 per block: its start row and end row (-1: it ran past the last row;
 * the walk stops there), its type, the exception row of a traceback (-1: none, the rows ended
 * first), its frame rows (frames[fr_lo:fr_hi]: the rows FRAME matches), whether a summary was read,
 * its title row and its failures (fails[fl_lo:fl_hi], FL_N int32
 * each: the "[i]:" row, whether it came after "Root Cause", the row after its last row, the row and
 * offset after the colon of its time, host, rank, exitcode and error_file (the last one read; row -1: none),
 * its traceback's pieces tb[tb_lo:tb_hi], 3 int32 each: row, offset, whether the piece is
 * stripped). */
enum { BT_TRACEBACK = 0, BT_FATAL = 1, BT_CFE_ALONE = 2, BT_UNSURE = 3 };
enum { B_START, B_END, B_TYPE, B_EXC, B_FR_LO, B_FR_HI, B_HAS_CFE, B_TITLE, B_FL_LO, B_FL_HI,
       BLK_N };
enum { K_TIME, K_HOST, K_RANK, K_EXIT, K_ERRF, K_N };
enum { F_ENTRY, F_ROOT, F_END, F_KEYS, F_TB_LO = F_KEYS + 2 * K_N, F_TB_HI, FL_N };

typedef struct {
    const col_t *col;
    int64_t n;
    int unsure;
    int32_t *frames, *fails, *tb;
    int64_t nfr, nfl, ntb;
} walk_t;

static inline int py_space(int c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 28 && c <= 31); }

/* row i, or sets w->unsure (a null row) */
static inline line_t w_row(walk_t *w, int64_t i) {
    line_t l = line_of(w->col, i);
    if (!is_valid(w->col, i)) {
        w->unsure = 1;
        l.n = 0;
    }
    return l;
}

/* str.strip() == "": no byte but spaces; unsure where the rest are not ASCII (Unicode's spaces) */
static inline int blank(walk_t *w, line_t l) {
    int other = 0;
    for (int64_t i = 0; i < l.n; i++) {
        if (l.p[i] >= 0x80) other = 1;
        else if (!py_space(l.p[i])) return 0;
    }
    if (other) w->unsure = 1;
    return !other;
}

static inline int is_lit(line_t l, const char *s) { size_t k = strlen(s); return l.n == (int64_t)k && memcmp(l.p, s, k) == 0; }
static inline int has_head(line_t l, const char *s) { return starts(l, 0, s, strlen(s)); }
static inline int has_tail(line_t l, const char *s) { size_t k = strlen(s); return starts(l, l.n - (int64_t)k, s, k); }

static const char TB_HEAD[] = "Traceback (most recent call last):";

static inline void tb_piece(walk_t *w, int64_t row, int32_t at, int32_t strip) {
    int32_t *t = w->tb + 3 * w->ntb++;
    t[0] = (int32_t)row; t[1] = at; t[2] = strip;
}

/* FRAME: whitespace, 'File "', a file name, '", line ', digits, ", in " or " in ", anything */
static inline int frame_line(walk_t *w, line_t l) {
    int64_t i = 0;
    while (i < l.n && py_space(l.p[i])) i++;
    if (i < l.n && l.p[i] >= 0x80) { w->unsure = 1; return 0; }     /* (\s: Unicode's spaces) */
    if (i == 0 || !starts(l, i, "File \"", 6)) return 0;
    int64_t a = i + 6, q = a;
    while (q < l.n && l.p[q] != '"') q++;
    if (q == a || !starts(l, q, "\", line ", 8)) return 0;
    int64_t d = q + 8, e = d;
    while (e < l.n && is_d(l.p[e])) e++;
    if (e < l.n && l.p[e] >= 0x80) { w->unsure = 1; return 0; }     /* (\d: Unicode's digits) */
    return e > d && (starts(l, e, ", in ", 5) || starts(l, e, " in ", 4));
}

/* _walk_cfe: the row after the summary's closing border, j when row j opens none, -1 when the
 * rows end first */
static int64_t walk_cfe(walk_t *w, int64_t j, int64_t most) {
    if (j < w->n) {
        line_t l = w_row(w, j);
        if (w->unsure) return -1;
        if (!has_head(l, "===")) return j;
    }
    int borders = 0;
    int64_t k = j;
    while (k < w->n && k - j < most) {
        line_t l = w_row(w, k);
        if (w->unsure) return -1;
        if (has_head(l, "===")) {
            int64_t a = 0;
            while (a < l.n && l.p[a] == '=') a++;
            if (a == l.n && ++borders == 2) return k + 1;
        }
        k++;
    }
    return k >= w->n ? -1 : k;
}

/* _parse_cfe's reading of rows [lo, hi) into the block record and w->fails / w->tb (a failure's
 * traceback pieces are the ones read while it is the last failure) */
static void parse_cfe(walk_t *w, int64_t lo, int64_t hi, int32_t *b) {
    static const char *const keys[] = {"time", "host", "rank", "exitcode", "error_file"};
    int32_t *cur = NULL;
    int in_tb = 0, root = 0;        /* in_tb: the key read last is "traceback" */
    b[B_TITLE] = -1;
    b[B_FL_LO] = b[B_FL_HI] = (int32_t)w->nfl;
    for (int64_t pos = lo; pos < hi; pos++) {
        line_t l = w_row(w, pos);
        if (w->unsure) return;
        if (starts(l, 0, "   ", 3) && cur && b[B_TITLE] >= 0) {
            cur[F_END] = (int32_t)(pos + 1);
            if (in_tb) tb_piece(w, pos, 2, 0);
            continue;
        }
        if (b[B_TITLE] < 0 && has_tail(l, " FAILED")) { b[B_TITLE] = (int32_t)pos; continue; }
        if (has_head(l, "Root Cause")) { root = 1; continue; }
        if (l.n >= 4 && l.p[0] == '[' && l.p[l.n - 2] == ']' && l.p[l.n - 1] == ':') {
            int64_t d = 1;
            while (d < l.n - 2 && is_d(l.p[d])) d++;
            if (d < l.n - 2 && l.p[d] >= 0x80) { w->unsure = 1; return; }     /* (\d: Unicode's digits) */
            if (d == l.n - 2) {
                if (cur) cur[F_TB_HI] = (int32_t)w->ntb;
                cur = w->fails + FL_N * w->nfl++;
                cur[F_ENTRY] = (int32_t)pos; cur[F_ROOT] = root; cur[F_END] = (int32_t)(pos + 1);
                for (int k = 0; k < K_N; k++) { cur[F_KEYS + 2 * k] = -1; cur[F_KEYS + 2 * k + 1] = 0; }
                cur[F_TB_LO] = cur[F_TB_HI] = (int32_t)w->ntb;
                in_tb = 0;
                continue;
            }
        }
        if (!cur) continue;
        if (!has_head(l, "---") && !has_head(l, "===")) cur[F_END] = (int32_t)(pos + 1);
        /* CFE_KV, where its first two characters are whitespace and the third is not (a byte of
         * those, of the key or of the spaces after it that is not ASCII: Unicode's spaces and
         * word characters) */
        for (int64_t q = 0; q < 3 && q < l.n && (q < 2 ? py_space(l.p[q]) || l.p[q] >= 0x80 : 1); q++)
            if (l.p[q] >= 0x80) { w->unsure = 1; return; }
        if (l.n >= 3 && py_space(l.p[0]) && py_space(l.p[1]) && w_ascii(l.p[2])) {
            int64_t e = 2;
            while (e < l.n && w_ascii(l.p[e])) e++;
            int64_t c = e;
            while (c < l.n && py_space(l.p[c])) c++;
            if (c < l.n && l.p[c] >= 0x80) { w->unsure = 1; return; }
            if (c < l.n && l.p[c] == ':') {
                int32_t v = (int32_t)(c + 1);         /* (": ?": the value is stripped) */
                line_t k = {l.p + 2, e - 2};
                int got = -1;
                for (int q = 0; q < K_N; q++)
                    if (is_lit(k, keys[q])) got = q;
                if (got >= 0) {
                    in_tb = 0;
                    cur[F_KEYS + 2 * got] = (int32_t)pos; cur[F_KEYS + 2 * got + 1] = v;
                    continue;
                }
                if (is_lit(k, "traceback")) {
                    in_tb = 1;
                    tb_piece(w, pos, v, 1);
                    continue;
                }
            }
        }
        if (in_tb && starts(l, 0, "  ", 2) && !has_head(l, "---")) tb_piece(w, pos, 2, 0);
    }
    if (cur) cur[F_TB_HI] = (int32_t)w->ntb;
    b[B_FL_HI] = (int32_t)w->nfl;
}

/* _walk_traceback from row i (its header); the block's end row, -1 when the rows end first */
static int64_t walk_traceback(walk_t *w, int64_t i, const uint8_t *cfe_exc, int64_t most, int32_t *b) {
    int64_t n = w->n, j = i + 1;
    for (;;) {
        while (j < n) {
            line_t l = w_row(w, j);
            if (w->unsure) return -1;
            if (!(starts(l, 0, " ", 1) || starts(l, 0, "\t", 1) || is_lit(l, TB_HEAD))) break;
            if (frame_line(w, l)) w->frames[w->nfr++] = (int32_t)j;
            if (w->unsure) return -1;
            j++;
        }
        if (j >= n) { b[B_EXC] = -1; return -1; }    /* (cut off before its exception line) */
        b[B_EXC] = (int32_t)j;
        j++;
        /* chained: blank rows, "During handling ..." or "The above exception ...", blank rows, a header */
        int64_t k = j;
        while (k < n && blank(w, w_row(w, k)) && !w->unsure) k++;
        if (w->unsure) return -1;
        if (k < n) {
            line_t l = w_row(w, k);
            if (w->unsure) return -1;
            if (is_lit(l, "During handling of the above exception, another exception occurred:") ||
                is_lit(l, "The above exception was the direct cause of the following exception:")) {
                k++;
                while (k < n && blank(w, w_row(w, k)) && !w->unsure) k++;
                if (w->unsure) return -1;
                if (k < n && is_lit(w_row(w, k), TB_HEAD) && !w->unsure) { j = k + 1; continue; }
                if (w->unsure) return -1;
            }
        }
        break;
    }
    if (cfe_exc[b[B_EXC]]) {
        int64_t end = walk_cfe(w, j, most);
        if (end < 0) return -1;
        b[B_HAS_CFE] = 1;
        parse_cfe(w, j, end, b);
        j = end;
    }
    return j;
}

/* _walk_fatal from row i ("Fatal Python error: ...") */
static int64_t walk_fatal(walk_t *w, int64_t i) {
    int64_t j = i + 1;
    while (j < w->n) {
        line_t l = w_row(w, j);
        if (w->unsure) return -1;
        int empty = blank(w, l);
        if (w->unsure) return -1;
        if (empty || has_head(l, "Current thread") || has_head(l, "Thread 0x") || has_head(l, "Extension modules:")
            || has_head(l, "Stack (most recent call first)") || has_head(l, "  File") || has_head(l, "  <no Python frame>")) {
            if (frame_line(w, l)) w->frames[w->nfr++] = (int32_t)j;
            if (w->unsure) return -1;
            j++;
            if (has_head(l, "Extension modules:")) return j;
            continue;
        }
        return j;
    }
    return -1;
}

/* The blocks of one stream's rows (col, n) from its block starts (starts[0:nstarts], ascending)
 * at or after row from: kind[k] says how start k's row opens one (BT_*: a header, a fatal error,
 * a summary's exception line); cfe_exc[r]: whether row r, read as an exception line, names a
 * ChildFailedError; most: how far a summary's closing border is looked for. Writes the records
 * (blk) and their frames, failures and traceback pieces; counts[0..2]: how many of each. Returns
 * the number of blocks; the last one is BT_UNSURE when the walk stopped at a row it cannot read,
 * or has end -1 when it ran past the rows (either way the walk ends there). */
int64_t at_blocks(const col_t *col, int64_t n, const int32_t *starts_at, const uint8_t *kind, int64_t nstarts,
                  int64_t from, const uint8_t *cfe_exc, int64_t most, int32_t *blk, int32_t *frames,
                  int32_t *fails, int32_t *tb, int64_t *counts) {
    walk_t w = {col, n, 0, frames, fails, tb, 0, 0, 0};
    int64_t nb = 0, i = from, s = 0;
    while (s < nstarts && starts_at[s] < from) s++;
    for (; s < nstarts; s++) {
        if (starts_at[s] < i) continue;
        i = starts_at[s];
        int32_t *b = blk + BLK_N * nb++;
        for (int q = 0; q < BLK_N; q++) b[q] = -1;
        b[B_START] = (int32_t)i; b[B_TYPE] = kind[s]; b[B_HAS_CFE] = 0;
        b[B_FR_LO] = (int32_t)w.nfr;
        b[B_FL_LO] = b[B_FL_HI] = (int32_t)w.nfl;
        int64_t nfr0 = w.nfr, nfl0 = w.nfl, ntb0 = w.ntb, end;
        if (kind[s] == BT_TRACEBACK) end = walk_traceback(&w, i, cfe_exc, most, b);
        else if (kind[s] == BT_FATAL) end = walk_fatal(&w, i);
        else {
            end = walk_cfe(&w, i + 1, most);
            if (end > i + 1) {
                b[B_HAS_CFE] = 1;
                parse_cfe(&w, i + 1, end, b);
            }
        }
        b[B_FR_HI] = (int32_t)w.nfr;
        if (w.unsure) {
            w.nfr = nfr0; w.nfl = nfl0; w.ntb = ntb0;
            b[B_TYPE] = BT_UNSURE; b[B_END] = -1; b[B_FR_HI] = b[B_FR_LO]; b[B_FL_LO] = b[B_FL_HI] = (int32_t)nfl0;
            break;
        }
        b[B_END] = (int32_t)end;
        if (end < 0) break;
        i = end;
    }
    counts[0] = w.nfr; counts[1] = w.nfl; counts[2] = w.ntb;
    return nb;
}

/* ---------------------------------------------------------------------------------------------
 * The stamps the wall clock's phase is read from (ingest/formats/logs/c10phase.py: C10, ELASTIC,
 * DATED, read by ``reading``):
 *
 *   C10      ^(?:\[rank\d+\]:)?\[[FEWIV](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{9})
 *   ELASTIC  ^(?:\[rank\d+\]:)?[DIWEC](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) \d+
 *   DATED    ^\[?\d{4}-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d)[.,](\d{3,9})(?![\d:]|\s*(?:Z|[+-]\d\d))
 *
 * (each followed by a space where shown). The month and day share a run of 3 or 4 digits (the
 * day takes the last two). The time is seconds of month-day-time on 2000-01-01's calendar (a
 * leap year), as ``_local_s``: a date that calendar does not have is no reading. A byte looked
 * at that is not ASCII leaves the line to the regexes (\d and \s are Unicode's there).
 */
enum { PH_NONE = 0, PH_C10 = 1, PH_EXACT = 2 };
static const int64_t PH_SEC = 1000000000;
static const int64_t PH_TICK = 10000000;        /* c10phase.TICK_NS */
static const int64_t PH_SLACK = 1000000;        /* c10phase.ORDER_SLACK_NS */

/* seconds since 1970 of month-day hh:mm:ss in 2000, or -1 when 2000 has no such time */
static int64_t local_s_2000(int mo, int d, int hh, int mi, int ss) {
    static const int MDAYS[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (mo < 1 || mo > 12 || d < 1 || d > MDAYS[mo - 1] || hh > 23 || mi > 59 || ss > 59) return -1;
    int64_t days = 10957;                   /* 1970-01-01 to 2000-01-01 */
    for (int m = 1; m < mo; m++) days += MDAYS[m - 1];
    days += d - 1;
    return ((days * 24 + hh) * 60 + mi) * 60 + ss;
}

static inline int ph_d(line_t l, int64_t i, int64_t *far) { return is_d(look(l, i, far)); }

/* "(\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)\." at q: the month-day run, then the time; *s: the
 * seconds (-1: no such date), returns where the fraction starts or -1 */
static int64_t ph_mdhms(line_t l, int64_t q, int64_t *s, int64_t *far) {
    int64_t e = q;
    while (e < q + 5 && ph_d(l, e, far)) e++;
    int64_t k = e - q;
    if (k < 3 || k > 4 || look(l, e, far) != ' ') return -1;
    int64_t t = e + 1;
    for (int64_t j = t; j < t + 8; j++) {
        int c = look(l, j, far);
        if ((j - t) % 3 == 2 ? c != ':' : !is_d(c)) return -1;
    }
    if (look(l, t + 8, far) != '.') return -1;
    int mo = k == 3 ? l.p[q] - '0' : num2(l, q);
    *s = local_s_2000(mo, num2(l, e - 2), num2(l, t), num2(l, t + 3), num2(l, t + 6));
    return t + 9;
}

/* One line: PH_NONE, PH_C10 (t1: the second in ns, t2: the nine digits), PH_EXACT (t1: the
 * time in ns, t2: its resolution in ns) or UNSURE. */
static int phase_reading(line_t l, int64_t *t1, int64_t *t2) {
    int64_t far = 0, q = 0, s = -1, f;
    if (look(l, 0, &far) == '[' && look(l, 1, &far) == 'r') {        /* (?:\[rank\d+\]:)? */
        int64_t a = 0, b = 0, end = 0;
        if (bracket_num(l, 0, "[rank", 5, "]:", 2, &a, &b, &end, &far)) q = end;
    }
    int c = look(l, q, &far), r = PH_NONE;
    if (c == '[' && one_of(look(l, q + 1, &far), "FEWIV")) {
        f = ph_mdhms(l, q + 2, &s, &far);
        if (f >= 0) {
            int64_t e = f;
            while (e < f + 9 && ph_d(l, e, &far)) e++;
            if (e == f + 9 && look(l, e, &far) == ' ') {
                r = PH_C10;
                if (s < 0) r = PH_NONE;
                else { *t1 = s * PH_SEC; *t2 = (int64_t)num_k(l, f, 9); }
            }
        }
    } else if (one_of(c, "DIWEC")) {
        f = ph_mdhms(l, q + 1, &s, &far);
        if (f >= 0) {
            int64_t e = f;
            while (e < f + 6 && ph_d(l, e, &far)) e++;
            if (e == f + 6 && look(l, e, &far) == ' ') {
                int64_t g = e + 1;
                while (ph_d(l, g, &far)) g++;
                if (g > e + 1 && look(l, g, &far) == ' ') {
                    r = s < 0 ? PH_NONE : PH_EXACT;
                    if (s >= 0) { *t1 = s * PH_SEC + (int64_t)num_k(l, f, 6) * 1000; *t2 = 1000000; }
                }
            }
        }
    }
    if (r == PH_NONE) {      /* DATED (C10's and ELASTIC's lines cannot be DATED's: their first bytes differ) */
        int64_t p = look(l, 0, &far) == '[' ? 1 : 0;
        int ok = 1;
        for (int64_t j = p; j < p + 4; j++) ok = ok && ph_d(l, j, &far);
        ok = ok && look(l, p + 4, &far) == '-' && ph_d(l, p + 5, &far) && ph_d(l, p + 6, &far)
             && look(l, p + 7, &far) == '-' && ph_d(l, p + 8, &far) && ph_d(l, p + 9, &far)
             && one_of(look(l, p + 10, &far), " T_");
        int64_t t = p + 11;
        for (int64_t j = t; ok && j < t + 8; j++) {
            int cc = look(l, j, &far);
            ok = (j - t) % 3 == 2 ? cc == ':' : is_d(cc);
        }
        ok = ok && one_of(look(l, t + 8, &far), ".,");
        if (ok) {
            int64_t a = t + 9, e = a;
            while (ph_d(l, e, &far)) e++;
            int64_t k = e - a;
            int after = look(l, e, &far);
            int64_t w = e;
            while (is_s(look(l, w, &far)) || (look(l, w, &far) >= 0x1c && look(l, w, &far) <= 0x1f)) w++;
            int z = look(l, w, &far);
            int zoned = z == 'Z' || ((z == '+' || z == '-') && ph_d(l, w + 1, &far) && ph_d(l, w + 2, &far));
            if (k >= 3 && k <= 9 && after != ':' && !zoned) {
                s = local_s_2000(num2(l, p + 5), num2(l, p + 8), num2(l, t), num2(l, t + 3), num2(l, t + 6));
                if (s >= 0) {
                    int64_t v = num_k(l, a, (int)k);
                    for (int64_t j = k; j < 9; j++) v *= 10;
                    int64_t res = 1;
                    for (int64_t j = k; j < 9; j++) res *= 10;
                    *t1 = s * PH_SEC + v; *t2 = res;
                    r = PH_EXACT;
                }
            }
        }
    }
    for (int64_t j = 0; j <= far && j < l.n; j++)
        if (l.p[j] >= 0x80) return UNSURE;
    return r;
}

/* For the lines [0, n) of col: kind (PH_NONE, PH_C10, PH_EXACT, UNSURE) and t1, t2 (see
 * phase_reading; 0 where there is none). Null lines are PH_NONE. Returns the number left. */
int64_t at_phase_readings(const col_t *col, int64_t n, uint8_t *kind, int64_t *t1, int64_t *t2) {
    int64_t left = 0;
    for (int64_t i = 0; i < n; i++) {
        t1[i] = t2[i] = 0;
        kind[i] = PH_NONE;
        if (!is_valid(col, i)) continue;
        int k = phase_reading(line_of(col, i), &t1[i], &t2[i]);
        if (k != PH_EXACT && k != PH_C10) t1[i] = t2[i] = 0;
        kind[i] = (uint8_t)k;
        left += k == UNSURE;
    }
    return left;
}

/* The phases (ns ranges of [0, 1 s)) under which line b, written after line a, would read
 * earlier than it (c10phase.forbidden's contract), for readings (a_c: 1 for a c10 stamp, a1, a2)
 * and (b_c, b1, b2) as phase_reading gives them: at most 5 ranges in lo/hi, returns how many. */
static int phase_ranges(int a_c, int64_t a1, int64_t a2, int b_c, int64_t b1, int64_t b2, int64_t *lo, int64_t *hi) {
    int64_t cuts[6] = {0, PH_SEC};
    int nc = 2;
    const int isc[2] = {a_c, b_c};
    const int64_t frac[2] = {a2, b2};
    for (int x = 0; x < 2; x++) {
        if (!isc[x]) continue;
        int64_t w = (PH_SEC - frac[x]) % PH_SEC, v[2] = {w, (w + PH_TICK) % PH_SEC};
        for (int y = 0; y < 2; y++) {
            int dup = 0;
            for (int z = 0; z < nc; z++) dup |= cuts[z] == v[y];
            if (!dup) cuts[nc++] = v[y];
        }
    }
    for (int x = 1; x < nc; x++)            /* (sorted: at most six) */
        for (int y = x; y > 0 && cuts[y - 1] > cuts[y]; y--) {
            int64_t t = cuts[y]; cuts[y] = cuts[y - 1]; cuts[y - 1] = t;
        }
    int out = 0, slope = b_c - a_c;
    for (int x = 0; x + 1 < nc; x++) {
        int64_t p = cuts[x], q = cuts[x + 1];
        if (q <= p) continue;
        /* d(g) = hi_b(g) - lo_a(g) + slack is linear on [p, q): where it is below 0 */
        int64_t mid = (p + q) / 2, hi_b, lo_a;
        if (b_c) {
            int64_t r = (b2 + mid) % PH_SEC;
            hi_b = b1 + r + (r < PH_TICK ? PH_SEC : 0);
        } else {
            hi_b = b1 + b2;
        }
        lo_a = a_c ? a1 + (a2 + mid) % PH_SEC : a1;
        int64_t d = hi_b - lo_a + PH_SLACK, a, b;
        if (slope == 0) {
            if (d < 0) { a = p; b = q; } else continue;
        } else if (slope > 0) {
            int64_t zero = mid - d;
            a = p; b = q < zero ? q : zero;
        } else {
            int64_t zero = mid + d;
            a = p > zero + 1 ? p : zero + 1; b = q;
        }
        if (b > a) { lo[out] = a; hi[out] = b; out++; }
    }
    return out;
}

/* phase_ranges of n pairs (arrays a_c, a1, a2, b_c, b1, b2): pair k's ranges at lo/hi + 5 * k,
 * count[k] of them. */
void at_phase_forbidden(int64_t n, const uint8_t *a_c, const int64_t *a1, const int64_t *a2, const uint8_t *b_c,
                        const int64_t *b1, const int64_t *b2, int64_t *lo, int64_t *hi, uint8_t *count) {
    for (int64_t k = 0; k < n; k++)
        count[k] = (uint8_t)phase_ranges(a_c[k], a1[k], a2[k], b_c[k], b1[k], b2[k], lo + 5 * k, hi + 5 * k);
}

/* c10phase.Phase's feed of n lines in order: line numbers, stream numbers (sid, < the streams'
 * state arrays' length) and readings (kind PH_NONE, PH_C10 or PH_EXACT: the caller has read the
 * lines left UNSURE; t1, t2). State kept across calls: per stream its last reading (s_kind PH_NONE:
 * none yet; s_t1, s_t2, s_line), *upto (lines at or before it were fed: a chunk re-reads some) and
 * *c10 (c10 readings fed). A line pairs with its stream's last reading unless both are exact or
 * they are an hour or more apart; at most `room` pairs are made (the lines after the last one are
 * not fed). Per pair k: the earlier line's number and reading (a_line, a_kind, a1, a2), the later
 * one's (b_line, b_kind, b1, b2), and the phase bins it rules out (the bins of BIN_NS ns wholly
 * inside a range of phase_ranges; at most 5 per pair), written one after another from index 0 of
 * bin_lo and bin_hi: bin_end[k] is bin_base plus the number of bins of pairs 0..k (the caller's
 * running offset). Returns the number of pairs. */
int64_t at_phase_pairs(int64_t n, const int64_t *lineno, const int32_t *sid, const uint8_t *kind, const int64_t *t1,
                       const int64_t *t2, uint8_t *s_kind, int64_t *s_t1, int64_t *s_t2, int64_t *s_line, int64_t *upto,
                       int64_t *c10, int64_t room, int64_t bin_ns, int64_t bin_base, int64_t *a_line, uint8_t *a_kind,
                       int64_t *a1, int64_t *a2, int64_t *b_line, uint8_t *b_kind, int64_t *b1, int64_t *b2,
                       int32_t *bin_lo, int32_t *bin_hi, int64_t *bin_end) {
    int64_t np = 0, nb = 0;
    for (int64_t i = 0; i < n && np < room; i++) {
        if (lineno[i] <= *upto) continue;
        *upto = lineno[i];
        int k = kind[i];
        if (k != PH_C10 && k != PH_EXACT) continue;
        *c10 += k == PH_C10;
        int32_t s = sid[i];
        int pk = s_kind[s];
        int64_t p1 = s_t1[s], p2 = s_t2[s], pl = s_line[s];
        s_kind[s] = (uint8_t)k; s_t1[s] = t1[i]; s_t2[s] = t2[i]; s_line[s] = lineno[i];
        if (pk == PH_NONE || (pk == PH_EXACT && k == PH_EXACT)) continue;
        int64_t gap = t1[i] - p1;
        if (gap > 3600 * PH_SEC || gap < -3600 * PH_SEC) continue;
        int64_t lo[5], hi[5];
        int nr = phase_ranges(pk == PH_C10, p1, p2, k == PH_C10, t1[i], t2[i], lo, hi);
        for (int r = 0; r < nr; r++) {
            int64_t c0 = (lo[r] + bin_ns - 1) / bin_ns, c1 = hi[r] / bin_ns;
            if (c1 > c0) { bin_lo[nb] = (int32_t)c0; bin_hi[nb] = (int32_t)c1; nb++; }
        }
        bin_end[np] = bin_base + nb;
        a_line[np] = pl; a_kind[np] = (uint8_t)pk; a1[np] = p1; a2[np] = p2;
        b_line[np] = lineno[i]; b_kind[np] = (uint8_t)k; b1[np] = t1[i]; b2[np] = t2[i];
        np++;
    }
    return np;
}

/* How many of the pairs [from, to) rule out each of the clock phase's nbins bins (c10phase's
 * counts): pair k rules out the bins [lo[j], hi[j]) for j in [off[k], off[k + 1]). counts: nbins
 * values. Returns the least count. */
int64_t at_phase_counts(const int64_t *off, const int32_t *lo, const int32_t *hi, int64_t from, int64_t to,
                        int64_t nbins, int64_t *counts) {
    memset(counts, 0, sizeof(int64_t) * (size_t)nbins);
    for (int64_t j = off[from]; j < off[to]; j++) {
        counts[lo[j]] += 1;
        if (hi[j] < nbins) counts[hi[j]] -= 1;
    }
    int64_t run = 0, least = INT64_MAX;
    for (int64_t b = 0; b < nbins; b++) {
        run += counts[b];
        counts[b] = run;
        if (run < least) least = run;
    }
    return least;
}

/* ---- Kineto times: microseconds (a JSON double) as integer nanoseconds -------------------
 *
 * The formula of ingest/formats/kineto.py (its small chunks' path, _us_to_ns and _dur_to_ns):
 *   kind 0, a time:     floor(t) * 1000 + round(frac(t) * 1000) + off   where -max_us < t < max_us
 *   kind 1, a duration: round(t * 1000)                                 where it is within int64
 * round is to the nearest, a half to the even one (Python's round); anything else (null, NaN,
 * out of range) is null. v[i] is null where bit i of the Arrow bitmap valid is 0 (valid NULL:
 * none is). out[i], ok[i] (1: a value). Returns 0, or -1 where a time plus off leaves int64
 * (the caller then does the sum with Python's integers). */
static int64_t round_half_even(double x) {   /* |x| < 2^63 */
    if (x >= 4503599627370496.0 || x <= -4503599627370496.0)
        return (int64_t)x;                    /* from 2^52 on a double is an integer */
    int64_t r = (int64_t)x;                   /* toward zero, exactly */
    double f = x - (double)r;                 /* exact: |x| < 2^52 */
    if (f > 0.5 || (f == 0.5 && (r & 1))) return r + 1;
    if (f < -0.5 || (f == -0.5 && (r & 1))) return r - 1;
    return r;
}

int64_t at_us_to_ns(const double *v, const uint8_t *valid, int64_t n, int kind, int64_t off, double max_us,
                    int64_t *out, uint8_t *ok) {
    for (int64_t i = 0; i < n; i++) {
        double t = v[i];
        out[i] = 0;
        ok[i] = 0;
        if (valid && !((valid[i >> 3] >> (i & 7)) & 1)) continue;
        if (kind == 0) {
            if (!(t > -max_us && t < max_us)) continue;       /* (NaN: false) */
            int64_t w = (int64_t)t;                           /* max_us < 2^53: exact */
            if ((double)w > t) w -= 1;                        /* floor */
            int64_t ns = w * 1000 + round_half_even((t - (double)w) * 1000.0), sum;
            if (__builtin_add_overflow(ns, off, &sum)) return -1;
            out[i] = sum;
        } else {
            double x = t * 1000.0;
            if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) continue;
            out[i] = round_half_even(x);
        }
        ok[i] = 1;
    }
    return 0;
}

/* ---- Kernel report bodies -------------------------------------------------------------------
 *
 * BODY of ingest/formats/kernel/engine.py (a line that continues a report: a stack frame, a
 * register dump, a task line of a hung-task or sysrq listing...), an alternation anchored at the
 * line's start, read by Polars' regex (Rust's: \s, \S and \d are Unicode's). Only ASCII lines are
 * read here: body_match is 1 or 0, and -1 for a line with a byte that is not ASCII. */
static const char *const BODY_LITERALS[] = {
    "Call Trace:", "Call trace:", "<TASK>", "</TASK>", "<IRQ>", "</IRQ>", "RIP:", "RSP:", "RAX:", "RDX:",
    "RBP:", "FS:", "CS:", "CR2:", "Code:", "Stack:", "Modules linked in:", "Hardware name:", "task:",
    "Workqueue:", "Tainted:", "\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\"", "---[ end", "? ",
    "rcu: ", "(detected by", "Sending NMI", "NMI backtrace", "Kernel Offset:", "PGD ", "IP: ", NULL};

static inline int is_hex_lower(int c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

static int body_match(line_t l) {
    for (int64_t i = 0; i < l.n; i++)
        if (l.p[i] >= 0x80) return -1;
    if (l.n == 0) return 0;
    if (is_s(l.p[0])) return 1;                                          /* \s */
    for (const char *const *lit = BODY_LITERALS; *lit; lit++) {
        size_t k = strlen(*lit);
        if ((int64_t)k <= l.n && memcmp(l.p, *lit, k) == 0) return 1;
    }
    if (l.n >= 4 && l.p[0] == 'R' && is_d(l.p[1]) && is_d(l.p[2]) && l.p[3] == ':') return 1;   /* R\d\d: */
    if (l.n >= 6 && memcmp(l.p, "CPU: ", 5) == 0 && is_d(l.p[5])) return 1;                  /* CPU: \d */
    if (l.n >= 2 && l.p[0] == '[' && l.p[1] == '<') {                                         /* \[<[0-9a-f]+>\] */
        int64_t i = 2;
        while (i < l.n && is_hex_lower(l.p[i])) i++;
        if (i > 2 && i + 1 < l.n && l.p[i] == '>' && l.p[i + 1] == ']') return 1;
    }
    /* \S+ +[DRSTtXZI] [0-9a-f]{8,16}  (the \S run can only end where a space follows: all of it) */
    int64_t i = 0;
    while (i < l.n && !is_s(l.p[i])) i++;
    if (i == 0) return 0;
    int64_t j = i;
    while (j < l.n && l.p[j] == ' ') j++;
    if (j == i || j + 1 >= l.n || !strchr("DRSTtXZI", l.p[j]) || l.p[j] == 0 || l.p[j + 1] != ' ') return 0;
    int64_t h = j + 2, e = h;
    while (e < l.n && is_hex_lower(l.p[e])) e++;
    return e - h >= 8 && e - h <= 16 && e < l.n && l.p[e] == ' ';
}

/* The report body rows of a chunk of kernel log records (KernelEngine._in_body): from each start
 * row, forward while the row continues the report (cont[i], or msg[i] matches BODY) and does not
 * open one (head[i] 0; a null head is 1); found[i] 1 for those rows. Returns how many rows were
 * found; -1 when a walk is still going after ``most`` rows (the caller then tests every row);
 * -2 when a row the walk reached is not ASCII (the caller's regex decides). */
int64_t at_body_walk(const col_t *msg, int64_t n, const uint8_t *cont, const uint8_t *head, const int64_t *starts,
                     int64_t nstarts, int64_t most, uint8_t *found) {
    int64_t count = 0;
    memset(found, 0, (size_t)n);
    for (int64_t s = 0; s < nstarts; s++) {
        int64_t i = starts[s], k = 0;
        for (; k < most && i < n; k++, i++) {
            int ok = cont[i];
            if (!ok && is_valid(msg, i)) {
                int m = body_match(line_of(msg, i));
                if (m < 0) return -2;
                ok = m;
            }
            if (!ok || head[i]) break;
            if (!found[i]) count++;
            found[i] = 1;
        }
        if (k == most && i < n) return -1;
    }
    return count;
}

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
#include <string.h>

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

/* Split buf[0:n] into lines.
 *
 * complete: the text after the last newline is a line too (the end of the file); otherwise it is
 * left out and *used says where the lines end (the caller keeps the rest for the next chunk).
 * Writes each line's text to out (capacity cap bytes), the Arrow offsets of the lines to
 * offs[0..count], 1 in bad[i] for a line whose bytes were not UTF-8, and the validity bitmap
 * valid (bit i clear: line i is empty and blank_as_null is set). The caller sizes offs, bad
 * and valid for at_count_newlines(buf, n) + 1 lines.
 *
 * Returns the number of lines. When cap is too small (only possible with bytes that are not
 * UTF-8: a replacement takes 3 bytes where the input had 1 to 3) returns -(bytes needed) and
 * writes nothing usable.
 */
int64_t at_split_lines(const uint8_t *buf, int64_t n, int complete, int blank_as_null,
                       uint8_t *out, int64_t cap, int64_t *offs, uint8_t *bad, uint8_t *valid,
                       int64_t *used, int64_t *nulls) {
    const uint8_t *p = buf, *end = buf + n;
    int64_t count = 0, o = 0, null_count = 0;
    int overflow = 0;
    offs[0] = 0;
    while (p < end) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *stop;
        if (nl) stop = nl;
        else if (complete) stop = end;
        else break;
        int64_t len = stop - p;
        if (len > 0 && p[len - 1] == '\r') len--;
        int is_bad = 0;
        int64_t take = len;
        if (!is_ascii(p, len)) {
            take = lossy_len(p, len, &is_bad);
        }
        if (o + take > cap) overflow = 1;
        if (!overflow) {
            if (is_bad) copy_lossy(p, len, out + o);
            else memcpy(out + o, p, (size_t)len);
        }
        o += take;
        bad[count] = (uint8_t)is_bad;
        if (blank_as_null && len == 0) {
            valid[count >> 3] &= (uint8_t)~(1u << (count & 7));
            null_count++;
        } else {
            valid[count >> 3] |= (uint8_t)(1u << (count & 7));
        }
        count++;
        offs[count] = o;
        p = nl ? nl + 1 : end;
    }
    *used = p - buf;
    *nulls = null_count;
    return overflow ? -o : count;
}

/* lockstep_trace.h: write lockstep traces from a C or C++ engine. One file, libc only.
 *
 * In exactly one C file:   #define LOCKSTEP_TRACE_IMPLEMENTATION
 *                          #include "lockstep_trace.h"
 * elsewhere just include it. Then:
 *
 *   lst_writer *w = lst_open("mine.safetensors", "my-engine", model_sha256_hex_or_NULL);
 *   lst_step(w, tokens, positions, n_tokens);            // the prompt: step 0
 *   size_t shape[2] = {n_tokens, n_embd};
 *   lst_tap_f32(w, "inp_embd", x, shape, 2);             // every op output you have
 *   ...
 *   lst_step(w, &next_token, &pos, 1);                   // each decode step, then its taps
 *   ...
 *   if (lst_close(w) != 0) fprintf(stderr, "%s\n", lst_error());
 *
 *   lockstep diff -m model.gguf --ref ref mine.safetensors
 *
 * Names and layouts are lockstep's taps (docs/taps.md): row = token, heads contiguous, Q/K in
 * the GGUF's RoPE pairing. An engine with its own names sets a name map with lst_meta(w,
 * "namemap", "llama.cpp" or a map file). Tensors are copied when recorded and written by
 * lst_close (memory grows with the trace). Every function returns 0 on success and -1 on error
 * (lst_error() says why); after an error the writer only accepts lst_close, which frees it.
 * The file format is docs/trace-format.md (safetensors with `s{step}/{name}` tensors).
 */
#ifndef LOCKSTEP_TRACE_H
#define LOCKSTEP_TRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lst_writer lst_writer;

lst_writer *lst_open(const char *path, const char *backend, const char *model_sha256);
int lst_meta(lst_writer *w, const char *key, const char *value);
int lst_step(lst_writer *w, const int32_t *tokens, const int32_t *positions, size_t n);
int lst_tap_f32(lst_writer *w, const char *name, const float *data, const size_t *shape, int ndim);
/* IEEE half-precision values, as stored by the engine (e.g. an f16 KV cache). */
int lst_tap_f16(lst_writer *w, const char *name, const uint16_t *data, const size_t *shape, int ndim);
int lst_close(lst_writer *w);
const char *lst_error(void);

#ifdef __cplusplus
}
#endif

#ifdef LOCKSTEP_TRACE_IMPLEMENTATION

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    size_t len, cap;
} lst__buf;

struct lst_writer {
    char *path;
    lst__buf meta;    /* `,"key":"value"` pairs of __metadata__ */
    lst__buf steps;   /* JSON list body of the `steps` metadata */
    lst__buf header;  /* `,"s0/name":{...}` tensor entries */
    lst__buf data;    /* tensor bytes */
    long n_steps;
    int failed;
};

static char lst__err[256];

const char *lst_error(void) { return lst__err; }

static int lst__fail(lst_writer *w, const char *what) {
    snprintf(lst__err, sizeof lst__err, "lockstep_trace: %s", what);
    if (w) w->failed = 1;
    return -1;
}

static int lst__put(lst__buf *b, const void *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = (char *)realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

static int lst__str(lst__buf *b, const char *s) { return lst__put(b, s, strlen(s)); }

/* A JSON string literal; control characters are escaped, other bytes passed through. */
static int lst__json(lst__buf *b, const char *s) {
    if (lst__put(b, "\"", 1)) return -1;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            if (lst__put(b, esc, 2)) return -1;
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            if (lst__str(b, esc)) return -1;
        } else if (lst__put(b, s, 1)) {
            return -1;
        }
    }
    return lst__put(b, "\"", 1);
}

static int lst__num(lst__buf *b, long long v) {
    char s[32];
    snprintf(s, sizeof s, "%lld", v);
    return lst__str(b, s);
}

static void lst__free(lst_writer *w) {
    free(w->path);
    free(w->meta.p);
    free(w->steps.p);
    free(w->header.p);
    free(w->data.p);
    free(w);
}

int lst_meta(lst_writer *w, const char *key, const char *value) {
    if (!w || w->failed) return lst__fail(w, "writer failed earlier");
    if (!key || !value) return lst__fail(w, "lst_meta: NULL key or value");
    if (!strcmp(key, "steps") || !strcmp(key, "lockstep.trace"))
        return lst__fail(w, "lst_meta: `steps` and `lockstep.trace` are written by the writer");
    if (lst__str(&w->meta, ",") || lst__json(&w->meta, key) || lst__str(&w->meta, ":") ||
        lst__json(&w->meta, value))
        return lst__fail(w, "out of memory");
    return 0;
}

lst_writer *lst_open(const char *path, const char *backend, const char *model_sha256) {
    if (!path || !backend) {
        lst__fail(NULL, "lst_open: NULL path or backend");
        return NULL;
    }
    lst_writer *w = (lst_writer *)calloc(1, sizeof *w);
    if (!w) {
        lst__fail(NULL, "out of memory");
        return NULL;
    }
    w->path = (char *)malloc(strlen(path) + 1);
    if (!w->path) {
        lst__free(w);
        lst__fail(NULL, "out of memory");
        return NULL;
    }
    strcpy(w->path, path);
    if (lst_meta(w, "backend", backend) || lst_meta(w, "filter", "") ||
        (model_sha256 && lst_meta(w, "model_sha256", model_sha256))) {
        lst__free(w);
        return NULL;
    }
    return w;
}

int lst_step(lst_writer *w, const int32_t *tokens, const int32_t *positions, size_t n) {
    if (!w || w->failed) return lst__fail(w, "writer failed earlier");
    if (n == 0 || !tokens || !positions) return lst__fail(w, "lst_step: no tokens");
    int e = 0;
    if (w->n_steps > 0) e |= lst__str(&w->steps, ",");
    e |= lst__str(&w->steps, "{\"step\":");
    e |= lst__num(&w->steps, w->n_steps);
    e |= lst__str(&w->steps, ",\"tokens\":[");
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0) return lst__fail(w, "lst_step: negative token id");
        if (i) e |= lst__str(&w->steps, ",");
        e |= lst__num(&w->steps, tokens[i]);
    }
    e |= lst__str(&w->steps, "],\"positions\":[");
    for (size_t i = 0; i < n; i++) {
        if (positions[i] < 0) return lst__fail(w, "lst_step: negative position");
        if (i) e |= lst__str(&w->steps, ",");
        e |= lst__num(&w->steps, positions[i]);
    }
    e |= lst__str(&w->steps, "]}");
    if (e) return lst__fail(w, "out of memory");
    w->n_steps++;
    return 0;
}

static int lst__tap(lst_writer *w, const char *name, const void *data, size_t elem,
                    const char *dtype, const size_t *shape, int ndim) {
    if (!w || w->failed) return lst__fail(w, "writer failed earlier");
    if (w->n_steps == 0) return lst__fail(w, "lst_tap: call lst_step first");
    if (!name || !*name || strchr(name, '/')) return lst__fail(w, "lst_tap: empty name or a '/' in it");
    if (ndim < 1 || ndim > 8 || !shape || !data) return lst__fail(w, "lst_tap: 1 to 8 dimensions");
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] != 0 && count > ((size_t)-1) / elem / shape[i])
            return lst__fail(w, "lst_tap: tensor too large");
        count *= shape[i];
    }
    size_t start = w->data.len, bytes = count * elem;
    char key[64];
    snprintf(key, sizeof key, "s%ld/", w->n_steps - 1);
    int e = 0;
    e |= lst__str(&w->header, ",\"");
    e |= lst__str(&w->header, key);
    /* the name, escaped, without the opening quote lst__json would add */
    {
        lst__buf tmp = {0, 0, 0};
        e |= lst__json(&tmp, name);
        if (!e) e |= lst__put(&w->header, tmp.p + 1, tmp.len - 1);
        free(tmp.p);
    }
    e |= lst__str(&w->header, ":{\"dtype\":\"");
    e |= lst__str(&w->header, dtype);
    e |= lst__str(&w->header, "\",\"shape\":[");
    for (int i = 0; i < ndim; i++) {
        if (i) e |= lst__str(&w->header, ",");
        e |= lst__num(&w->header, (long long)shape[i]);
    }
    e |= lst__str(&w->header, "],\"data_offsets\":[");
    e |= lst__num(&w->header, (long long)start);
    e |= lst__str(&w->header, ",");
    e |= lst__num(&w->header, (long long)(start + bytes));
    e |= lst__str(&w->header, "]}");
    /* Safetensors data is little-endian; so is every machine this header targets (checked in
       lst_close). */
    e |= lst__put(&w->data, data, bytes);
    if (e) return lst__fail(w, "out of memory");
    return 0;
}

int lst_tap_f32(lst_writer *w, const char *name, const float *data, const size_t *shape, int ndim) {
    return lst__tap(w, name, data, 4, "F32", shape, ndim);
}

int lst_tap_f16(lst_writer *w, const char *name, const uint16_t *data, const size_t *shape, int ndim) {
    return lst__tap(w, name, data, 2, "F16", shape, ndim);
}

int lst_close(lst_writer *w) {
    if (!w) return lst__fail(NULL, "lst_close: NULL writer");
    int rc = 0;
    const uint16_t one = 1;
    if (w->failed) {
        rc = -1;
    } else if (*(const unsigned char *)&one != 1) {
        rc = lst__fail(w, "big-endian machines are not supported");
    } else {
        lst__buf h = {0, 0, 0};
        int e = lst__str(&h, "{\"__metadata__\":{\"lockstep.trace\":\"1\"");
        e |= lst__put(&h, w->meta.p ? w->meta.p : "", w->meta.len);
        e |= lst__str(&h, ",\"steps\":");
        {
            lst__buf s = {0, 0, 0};
            e |= lst__str(&s, "[");
            e |= lst__put(&s, w->steps.p ? w->steps.p : "", w->steps.len);
            e |= lst__str(&s, "]");
            if (!e) e |= lst__json(&h, s.p);
            free(s.p);
        }
        e |= lst__str(&h, "}");
        e |= lst__put(&h, w->header.p ? w->header.p : "", w->header.len);
        e |= lst__str(&h, "}");
        while (!e && h.len % 8) e |= lst__str(&h, " ");
        if (e) {
            rc = lst__fail(w, "out of memory");
        } else {
            FILE *f = fopen(w->path, "wb");
            unsigned char n8[8];
            uint64_t n = h.len;
            for (int i = 0; i < 8; i++) n8[i] = (unsigned char)(n >> (8 * i));
            if (!f) {
                rc = lst__fail(w, "cannot open the output file");
            } else {
                if (fwrite(n8, 1, 8, f) != 8 || fwrite(h.p, 1, h.len, f) != h.len ||
                    (w->data.len && fwrite(w->data.p, 1, w->data.len, f) != w->data.len))
                    rc = lst__fail(w, "write failed");
                if (fclose(f) != 0 && rc == 0) rc = lst__fail(w, "write failed");
            }
        }
        free(h.p);
    }
    lst__free(w);
    return rc;
}

#endif /* LOCKSTEP_TRACE_IMPLEMENTATION */
#endif /* LOCKSTEP_TRACE_H */

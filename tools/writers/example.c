/* Example: an engine writing a lockstep trace with lockstep_trace.h.
 *
 * The "engine" replays tensors from a plain dump (what crates/cli/tests/writers.rs makes from
 * lockstep's reference trace: for each step its tokens, positions and named f32 tensors), so the
 * example runs anywhere; in a real engine the arrays come from your kernels. An optional
 * STEP:TAP:FACTOR scales one tensor of one step, as a broken kernel would.
 *
 *   cc -O2 -o example tools/writers/example.c
 *   ./example taps.bin mine.safetensors [1:blk.2.ffn_up:1.01]
 *   lockstep diff -m smollm2 --ref ref mine.safetensors
 *
 * Dump format (little-endian): "LSTAPS1\0", u32 n_steps; per step: u32 n, i32 tokens[n],
 * i32 positions[n], u32 n_tensors; per tensor: u32 name_len, name, u32 ndim, u64 shape[ndim],
 * f32 values.
 */
#define LOCKSTEP_TRACE_IMPLEMENTATION
#include "lockstep_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rd(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n ? 0 : -1; }

static int fail(const char *m) {
    fprintf(stderr, "example: %s\n", m);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) return fail("usage: example TAPS.bin OUT.safetensors [STEP:TAP:FACTOR]");
    long bad_step = -1;
    char bad_tap[256] = "";
    double bad_factor = 1.0;
    if (argc > 3 && sscanf(argv[3], "%ld:%255[^:]:%lf", &bad_step, bad_tap, &bad_factor) != 3)
        return fail("perturbation must be STEP:TAP:FACTOR");
    FILE *f = fopen(argv[1], "rb");
    if (!f) return fail("cannot open the dump");
    char magic[8];
    uint32_t n_steps;
    if (rd(f, magic, 8) || memcmp(magic, "LSTAPS1", 8) || rd(f, &n_steps, 4)) return fail("not a tap dump");

    /* --- what an engine author writes: open, one lst_step per forward pass, one lst_tap per op output, close */
    lst_writer *w = lst_open(argv[2], "example-c-engine", NULL);
    if (!w) return fail(lst_error());
    for (uint32_t s = 0; s < n_steps; s++) {
        uint32_t n, n_tensors;
        if (rd(f, &n, 4) || n == 0 || n > (1u << 24)) return fail("bad step");
        int32_t *tok = malloc(n * 4), *pos = malloc(n * 4);
        if (!tok || !pos || rd(f, tok, n * 4) || rd(f, pos, n * 4) || rd(f, &n_tensors, 4)) return fail("bad step");
        if (lst_step(w, tok, pos, n)) return fail(lst_error());
        free(tok);
        free(pos);
        for (uint32_t t = 0; t < n_tensors; t++) {
            uint32_t len, ndim;
            char name[256];
            uint64_t shape64[8];
            size_t shape[8], count = 1;
            if (rd(f, &len, 4) || len == 0 || len > 255 || rd(f, name, len)) return fail("bad name");
            name[len] = 0;
            if (rd(f, &ndim, 4) || ndim < 1 || ndim > 8 || rd(f, shape64, 8 * ndim)) return fail("bad shape");
            for (uint32_t i = 0; i < ndim; i++) {
                shape[i] = (size_t)shape64[i];
                count *= shape[i];
            }
            float *x = malloc(count * 4 + 4);
            if (!x || rd(f, x, count * 4)) return fail("bad data");
            if ((long)s == bad_step && !strcmp(name, bad_tap))
                for (size_t i = 0; i < count; i++) x[i] = (float)(x[i] * bad_factor);
            if (lst_tap_f32(w, name, x, shape, (int)ndim)) return fail(lst_error());
            free(x);
        }
    }
    if (lst_close(w)) return fail(lst_error());
    /* --- */
    fclose(f);
    fprintf(stderr, "wrote %s: %u steps\n", argv[2], n_steps);
    return 0;
}

/* SPDX-License-Identifier: Apache-2.0
 * libFuzzer target for the store's frame parser (make fuzz). The first input byte picks the
 * limits (PyTorch's defaults or small ones, so that every limit check is reachable); the rest
 * is parsed the way the server does: frame after frame until an error or an incomplete tail, once
 * in today's command numbering and once in PyTorch <= 2.0's (the workers' store's legacy clients).
 * Each parsed list is walked and each key formatted, and the parser's promises are checked:
 * a frame never extends past the input, and "incomplete" always asks for more than is there. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_err.h"
#include "rdzv_frame_int.h"
#include "rdzv_limits.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Parses data frame after frame, checking the parser's promises; legacy: codes are PyTorch <=
 * 2.0's (rdzv__legacy_cmd), and a code with no meaning there ends the walk as the server would. */
static void walk(const uint8_t *data, size_t size, const rdzv_frame_limits_t *lim, int legacy) {
    size_t off = 0;
    char repr[300];
    while (off < size) {
        int cmd = legacy ? rdzv__legacy_cmd(data[off]) : data[off];
        if (cmd < 0)
            return;
        rdzv_req_t r;
        size_t need = 0;
        ddp_err_t err;
        ddp_err_clear(&err);
        long n = rdzv__frame_parse_as((uint8_t)cmd, data + off, size - off, lim, &r, &need, &err);
        if (n < 0) {
            if (err.code != n || err.text[0] == '\0' || err.offset < 0 ||
                (size_t)err.offset > size - off)
                abort();
            return;
        }
        if (n == 0) {
            if (need <= size - off)
                abort();
            return;
        }
        if ((size_t)n > size - off || (size_t)n > lim->max_frame || r.cmd != cmd)
            abort();
        if (r.key.p != NULL)
            rdzv__key_repr(r.key.p, r.key.n, repr, sizeof repr);
        if (r.list.p != NULL) {
            const uint8_t *cur = r.list.p;
            for (uint64_t i = 0; i < r.nkeys; i++) {
                rdzv_slice_t k, v;
                rdzv__list_next(&cur, r.cmd == RDZV_CMD_MULTI_SET, &k, &v);
                if (k.n > lim->max_key_len)
                    abort();
                rdzv__key_repr(k.p, k.n, repr, sizeof repr);
            }
            if (cur != r.list.p + r.list.n)
                abort();
        }
        off += (size_t)n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0)
        return 0;
    rdzv_frame_limits_t lim = {RDZV_MAX_KEY_LEN, RDZV_MAX_VALUE_LEN, RDZV_MAX_KEYS_PER_REQ,
                               RDZV_MAX_FRAME_LEN};
    if (data[0] & 1) {
        lim.max_key_len = 1 + (data[0] >> 1 & 7) * 4;
        lim.max_value_len = 1 + (data[0] >> 4) * 16;
        lim.max_keys = 1 + (data[0] >> 2 & 3);
        lim.max_frame = 16 + (data[0] >> 3) * 8;
    }
    data++;
    size--;
    walk(data, size, &lim, 0);
    walk(data, size, &lim, 1);
    return 0;
}

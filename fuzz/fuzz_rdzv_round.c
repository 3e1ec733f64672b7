/* SPDX-License-Identifier: Apache-2.0
 * libFuzzer target for the rendezvous codec (make fuzz): the request parser the server runs on
 * commands 0x50-0x55 and the reply parser the agents run. Same promises as the frame parser:
 * a frame never extends past the input, "incomplete" asks for more than is there, and an error
 * is reported with its code and text. The first input byte picks request or reply. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_err.h"
#include "rdzv_round.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2)
        return 0;
    int reply = data[0] & 1;
    data++;
    size--;
    size_t need = 0;
    ddp_err_t err;
    ddp_err_clear(&err);
    long n;
    if (reply) {
        rdzv_round_reply_t rep;
        memset(&rep, 0, sizeof rep);
        n = rdzv_round_reply_parse(data, size, &rep, &need, &err);
        ddp_buf_free(&rep.text);
    } else {
        rdzv_round_req_t req;
        n = rdzv_round_req_parse(data, size, &req, &need, &err);
        if (n > 0 && (memchr(req.join.run_id, 0, sizeof req.join.run_id) == NULL ||
                      memchr(req.join.host, 0, sizeof req.join.host) == NULL))
            abort(); /* strings are always terminated */
    }
    if (n < 0 && (err.code != n || err.text[0] == '\0'))
        abort();
    if (n == 0 && need <= size)
        abort();
    if (n > 0 && (size_t)n > size)
        abort();
    return 0;
}

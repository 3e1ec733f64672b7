/* SPDX-License-Identifier: Apache-2.0
 * libFuzzer target for the rendezvous codec (make fuzz): the request parser the server runs on
 * the commands of rdzv_commands.h and the reply parser the agents run. Same promises as the frame
 * parser: a frame never extends past the input, "incomplete" asks for more than is there, an
 * error is reported with its code and text, and what parses is a command of the registry. The
 * first input byte picks request or reply (bit 0) and, with bit 1 set, aims at the registry's
 * commands: the frame's first byte becomes the command its own value picks among them, so that
 * every command's fields are reached without the fuzzer having to find its code first. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_err.h"
#include "rdzv_round.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t commands[] = {
#define X(code, NAME, name, req, rep) code,
    RDZV_COMMANDS(X)
#undef X
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2)
        return 0;
    int reply = data[0] & 1, aim = data[0] & 2;
    data++;
    size--;
    /* A copy of exactly size bytes: a read past the frame still trips the address sanitizer. */
    uint8_t *in = malloc(size);
    if (in == NULL)
        return 0;
    memcpy(in, data, size);
    if (aim)
        in[0] = commands[in[0] % sizeof commands];
    size_t need = 0;
    ddp_err_t err;
    ddp_err_clear(&err);
    long n;
    uint8_t cmd = 0;
    if (reply) {
        rdzv_round_reply_t rep;
        memset(&rep, 0, sizeof rep);
        n = rdzv_round_reply_parse(in, size, &rep, &need, &err);
        cmd = rep.cmd;
        ddp_buf_free(&rep.text);
    } else {
        rdzv_round_req_t req;
        n = rdzv_round_req_parse(in, size, &req, &need, &err);
        cmd = req.cmd;
        if (n > 0 && (memchr(req.join.run_id, 0, sizeof req.join.run_id) == NULL ||
                      memchr(req.join.host, 0, sizeof req.join.host) == NULL))
            abort(); /* strings are always terminated */
    }
    if (n > 0 && (cmd != in[0] || rdzv_round_cmd_name(cmd) == NULL))
        abort(); /* a frame that parses is a command of the registry */
    free(in);
    if (n < 0 && (err.code != n || err.text[0] == '\0'))
        abort();
    if (n == 0 && need <= size)
        abort();
    if (n > 0 && (size_t)n > size)
        abort();
    return 0;
}

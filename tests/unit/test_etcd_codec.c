/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the etcd client's codec (rendezvous/etcd/rdzv_etcd_json.c): base64 against
 * RFC 4648's vectors and every byte, strict decoding; the request bodies (prefix range ends,
 * txn compares and ops, bounds); replies as etcd 3.4 writes them, and garbage or hostile ones
 * (not JSON, wrong types, huge numbers, missing fields, non-base64, duplicate keys, deep
 * nesting): each decoded into the structs or refused with DDP_EPROTO and a reason. The run's
 * records (rdzv_etcd_records.c): keys, values written and read back, and values that are not
 * records refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_etcd_json.h"
#include "rdzv_etcd_records.h"
#include "rdzv_etcd_store.h"

static char why[160];

/* Decodes text as a reply of kind into r; returns the status. */
static int dec(rdzv__etcd_kind_t kind, const char *text, rdzv__etcd_reply_t *r) {
    why[0] = '\0';
    return rdzv__etcd_decode(kind, text, strlen(text), r, why, sizeof why);
}

/* Expects text to be refused as a reply of kind, with a reason containing what. */
static void refused(rdzv__etcd_kind_t kind, const char *text, const char *what) {
    rdzv__etcd_reply_t r;
    assert_int_equal(dec(kind, text, &r), DDP_EPROTO);
    if (strstr(why, what) == NULL)
        fail_msg("reply %.60s: reason '%s' lacks '%s'", text, why, what);
    assert_null(r.kvs);
    assert_null(r.events);
}

static void test_b64_vectors(void **state) {
    (void)state;
    const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *out[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        char enc[16];
        uint8_t back[16];
        size_t n = 99;
        assert_int_equal(rdzv__etcd_b64_encode(in[i], strlen(in[i]), enc), strlen(out[i]));
        assert_string_equal(enc, out[i]);
        assert_int_equal(rdzv__etcd_b64_decode(enc, strlen(enc), back, &n), 0);
        assert_int_equal(n, strlen(in[i]));
        assert_memory_equal(back, in[i], n);
    }
    uint8_t all[256], back[256];
    char enc[RDZV_ETCD_B64_LEN(256)];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)(255 - i);
    size_t len = rdzv__etcd_b64_encode(all, 256, enc), n = 0;
    assert_int_equal(len, 344);
    assert_int_equal(rdzv__etcd_b64_decode(enc, len, back, &n), 0);
    assert_int_equal(n, 256);
    assert_memory_equal(back, all, 256);
}

static void test_b64_strict(void **state) {
    (void)state;
    const char *bad[] = {"Zm9",  "Zm=v",      "Zg==Zg==", "Z===", "Zm9v\n", "Zm9*",
                         "=AAA", "Zm9v Zm9v", "Zg=A",     "Zm9-", "Zm9_",   "\x80xyz"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t out[16];
        size_t n = 0;
        if (rdzv__etcd_b64_decode(bad[i], strlen(bad[i]), out, &n) != DDP_EPROTO)
            fail_msg("'%s' decoded", bad[i]);
    }
}

/* Reads the JSON text s (freed) and returns obj[name] as decoded base64 in a static buffer. */
static const char *field_b64(json_t *o, const char *name, size_t *n) {
    static uint8_t buf[64];
    const json_t *f = json_object_get(o, name);
    assert_true(json_is_string(f));
    assert_int_equal(rdzv__etcd_b64_decode(json_string_value(f), json_string_length(f), buf, n), 0);
    buf[*n] = 0;
    return (const char *)buf;
}

static json_t *load(char *text) {
    json_t *o = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(o);
    return o;
}

static void test_prefix_range_end(void **state) {
    (void)state;
    struct {
        const char *key;
        size_t len;
        const char *end;
        size_t end_len;
    } cases[] = {
        {"a/", 2, "a0", 2},
        {"a\xff", 2, "b", 1},
        {"\xff\xff", 2, "\0", 1},
        {"", 0, "\0", 1},
    };
    for (size_t i = 0; i < 4; i++) {
        char *text = NULL;
        assert_int_equal(
            rdzv__etcd_enc_range(cases[i].key, cases[i].len, RDZV_ETCD_PREFIX, 0, &text), 0);
        json_t *o = load(text);
        size_t n = 0;
        const char *end = field_b64(o, "range_end", &n);
        assert_int_equal(n, cases[i].end_len);
        assert_memory_equal(end, cases[i].end, n);
        json_decref(o);
    }
    /* Without the flag: the key alone; limit and keys_only as asked; a negative limit refused. */
    char *text = NULL;
    assert_int_equal(rdzv__etcd_enc_range("k", 1, RDZV_ETCD_KEYS_ONLY, 7, &text), 0);
    json_t *o = load(text);
    assert_null(json_object_get(o, "range_end"));
    assert_string_equal(json_string_value(json_object_get(o, "limit")), "7");
    assert_true(json_is_true(json_object_get(o, "keys_only")));
    json_decref(o);
    assert_int_equal(rdzv__etcd_enc_range("k", 1, 0, -1, &text), -EINVAL);
    assert_null(text);
}

static void test_enc_txn(void **state) {
    (void)state;
    rdzv_etcd_compare_t cmps[2] = {
        {.key = "a", .key_len = 1, .target = RDZV_ETCD_CMP_CREATE, .cmp = RDZV_ETCD_EQUAL},
        {.key = "b",
         .key_len = 1,
         .target = RDZV_ETCD_CMP_VALUE,
         .cmp = RDZV_ETCD_NOT_EQUAL,
         .value = "v",
         .value_len = 1},
    };
    rdzv_etcd_op_t ok[2] = {
        {.kind = RDZV_ETCD_OP_PUT,
         .key = "a",
         .key_len = 1,
         .value = "x",
         .value_len = 1,
         .lease = 42},
        {.kind = RDZV_ETCD_OP_DELETE, .key = "p/", .key_len = 2, .flags = RDZV_ETCD_PREFIX},
    };
    rdzv_etcd_txn_t txn = {.compares = cmps, .n_compares = 2, .success = ok, .n_success = 2};
    char *text = NULL;
    assert_int_equal(rdzv__etcd_enc_txn(&txn, &text), 0);
    json_t *o = load(text);
    json_t *c0 = json_array_get(json_object_get(o, "compare"), 0);
    json_t *c1 = json_array_get(json_object_get(o, "compare"), 1);
    assert_string_equal(json_string_value(json_object_get(c0, "target")), "CREATE");
    assert_string_equal(json_string_value(json_object_get(c0, "result")), "EQUAL");
    assert_string_equal(json_string_value(json_object_get(c0, "create_revision")), "0");
    assert_string_equal(json_string_value(json_object_get(c1, "target")), "VALUE");
    assert_string_equal(json_string_value(json_object_get(c1, "result")), "NOT_EQUAL");
    assert_string_equal(json_string_value(json_object_get(c1, "value")), "dg==");
    json_t *put = json_object_get(json_array_get(json_object_get(o, "success"), 0), "request_put");
    assert_string_equal(json_string_value(json_object_get(put, "lease")), "42");
    json_t *del =
        json_object_get(json_array_get(json_object_get(o, "success"), 1), "request_delete_range");
    size_t n = 0;
    assert_string_equal(field_b64(del, "range_end", &n), "p0");
    assert_int_equal(json_array_size(json_object_get(o, "failure")), 0);
    json_decref(o);

    cmps[0].target = (rdzv_etcd_target_t)9;
    assert_int_equal(rdzv__etcd_enc_txn(&txn, &text), -EINVAL);
    cmps[0].target = RDZV_ETCD_CMP_MOD;
    txn.n_success = RDZV_ETCD_TXN_MAX_OPS + 1;
    assert_int_equal(rdzv__etcd_enc_txn(&txn, &text), DDP_ETOOBIG);
    assert_null(text);
}

static void test_enc_bounds(void **state) {
    (void)state;
    char *text = NULL;
    assert_int_equal(rdzv__etcd_enc_lease(RDZV_ETCD_GRANT, 0, &text), -EINVAL);
    assert_int_equal(rdzv__etcd_enc_lease(RDZV_ETCD_GRANT, (int64_t)INT32_MAX + 1, &text), -EINVAL);
    assert_int_equal(rdzv__etcd_enc_lease(RDZV_ETCD_REVOKE, -5, &text), -EINVAL);
    assert_int_equal(rdzv__etcd_enc_put("k", 1, "v", 1, -1, &text), -EINVAL);
    assert_int_equal(rdzv__etcd_enc_watch("k", 1, 0, -1, &text), -EINVAL);
    assert_int_equal(rdzv__etcd_enc_lease(RDZV_ETCD_KEEPALIVE, INT64_MAX, &text), 0);
    json_t *o = load(text);
    assert_string_equal(json_string_value(json_object_get(o, "ID")), "9223372036854775807");
    json_decref(o);
    assert_int_equal(rdzv__etcd_enc_watch("k", 1, RDZV_ETCD_PREFIX, 12, &text), 0);
    o = load(text);
    json_t *req = json_object_get(o, "create_request");
    assert_string_equal(json_string_value(json_object_get(req, "start_revision")), "12");
    assert_string_equal(json_string_value(json_object_get(req, "range_end")), "bA==");
    json_decref(o);
}

/* Replies as etcd 3.4's gateway writes them. */
static void test_decode_etcd_replies(void **state) {
    (void)state;
    rdzv__etcd_reply_t r;
    assert_int_equal(dec(RDZV_ETCD_RANGE,
                         "{\"header\":{\"cluster_id\":\"15118495548433857066\",\"revision\":\"6\","
                         "\"raft_term\":\"2\"},\"kvs\":[{\"key\":\"Zm9vL2E=\",\"create_revision\":"
                         "\"5\",\"mod_revision\":\"5\",\"version\":\"1\",\"value\":\"MQ==\"},"
                         "{\"key\":\"Zm9vL2I=\",\"create_revision\":\"6\",\"mod_revision\":\"6\","
                         "\"version\":\"1\",\"lease\":\"77\"}],\"count\":\"2\"}",
                         &r),
                     0);
    assert_int_equal(r.res.revision, 6);
    assert_int_equal(r.res.n_kvs, 2);
    assert_int_equal(r.res.count, 2);
    assert_int_equal(r.res.more, 0);
    assert_string_equal((const char *)r.res.kvs[0].key, "foo/a");
    assert_int_equal(r.res.kvs[0].value_len, 1);
    assert_string_equal((const char *)r.res.kvs[0].value, "1");
    assert_int_equal(r.res.kvs[1].value_len, 0); /* keys_only: no value */
    assert_int_equal(r.res.kvs[1].lease, 77);
    rdzv__etcd_reply_free(&r);

    /* Fields at their zero value are left out: an empty range, a txn that failed. */
    assert_int_equal(dec(RDZV_ETCD_RANGE, "{\"header\":{\"revision\":\"2\"}}", &r), 0);
    assert_int_equal(r.res.n_kvs, 0);
    assert_null(r.res.kvs);
    assert_int_equal(dec(RDZV_ETCD_TXN, "{\"header\":{\"revision\":\"2\"},\"responses\":[]}", &r),
                     0);
    assert_int_equal(r.res.succeeded, 0);
    assert_int_equal(dec(RDZV_ETCD_TXN, "{\"header\":{\"revision\":7},\"succeeded\":true}", &r), 0);
    assert_int_equal(r.res.succeeded, 1);
    assert_int_equal(r.res.revision, 7);
    assert_int_equal(dec(RDZV_ETCD_DELETE, "{\"header\":{},\"deleted\":\"3\"}", &r), 0);
    assert_int_equal(r.res.deleted, 3);
    assert_int_equal(dec(RDZV_ETCD_GRANT,
                         "{\"header\":{\"revision\":\"2\"},\"ID\":\"4111120491621046537\","
                         "\"TTL\":\"2\"}",
                         &r),
                     0);
    assert_true(r.res.lease_id == INT64_C(4111120491621046537));
    assert_int_equal(r.res.lease_ttl, 2);
    /* A keepalive of an unknown lease: a result with no TTL (the client says DDP_ENOKEY). */
    assert_int_equal(dec(RDZV_ETCD_KEEPALIVE, "{\"result\":{\"header\":{},\"ID\":\"123\"}}\n", &r),
                     0);
    assert_int_equal(r.res.lease_id, 123);
    assert_int_equal(r.res.lease_ttl, 0);
    assert_int_equal(dec(RDZV_ETCD_AUTH, "{\"header\":{},\"token\":\"abc.DEF.12\"}", &r), 0);
    assert_string_equal(r.token, "abc.DEF.12");
    rdzv__etcd_reply_free(&r);
}

static void test_decode_watch(void **state) {
    (void)state;
    rdzv__etcd_reply_t r;
    assert_int_equal(
        dec(RDZV_ETCD_WATCH, "{\"result\":{\"header\":{\"revision\":\"9\"},\"created\":true}}", &r),
        0);
    assert_int_equal(r.watch.created, 1);
    assert_int_equal(r.watch.revision, 9);
    assert_int_equal(r.watch.n_events, 0);
    assert_int_equal(
        dec(RDZV_ETCD_WATCH,
            "{\"result\":{\"header\":{\"revision\":\"12\"},\"events\":[{\"kv\":{\"key\":"
            "\"dy94\",\"create_revision\":\"10\",\"mod_revision\":\"10\",\"version\":"
            "\"1\",\"value\":\"MQ==\"}},{\"type\":\"DELETE\",\"kv\":{\"key\":\"dy94\","
            "\"mod_revision\":\"12\"}}]}}",
            &r),
        0);
    assert_int_equal(r.watch.n_events, 2);
    assert_int_equal(r.watch.events[0].type, RDZV_ETCD_EV_PUT);
    assert_string_equal((const char *)r.watch.events[0].kv.value, "1");
    assert_int_equal(r.watch.events[1].type, RDZV_ETCD_EV_DELETE);
    assert_string_equal((const char *)r.watch.events[1].kv.key, "w/x");
    assert_int_equal(r.watch.events[1].kv.mod_revision, 12);
    rdzv__etcd_reply_free(&r);
    /* etcd ends a watch whose start was compacted away; a stream error carries a grpc code. */
    assert_int_equal(
        dec(RDZV_ETCD_WATCH,
            "{\"result\":{\"header\":{},\"canceled\":true,\"compact_revision\":\"4\"}}", &r),
        0);
    assert_int_equal(r.canceled, 1);
    assert_int_equal(r.watch.compact_revision, 4);
    assert_int_equal(dec(RDZV_ETCD_WATCH,
                         "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":\"no leader\","
                         "\"code\":14}}",
                         &r),
                     0);
    assert_int_equal(r.stream_err, 1);
    assert_int_equal(r.grpc_code, 14);
    assert_string_equal(why, "no leader");
}

static void test_decode_hostile(void **state) {
    (void)state;
    refused(RDZV_ETCD_PUT, "{not json", "not JSON");
    refused(RDZV_ETCD_PUT, "", "not JSON");
    refused(RDZV_ETCD_PUT, "[1,2]", "not a JSON object");
    refused(RDZV_ETCD_PUT, "{}", "no header");
    refused(RDZV_ETCD_PUT, "{\"header\":[]}", "no header");
    refused(RDZV_ETCD_PUT, "{\"header\":{\"revision\":\"abc\"}}", "'revision' is not an int64");
    refused(RDZV_ETCD_PUT, "{\"header\":{\"revision\":\"99999999999999999999\"}}",
            "'revision' is out of range");
    refused(RDZV_ETCD_PUT, "{\"header\":{\"revision\":\"123456789012345678901234\"}}",
            "'revision' is not an int64");
    refused(RDZV_ETCD_PUT, "{\"header\":{\"revision\":99999999999999999999}}", "not JSON");
    refused(RDZV_ETCD_PUT, "{\"header\":{\"revision\":1e400}}", "not JSON");
    refused(RDZV_ETCD_PUT, "{\"header\":{\"revision\":1.5}}", "'revision' is not a number");
    refused(RDZV_ETCD_PUT, "{\"header\":{\"revision\":\"-1\"}}", "negative revision");
    refused(RDZV_ETCD_PUT, "{\"header\":{\"revision\":\"+1\"}}", "not an int64");
    refused(RDZV_ETCD_PUT, "{\"header\":{\"revision\":\"\"}}", "not an int64");
    refused(RDZV_ETCD_PUT, "{\"header\":{\"revision\":\"1\"},\"header\":{}}", "not JSON");
    refused(RDZV_ETCD_RANGE, "{\"header\":{},\"kvs\":{}}", "'kvs' is not an array");
    refused(RDZV_ETCD_RANGE, "{\"header\":{},\"kvs\":[1]}", "not an object");
    refused(RDZV_ETCD_RANGE, "{\"header\":{},\"kvs\":[{\"key\":\"Zm9\"}]}", "'key' is not base64");
    refused(RDZV_ETCD_RANGE, "{\"header\":{},\"kvs\":[{\"key\":\"Zg==\",\"value\":5}]}",
            "'value' is not a string");
    refused(RDZV_ETCD_RANGE,
            "{\"header\":{},\"kvs\":[{\"key\":\"Zg==\"},{\"key\":\"Zg==\",\"version\":true}]}",
            "'version' is not a number");
    refused(RDZV_ETCD_RANGE, "{\"header\":{},\"count\":\"1e3\"}", "'count' is not an int64");
    refused(RDZV_ETCD_RANGE, "{\"header\":{},\"more\":\"true\"}", "'more' is not a boolean");
    refused(RDZV_ETCD_TXN, "{\"header\":{},\"succeeded\":\"yes\"}", "not a boolean");
    refused(RDZV_ETCD_GRANT, "{\"header\":{},\"TTL\":\"5\"}", "no ID or TTL");
    refused(RDZV_ETCD_GRANT, "{\"header\":{},\"ID\":\"-3\",\"TTL\":\"5\"}", "no ID or TTL");
    refused(RDZV_ETCD_KEEPALIVE, "{\"header\":{},\"ID\":\"1\"}", "no result");
    refused(RDZV_ETCD_KEEPALIVE, "{\"result\":{\"ID\":\"1\"}}", "no header");
    refused(RDZV_ETCD_WATCH, "{\"result\":{\"header\":{},\"events\":{}}}", "not an array");
    refused(RDZV_ETCD_WATCH, "{\"result\":{\"header\":{},\"events\":[{\"type\":\"EXPLODE\"}]}}",
            "neither PUT nor DELETE");
    refused(RDZV_ETCD_WATCH,
            "{\"result\":{\"header\":{},\"events\":[{\"kv\":{\"key\":\"Zg==\"}},{\"kv\":7}]}}",
            "not an object");
    refused(RDZV_ETCD_WATCH, "{\"result\":{\"header\":{},\"created\":1}}", "not a boolean");
    refused(RDZV_ETCD_AUTH, "{\"header\":{}}", "no token");
    refused(RDZV_ETCD_AUTH, "{\"header\":{},\"token\":\"a\\r\\nX-Evil: 1\"}", "not printable");
    /* Nesting far past jansson's depth limit is refused, not a stack overflow. */
    size_t deep = 200000;
    char *text = malloc(2 * deep + 1);
    assert_non_null(text);
    memset(text, '[', deep);
    memset(text + deep, ']', deep);
    text[2 * deep] = '\0';
    refused(RDZV_ETCD_PUT, text, "not JSON");
    free(text);
}

static void test_decode_error_body(void **state) {
    (void)state;
    char msg[64];
    const char *nf = "{\"error\":\"etcdserver: requested lease not found\",\"message\":"
                     "\"etcdserver: requested lease not found\",\"code\":5}";
    assert_int_equal(rdzv__etcd_decode_error(nf, strlen(nf), msg, sizeof msg), 5);
    assert_string_equal(msg, "etcdserver: requested lease not found");
    const char *ctl = "{\"message\":\"bad\\u0007\\nline\",\"code\":3}";
    assert_int_equal(rdzv__etcd_decode_error(ctl, strlen(ctl), msg, sizeof msg), 3);
    assert_string_equal(msg, "bad??line");
    assert_int_equal(rdzv__etcd_decode_error("<html>", 6, msg, sizeof msg), -1);
    assert_string_equal(msg, "the error reply is not JSON");
    const char *big = "{\"message\":\"x\",\"code\":99999}";
    assert_int_equal(rdzv__etcd_decode_error(big, strlen(big), msg, sizeof msg), -1);
    /* A long message is cut to the buffer. */
    char longmsg[300] = "{\"message\":\"";
    memset(longmsg + 12, 'm', 200);
    strcpy(longmsg + 212, "\",\"code\":2}");
    assert_int_equal(rdzv__etcd_decode_error(longmsg, strlen(longmsg), msg, sizeof msg), 2);
    assert_int_equal(strlen(msg), sizeof msg - 1);
}

/* The leader key's value (rdzv_etcd_store.h): what a candidate writes reads back the same, and a
 * value that is not a store's address is refused. */
static void test_store_addr(void **state) {
    (void)state;
    char v[300], addr[64];
    int port = 0;
    rdzv_etcd_store_addr_format(v, sizeof v, "10.0.0.7", 29400);
    assert_string_equal(v, "10.0.0.7:29400");
    assert_int_equal(
        rdzv_etcd_store_addr_parse((const uint8_t *)v, strlen(v), addr, sizeof addr, &port), 0);
    assert_string_equal(addr, "10.0.0.7");
    assert_int_equal(port, 29400);
    rdzv_etcd_store_addr_format(v, sizeof v, "fd00::1", 1);
    assert_string_equal(v, "[fd00::1]:1");
    assert_int_equal(
        rdzv_etcd_store_addr_parse((const uint8_t *)v, strlen(v), addr, sizeof addr, &port), 0);
    assert_string_equal(addr, "fd00::1");
    assert_int_equal(port, 1);
    const char *bad[] = {"",      "host",   ":80",    "h:0",   "h:65536",
                         "h:80x", "h o:80", "h/x:80", "h\n:80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(rdzv_etcd_store_addr_parse((const uint8_t *)bad[i], strlen(bad[i]), addr,
                                                    sizeof addr, &port),
                         -EINVAL);
    /* A NUL inside, and a host longer than the caller's buffer. */
    assert_int_equal(
        rdzv_etcd_store_addr_parse((const uint8_t *)"a\0b:80", 6, addr, sizeof addr, &port),
        -EINVAL);
    char longv[120];
    memset(longv, 'a', 100);
    strcpy(longv + 100, ":80");
    assert_int_equal(
        rdzv_etcd_store_addr_parse((const uint8_t *)longv, strlen(longv), addr, sizeof addr, &port),
        -EINVAL);
}

static int record_decode(const char *what, const char *value, rdzv_etcd_record_t *out) {
    return rdzv_etcd_record_decode((const uint8_t *)what, strlen(what), (const uint8_t *)value,
                                   strlen(value), out);
}

/* A run's records: the key layout, what a leader writes reads back the same, and what is not a
 * record (another key of the run, a value of another shape) is told apart. */
static void test_records(void **state) {
    (void)state;
    char key[RDZV_ETCD_RECORDS_KEY_MAX];
    assert_int_equal(rdzv_etcd_records_key(key, sizeof key, "/ddprun", "job7", "done", NULL), 17);
    assert_string_equal(key, "/ddprun/job7/done");
    rdzv_etcd_records_key(key, sizeof key, "/p", "r", "hosts/", "10.0.0.3");
    assert_string_equal(key, "/p/r/hosts/10.0.0.3");
    assert_int_equal(rdzv_etcd_records_key(key, 8, "/ddprun", "job7", "done", NULL), -ENAMETOOLONG);

    rdzv_etcd_record_t rec;
    char *v = rdzv_etcd_record_done_encode(3);
    assert_string_equal(v, "{\"round\":3}");
    assert_int_equal(record_decode("done", v, &rec), RDZV_ETCD_RECORD_DONE);
    assert_int_equal(rec.round, 3);
    free(v);
    v = rdzv_etcd_record_host_encode(2, 1, "round 3: rank 5 exited with code 1");
    assert_string_equal(v, "{\"excluded\":true,\"failures\":2,\"last_failure\":\"round 3: rank 5 "
                           "exited with code 1\"}");
    assert_int_equal(record_decode("hosts/10.0.0.3", v, &rec), RDZV_ETCD_RECORD_HOST);
    assert_string_equal(rec.host, "10.0.0.3");
    assert_int_equal(rec.failures, 2);
    assert_int_equal(rec.excluded, 1);
    assert_string_equal(rec.last_failure, "round 3: rank 5 exited with code 1");
    free(v);

    /* The run's other keys are not records. */
    assert_int_equal(record_decode("leader", "10.0.0.1:29400", &rec), RDZV_ETCD_RECORD_OTHER);
    assert_int_equal(record_decode("hosts/", "{}", &rec), RDZV_ETCD_RECORD_OTHER);
    assert_int_equal(record_decode("doneX", "{\"round\":1}", &rec), RDZV_ETCD_RECORD_OTHER);
    /* Record keys holding something else. */
    const char *bad_done[] = {"",
                              "3",
                              "{\"round\":-1}",
                              "{\"round\":\"3\"}",
                              "{\"round\":3,\"x\":1}",
                              "{\"round\":1,\"round\":2}",
                              "{\"round\":3"};
    for (size_t i = 0; i < sizeof bad_done / sizeof bad_done[0]; i++)
        assert_int_equal(record_decode("done", bad_done[i], &rec), -EINVAL);
    const char *bad_host[] = {
        "{\"failures\":1,\"excluded\":true}",
        "{\"failures\":-1,\"excluded\":true,\"last_failure\":\"\"}",
        "{\"failures\":1,\"excluded\":1,\"last_failure\":\"\"}",
        "{\"failures\":1,\"excluded\":true,\"last_failure\":\"a\\u0000b\"}",
        "{\"failures\":1,\"excluded\":true,\"last_failure\":\"\",\"more\":0}"};
    for (size_t i = 0; i < sizeof bad_host / sizeof bad_host[0]; i++)
        assert_int_equal(record_decode("hosts/h", bad_host[i], &rec), -EINVAL);
    /* A host or a text longer than a record holds. */
    char what[400] = "hosts/";
    memset(what + 6, 'h', RDZV_ETCD_RECORD_HOST_MAX + 1);
    assert_int_equal(
        record_decode(what, "{\"failures\":1,\"excluded\":false,\"last_failure\":\"\"}", &rec),
        -EINVAL);
    char *longtext = malloc(RDZV_ETCD_RECORD_TEXT_MAX + 2);
    assert_non_null(longtext);
    memset(longtext, 'x', RDZV_ETCD_RECORD_TEXT_MAX + 1);
    longtext[RDZV_ETCD_RECORD_TEXT_MAX + 1] = '\0';
    v = rdzv_etcd_record_host_encode(1, 0, longtext);
    assert_int_equal(record_decode("hosts/h", v, &rec), -EINVAL);
    free(v);
    longtext[RDZV_ETCD_RECORD_TEXT_MAX] = '\0';
    v = rdzv_etcd_record_host_encode(1, 0, longtext);
    assert_int_equal(record_decode("hosts/h", v, &rec), RDZV_ETCD_RECORD_HOST);
    assert_int_equal(strlen(rec.last_failure), RDZV_ETCD_RECORD_TEXT_MAX);
    free(v);
    free(longtext);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b64_vectors),       cmocka_unit_test(test_b64_strict),
        cmocka_unit_test(test_prefix_range_end),  cmocka_unit_test(test_enc_txn),
        cmocka_unit_test(test_enc_bounds),        cmocka_unit_test(test_decode_etcd_replies),
        cmocka_unit_test(test_decode_watch),      cmocka_unit_test(test_decode_hostile),
        cmocka_unit_test(test_decode_error_body), cmocka_unit_test(test_store_addr),
        cmocka_unit_test(test_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

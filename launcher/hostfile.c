/* SPDX-License-Identifier: Apache-2.0
 * --hostfile, --hosts, --include and --exclude: the hosts of a job started over ssh, parsed and
 * checked before anything starts. Every error is one line naming the file and line (or the flag
 * and entry), since a hostfile is often generated and the user needs to find the bad line. */
#include "launch_hosts.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_escape.h"
#include "ddp_parse.h"
#include "launch_int.h"

/* Names and words are quoted in messages up to this many characters. */
#define HQ 48

/* Where an entry came from, for messages: "FILE:LINE" or "FLAG: entry N". */
typedef struct origin {
    const char *file; /* hostfile name, or NULL for a flag */
    const char *flag;
    int line;
} origin_t;

/* Records "<where>: '<word>' <what>" (or "<where>: <what>" when word is NULL). Returns
 * DDP_EUSAGE. The word is quoted escaped: it may hold the very byte refused. */
static int fail(ddp_err_t *err, const origin_t *o, const char *word, size_t wlen,
                const char *what) {
    char where[96], quoted[4 * HQ + 8] = "";
    if (o->file != NULL)
        snprintf(where, sizeof where, "--hostfile %.64s:%d", o->file, o->line);
    else
        snprintf(where, sizeof where, "%s: entry %d", o->flag, o->line);
    if (word == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "%s: %s", where, what);
    ddp_str_escape(quoted, sizeof quoted, word, wlen < HQ ? wlen : HQ);
    return ddp_err_set(err, DDP_EUSAGE, "%s: '%s%s' %s", where, quoted, wlen > HQ ? "..." : "",
                       what);
}

/* A host name as ssh is given it: letters, digits, '-', '.', '_', not starting with '-' (ssh
 * would read it as an option) or '.', at most LAUNCH_HOST_MAX characters. */
static int name_check(const char *s, size_t n, const origin_t *o, ddp_err_t *err) {
    if (n == 0)
        return fail(err, o, NULL, 0, "an empty host name");
    if (n > LAUNCH_HOST_MAX)
        return fail(err, o, s, n, "is longer than a host name may be (253)");
    if (s[0] == '-' || s[0] == '.')
        return fail(err, o, s, n, "is not a host name (it starts with '-' or '.')");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '-' && c != '.' && c != '_')
            return fail(err, o, s, n, "is not a host name (letters, digits, '-', '.', '_')");
    }
    return 0;
}

/* A slot count in 1..LAUNCH_MAX_NPROC: decimal digits only ("slots=+2" is a typo to point out,
 * not 2; a negative count is out of range). */
static int slots_get(const char *s, size_t n, const char *word, size_t wlen, const origin_t *o,
                     int *out, ddp_err_t *err) {
    char buf[24];
    int64_t v;
    if (n == 0 || n >= sizeof buf)
        return fail(err, o, word, wlen, "has no slot count (a number in 1..65536)");
    for (size_t i = s[0] == '-' && n > 1; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return fail(err, o, word, wlen, "has a slot count that is not a number");
    memcpy(buf, s, n);
    buf[n] = '\0';
    int rc = ddp_parse_i64(buf, 1, LAUNCH_MAX_NPROC, &v);
    if (rc == -ERANGE || (rc == 0 && v == 0))
        return fail(err, o, word, wlen, "is out of range (slots in 1..65536)");
    if (rc < 0)
        return fail(err, o, word, wlen, "has a slot count that is not a number");
    *out = (int)v;
    return 0;
}

/* The hosts listed so far, by name, so that a duplicate is found in constant time: a hostfile of
 * 65,536 hosts is checked in milliseconds, not minutes. Host names are compared as DNS does,
 * ignoring case: "NODEA" and "nodea" are one machine, which must not get two agents. Open
 * addressing with linear probing; the table is kept at most half full. */
typedef struct host_index {
    const launch_hosts_t *h;
    uint32_t *slot; /* 1 + the host's index in h->v, or 0 for an empty slot */
    size_t cap;     /* a power of two, or 0 before the first host */
} host_index_t;

/* FNV-1a over the lower-cased name. */
static uint32_t name_hash(const char *name, size_t n) {
    uint32_t x = 2166136261u;
    for (size_t i = 0; i < n; i++)
        x = (x ^ (uint32_t)tolower((unsigned char)name[i])) * 16777619u;
    return x;
}

static int name_same(const char *a, const char *b, size_t n) {
    return strlen(a) == n && strncasecmp(a, b, n) == 0;
}

/* The index in ix->h of the host named name[0..n) (any case), or -1. */
static long index_find(const host_index_t *ix, const char *name, size_t n) {
    if (ix->cap == 0)
        return -1;
    for (size_t i = name_hash(name, n) & (ix->cap - 1); ix->slot[i] != 0;
         i = (i + 1) & (ix->cap - 1))
        if (name_same(ix->h->v[ix->slot[i] - 1].name, name, n))
            return (long)ix->slot[i] - 1;
    return -1;
}

/* Puts v (1 + a host's index in h) in the first free slot of slot[0..cap) from its name's hash. */
static void slot_put(const launch_hosts_t *h, uint32_t *slot, size_t cap, uint32_t v) {
    const char *name = h->v[v - 1].name;
    size_t j = name_hash(name, strlen(name)) & (cap - 1);
    while (slot[j] != 0)
        j = (j + 1) & (cap - 1);
    slot[j] = v;
}

/* Records host number i of ix->h (not there yet), growing the table when it would pass half
 * full. Returns 0 or -ENOMEM. */
static int index_add(host_index_t *ix, size_t i) {
    if (2 * (i + 1) > ix->cap) {
        size_t cap = ix->cap ? 2 * ix->cap : 64;
        uint32_t *slot = calloc(cap, sizeof *slot);
        if (slot == NULL)
            return -ENOMEM;
        for (size_t k = 0; k < ix->cap; k++)
            if (ix->slot[k] != 0)
                slot_put(ix->h, slot, cap, ix->slot[k]);
        free(ix->slot);
        ix->slot = slot;
        ix->cap = cap;
    }
    slot_put(ix->h, ix->slot, ix->cap, (uint32_t)i + 1);
    return 0;
}

/* Indexes every host of h. Returns 0 or -ENOMEM; free ix->slot either way. */
static int index_build(host_index_t *ix, const launch_hosts_t *h) {
    *ix = (host_index_t){h, NULL, 0};
    for (size_t i = 0; i < h->n; i++)
        if (index_add(ix, i) < 0)
            return -ENOMEM;
    return 0;
}

/* A host list being parsed: the hosts, the room for them and their index. */
typedef struct hosts_build {
    launch_hosts_t *h;
    size_t room; /* entries allocated in h->v */
    host_index_t ix;
} hosts_build_t;

/* Appends a host after checking that it is not listed already (in any case). Takes nothing;
 * copies name. */
static int host_add(hosts_build_t *b, const char *name, size_t n, int slots, const origin_t *o,
                    ddp_err_t *err) {
    launch_hosts_t *h = b->h;
    long first = index_find(&b->ix, name, n);
    if (first >= 0) {
        const launch_host_t *f = &h->v[first];
        char what[4 * HQ + 96], quoted[4 * HQ + 8];
        int len = snprintf(what, sizeof what, "is listed twice (first %s %d",
                           o->file != NULL ? "on line" : "as entry", f->line);
        if (strncmp(f->name, name, n) != 0) { /* the same name in another case */
            ddp_str_escape(quoted, sizeof quoted, f->name,
                           strlen(f->name) < HQ ? strlen(f->name) : HQ);
            snprintf(what + len, sizeof what - (size_t)len, ", as '%s'; host names ignore case)",
                     quoted);
        } else {
            snprintf(what + len, sizeof what - (size_t)len, ")");
        }
        return fail(err, o, name, n, what);
    }
    if (h->n >= LAUNCH_MAX_NODES)
        return fail(err, o, NULL, 0, "more hosts than a job may have (65536)");
    if (h->n == b->room) {
        size_t room = b->room ? 2 * b->room : 16;
        launch_host_t *v = realloc(h->v, room * sizeof *v);
        if (v == NULL)
            return -ENOMEM;
        h->v = v;
        b->room = room;
    }
    char *copy = strndup(name, n);
    if (copy == NULL)
        return -ENOMEM;
    h->v[h->n] = (launch_host_t){copy, slots, o->line};
    int rc = index_add(&b->ix, h->n);
    h->n++; /* counted either way: launch_hosts_free frees the copy */
    return rc;
}

/* One entry without comment or surrounding blanks: "NAME", "NAME:N" or "NAME slots=N ...". */
static int entry_parse(hosts_build_t *b, const char *s, size_t len, int words_ok, const origin_t *o,
                       ddp_err_t *err) {
    size_t i = 0;
    while (i < len && !isspace((unsigned char)s[i]))
        i++;
    const char *colon = memchr(s, ':', i);
    size_t nlen = colon != NULL ? (size_t)(colon - s) : i;
    int slots = 0, rc = name_check(s, nlen, o, err);
    if (rc == 0 && colon != NULL)
        rc = slots_get(colon + 1, i - nlen - 1, s, i, o, &slots, err);
    while (rc == 0 && i < len) {
        while (i < len && isspace((unsigned char)s[i]))
            i++;
        const char *w = s + i;
        while (i < len && !isspace((unsigned char)s[i]))
            i++;
        size_t wl = (size_t)(s + i - w);
        if (wl == 0)
            break;
        int v;
        if (!words_ok)
            rc = fail(err, o, s, len, "is not NAME or NAME:N");
        else if (wl > 6 && memcmp(w, "slots=", 6) == 0) {
            if (colon != NULL || slots != 0)
                rc = fail(err, o, s, len, "gives the slot count twice");
            else
                rc = slots_get(w + 6, wl - 6, w, wl, o, &slots, err);
        } else if (wl > 10 && memcmp(w, "max_slots=", 10) == 0)
            rc = slots_get(w + 10, wl - 10, w, wl, o, &v, err); /* mpirun's; checked, not used */
        else
            rc = fail(err, o, w, wl, "is not a host's setting (NAME, NAME:N or NAME slots=N)");
    }
    return rc < 0 ? rc : host_add(b, s, nlen, slots, o, err);
}

int launch_hostfile_parse(const char *file, const char *text, size_t len, launch_hosts_t *out,
                          ddp_err_t *err) {
    memset(out, 0, sizeof *out);
    origin_t o = {file, NULL, 0};
    hosts_build_t b = {out, 0, {out, NULL, 0}};
    int rc = 0;
    for (size_t pos = 0; rc == 0 && pos < len;) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl != NULL ? (size_t)(nl - line) : len - pos;
        pos += n + (nl != NULL);
        o.line++;
        if (n > LAUNCH_HOSTFILE_MAX_LINE) {
            rc = fail(err, &o, NULL, 0, "a line longer than 1024 bytes");
            break;
        }
        const char *hash = memchr(line, '#', n);
        if (hash != NULL)
            n = (size_t)(hash - line);
        if (memchr(line, '\0', n) != NULL) {
            rc = fail(err, &o, NULL, 0, "a NUL byte (not a text file)");
            break;
        }
        while (n > 0 && isspace((unsigned char)*line))
            line++, n--;
        while (n > 0 && isspace((unsigned char)line[n - 1]))
            n--;
        if (n > 0)
            rc = entry_parse(&b, line, n, 1, &o, err);
    }
    free(b.ix.slot);
    if (rc == 0 && out->n == 0)
        rc = ddp_err_set(err, DDP_EUSAGE, "--hostfile %.64s: no hosts in it", file);
    if (rc < 0)
        launch_hosts_free(out);
    return rc;
}

int launch_hostfile_load(const char *path, launch_hosts_t *out, ddp_err_t *err) {
    memset(out, 0, sizeof *out);
    /* O_NONBLOCK: a FIFO given by mistake fails the regular-file check instead of hanging. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return ddp_err_set(err, DDP_EUSAGE, "--hostfile: unable to open %.96s: %s", path,
                           strerror(errno));
    struct stat st;
    const char *bad = NULL;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        bad = "not a regular file";
    else if (st.st_size > LAUNCH_HOSTFILE_MAX_BYTES)
        bad = "larger than 4 MiB";
    if (bad != NULL) {
        close(fd);
        return ddp_err_set(err, DDP_EUSAGE, "--hostfile: %.96s is %s", path, bad);
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        close(fd);
        return -ENOMEM;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    int rc = launch_hostfile_parse(path, buf, got, out, err);
    free(buf);
    return rc;
}

int launch_hosts_parse(const char *flag, const char *val, launch_hosts_t *out, ddp_err_t *err) {
    memset(out, 0, sizeof *out);
    origin_t o = {NULL, flag, 0};
    hosts_build_t b = {out, 0, {out, NULL, 0}};
    int rc = 0;
    const char *p = val;
    do {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        o.line++;
        rc = entry_parse(&b, p, n, 0, &o, err);
        p += n + 1;
        if (comma == NULL)
            break;
    } while (rc == 0);
    free(b.ix.slot);
    if (rc < 0)
        launch_hosts_free(out);
    return rc;
}

int launch_hosts_nnodes(size_t n, const char *src, int given, int min, int max, int *min_out,
                        int *max_out, ddp_err_t *err) {
    *min_out = *max_out = (int)n;
    if (!given)
        return 0;
    if (min == max && (size_t)min != n)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--nnodes: %s gives %zu host(s) and each runs one agent; --nnodes "
                           "must be %zu, MIN:MAX around it, or left out",
                           src, n, n);
    if ((size_t)min > n)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--nnodes: %d:%d needs at least %d hosts and %s gives %zu", min, max,
                           min, src, n);
    if ((size_t)max < n)
        return ddp_err_set(err, DDP_EUSAGE,
                           "--nnodes: %d:%d allows at most %d hosts and %s gives %zu (--exclude "
                           "drops hosts)",
                           min, max, max, src, n);
    *min_out = min;
    return 0;
}

/* Marks in keep[] the hosts a filter names (1) and checks every name. */
static int filter_mark(const host_index_t *ix, const char *flag, const char *val, char *keep,
                       ddp_err_t *err) {
    const char *p = val;
    for (;;) {
        size_t n = strcspn(p, ",@");
        if (n > 0) {
            if (memchr(p, ':', n) != NULL)
                return launch__bad_value(err, flag, val,
                                         "selects slots of a host (NAME:SLOTS), which ddprun does "
                                         "not support; name whole hosts");
            long i = index_find(ix, p, n);
            if (i < 0) {
                char quoted[4 * HQ + 8];
                ddp_str_escape(quoted, sizeof quoted, p, n < HQ ? n : HQ);
                return ddp_err_set(err, DDP_EUSAGE, "%s: '%s' is not one of the job's hosts", flag,
                                   quoted);
            }
            keep[i] = 1;
        }
        if (p[n] == '\0')
            return 0;
        p += n + 1;
    }
}

int launch_hosts_filter(launch_hosts_t *h, const char *include, const char *exclude,
                        ddp_err_t *err) {
    if (include == NULL && exclude == NULL)
        return 0;
    if (include != NULL && exclude != NULL)
        return ddp_err_set(err, DDP_EUSAGE, "--include and --exclude cannot be used together");
    char *mark = calloc(h->n ? h->n : 1, 1);
    if (mark == NULL)
        return -ENOMEM;
    const char *flag = include != NULL ? "--include" : "--exclude";
    host_index_t ix;
    int rc = index_build(&ix, h);
    if (rc == 0)
        rc = filter_mark(&ix, flag, include != NULL ? include : exclude, mark, err);
    free(ix.slot);
    size_t left = 0;
    for (size_t i = 0; rc == 0 && i < h->n; i++)
        left += include != NULL ? mark[i] : !mark[i];
    if (rc == 0 && left == 0)
        rc = ddp_err_set(err, DDP_EUSAGE, "%s leaves no host to run on", flag);
    if (rc < 0) {
        free(mark);
        return rc;
    }
    size_t k = 0;
    for (size_t i = 0; i < h->n; i++) {
        if ((include != NULL) == (mark[i] != 0))
            h->v[k++] = h->v[i];
        else
            free(h->v[i].name);
    }
    h->n = k;
    free(mark);
    return 0;
}

void launch_hosts_free(launch_hosts_t *h) {
    if (h == NULL)
        return;
    for (size_t i = 0; i < h->n; i++)
        free(h->v[i].name);
    free(h->v);
    memset(h, 0, sizeof *h);
}

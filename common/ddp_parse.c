/* ddp_parse_*: range-checked conversions used by every parser of user input. */
#include "ddp_parse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int ddp_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out) {
    if (s == NULL || *s == '\0')
        return -EINVAL;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0')
        return -EINVAL;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

int ddp_parse_seconds(const char *s, double *out) {
    if (s == NULL || *s == '\0')
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0' || errno != 0 || !isfinite(v) || v < 0)
        return -EINVAL;
    *out = v;
    return 0;
}

/* Internals of the launcher module shared between its files and its unit tests. */
#ifndef LAUNCH_INT_H
#define LAUNCH_INT_H

/* Makes launch_gpu_count dlopen soname instead of "libcuda.so.1" (NULL restores it). Tests point it
 * at a fake driver or at a missing file. Not thread-safe; call before counting. */
void launch__nproc_set_cuda_lib(const char *soname);

/* Replaces *dst with a copy of val (cli.c); the old string is freed only once the copy exists.
 * Returns 0, or -ENOMEM with *dst unchanged. */
int launch__str_set(char **dst, const char *val);

#endif

/* SPDX-License-Identifier: Apache-2.0
 * spin_worker: a native process that spins in a function with a known name, built with -O0 -g so
 * that a debugger's backtrace names it (test_agent_stacks' gdb case). It writes "spinning" on
 * stdout as it enters that function: before that line a debugger may find it still in the
 * runtime's start-up (a sanitizer's, say). It exits by SIGALRM after 60 s if the test that started
 * it dies without killing it. */
#include <unistd.h>

volatile unsigned long spin_count;

void spin_here_forever(void);

void spin_here_forever(void) {
    static const char ready[] = "spinning\n";
    ssize_t w = write(1, ready, sizeof ready - 1);
    (void)w;
    for (;;)
        spin_count++;
}

int main(void) {
    alarm(60);
    spin_here_forever();
    return 0;
}

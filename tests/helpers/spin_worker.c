/* spin_worker: a native process that spins in a function with a known name, built with -O0 -g so
 * that a debugger's backtrace names it (test_agent_stacks' gdb case). It exits by SIGALRM after
 * 60 s if the test that started it dies without killing it. */
#include <unistd.h>

volatile unsigned long spin_count;

void spin_here_forever(void);

void spin_here_forever(void) {
    for (;;)
        spin_count++;
}

int main(void) {
    alarm(60);
    spin_here_forever();
    return 0;
}

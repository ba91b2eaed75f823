/* Context switches per second on a switch-heavy microbenchmark: two processes
 * pinned to one CPU ping-pong a byte over two pipes, so every hand-over is a
 * context switch (and a wakeup). Prints one line: "switches_per_s <n>".
 *
 *   sched_switch_bench [seconds] [cpu] [library-to-dlopen]
 *
 * With a library (e.g. libnccl.so.2) and RANK/WORLD_SIZE/TORCHELASTIC_RUN_ID
 * in the environment, the agent's discovery takes the parent for a rank and
 * its sched_switch probe times it (the child is the rank's worker: ignored). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		perror("sched_setaffinity");
}

int main(int argc, char **argv)
{
	const double seconds = argc > 1 ? atof(argv[1]) : 3.0;
	const int cpu = argc > 2 ? atoi(argv[2]) : 0;
	if (argc > 3 && dlopen(argv[3], RTLD_NOW | RTLD_GLOBAL) == NULL) {
		fprintf(stderr, "sched_switch_bench: dlopen %s: %s\n", argv[3], dlerror());
		return 1;
	}
	if (argc > 3)
		sleep(3); /* let the agent find the rank before the clock starts */
	int ping[2], pong[2];
	if (pipe(ping) != 0 || pipe(pong) != 0) {
		perror("pipe");
		return 1;
	}
	pin(cpu);
	const pid_t child = fork();
	if (child < 0) {
		perror("fork");
		return 1;
	}
	char b = 0;
	if (child == 0) { /* echo every byte back until the pipe closes */
		close(ping[1]);
		close(pong[0]);
		while (read(ping[0], &b, 1) == 1)
			if (write(pong[1], &b, 1) != 1)
				break;
		_exit(0);
	}
	close(ping[0]);
	close(pong[1]);
	unsigned long trips = 0;
	const double start = now_s();
	double t = start;
	while (t - start < seconds) {
		for (int i = 0; i < 1000; i++) {
			if (write(ping[1], &b, 1) != 1 || read(pong[0], &b, 1) != 1) {
				perror("ping-pong");
				return 1;
			}
		}
		trips += 1000;
		t = now_s();
	}
	close(ping[1]);
	waitpid(child, NULL, 0);
	/* Two context switches per round trip. */
	printf("switches_per_s %.0f\n", 2.0 * (double)trips / (t - start));
	return 0;
}

/* Maps files executable, as the dynamic loader maps libraries, and waits.
 *
 *   lib_mapper [--jail DIR] [--sleep-ms N] FILE...
 *
 * --jail: opens the files first, then enters a private mount namespace and
 * chroots into DIR before mapping them: the maps lines then name paths that,
 * inside the process's new root, are whatever DIR holds there (a planted link,
 * a FIFO, a device). Prints "ready" once mapped; exits after --sleep-ms (0:
 * waits to be killed). Exit 1 on any failure, with one line on stderr. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <time.h>
#include <unistd.h>

static int fail(const char *what) {
	perror(what);
	return 1;
}

int main(int argc, char **argv) {
	const char *jail = NULL;
	long sleep_ms = 0;
	int i = 1;
	for (; i < argc; i++) {
		if (strcmp(argv[i], "--jail") == 0 && i + 1 < argc)
			jail = argv[++i];
		else if (strcmp(argv[i], "--sleep-ms") == 0 && i + 1 < argc)
			sleep_ms = atol(argv[++i]);
		else
			break;
	}
	if (i >= argc) {
		fprintf(stderr, "usage: lib_mapper [--jail DIR] [--sleep-ms N] FILE...\n");
		return 2;
	}
	int fds[64];
	int n = 0;
	for (; i < argc && n < 64; i++, n++) {
		fds[n] = open(argv[i], O_RDONLY | O_CLOEXEC);
		if (fds[n] < 0)
			return fail(argv[i]);
	}
	if (jail) {
		if (unshare(CLONE_NEWNS) != 0)
			return fail("unshare");
		if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
			return fail("mount --make-rprivate /");
		if (chroot(jail) != 0 || chdir("/") != 0)
			return fail("chroot");
	}
	for (int k = 0; k < n; k++) {
		if (mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fds[k], 0) == MAP_FAILED)
			return fail("mmap");
		close(fds[k]);
	}
	printf("ready\n");
	fflush(stdout);
	if (sleep_ms <= 0) {
		for (;;)
			pause();
	}
	struct timespec ts = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0) {
	}
	return 0;
}

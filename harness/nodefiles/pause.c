/* The node's pause image (the pod sandbox's first process), made locally since no registry serves
 * registry.k8s.io/pause here: it waits for signals, reaps the zombies of its pod's shared PID
 * namespace, and ends on SIGINT or SIGTERM, which is all kubelet asks of it. Built static
 * (harness/images.py, scripts/peers.sh). */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction on_stop = {.sa_handler = stop};
    struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    if (sigaction(SIGINT, &on_stop, NULL) < 0 || sigaction(SIGTERM, &on_stop, NULL) < 0 ||
        sigaction(SIGCHLD, &on_child, NULL) < 0)
        return 1;
    for (;;)
        pause();
}

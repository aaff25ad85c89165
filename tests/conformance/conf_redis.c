/*
 * conf_redis.c — a private Redis server as an isolated dependency: one redis-server per
 * vector, on a free loopback port, with its own temporary directory and pidfile, started
 * here and stopped here by its pid (nothing else on the machine is touched). AOF with
 * appendfsync always, as the Redis backend requires for durable acknowledgements.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"

extern char **environ;

/* A port the kernel just handed out on 127.0.0.1 (free unless someone takes it first). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

/* True once the server answers PING with +PONG. */
static bool answers(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  char buf[16] = {0};
  bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            write(fd, "PING\r\n", 6) == 6 && read(fd, buf, sizeof buf - 1) > 0 &&
            strncmp(buf, "+PONG", 5) == 0;
  if (fd >= 0) close(fd);
  return ok;
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int conf_redis_start(const char *dir, int *pid_out, int *port_out, char *why, size_t cap) {
  int port = free_port();
  if (port < 0) return snprintf(why, cap, "no free loopback port: %s", strerror(errno)), -EADDRNOTAVAIL;
  char port_s[16], pidfile[4200], logfile[4200];
  snprintf(port_s, sizeof port_s, "%d", port);
  snprintf(pidfile, sizeof pidfile, "%s/redis.pid", dir);
  snprintf(logfile, sizeof logfile, "%s/redis.log", dir);
  char *argv[] = {"redis-server", "--port", port_s, "--bind", "127.0.0.1", "--dir", (char *)dir,
                  "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--pidfile",
                  pidfile, "--logfile", logfile, "--daemonize", "no", NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, "redis-server", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc) return snprintf(why, cap, "redis-server: %s", strerror(rc)), -rc;
  for (int waited = 0; waited < 5000; waited += 20) {
    if (answers(port)) {
      *pid_out = pid;
      *port_out = port;
      return 0;
    }
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid)
      return snprintf(why, cap, "redis-server exited (status 0x%x; see %s)", status, logfile), -ECHILD;
    nap_ms(20);
  }
  conf_redis_stop(pid);
  return snprintf(why, cap, "redis-server on port %d did not answer within 5 s", port), -ETIMEDOUT;
}

void conf_redis_stop(int pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  for (int waited = 0; waited < 5000; waited += 20) {
    if (waitpid(pid, NULL, WNOHANG) == pid) return;
    nap_ms(20);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* test_hangups.c — what the hang-up reaper (server/http/http.c: a client gone
 * before its request is complete is shut down after ~250 ms) must not break,
 * and its everyday case: clients that hang up mid-headers, after the headers,
 * mid-body, or between keep-alive requests leave no socket behind, and with
 * --max-connections 4 real requests get 200 after them. (These C clients do
 * not reproduce the held CLOSE-WAIT sockets the reaper exists for;
 * tests/scripts/test_hangups.sh's bash clients do.) A client that sends a
 * whole request and half-closes (shutdown SHUT_WR) still gets its answer, also
 * one queued for 400 ms on a worker while the reaper looks at its socket.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"

static attnd_proc proc;

/* Sends text on a new connection, waits ms for the daemon to read it, closes. */
static void send_and_hang_up(const char *text, int ms)
{
    int fd = attnd_connect_local(proc.port);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    attnd_sleep_ms(ms);
    close(fd);
}

/* The daemon's open sockets. */
static int open_sockets(void)
{
    char path[64], link[400], target[128];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)proc.pid);
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        snprintf(link, sizeof link, "%s/%s", path, de->d_name);
        ssize_t k = readlink(link, target, sizeof target - 1);
        if (k > 0) {
            target[k] = '\0';
            n += strncmp(target, "socket:", 7) == 0;
        }
    }
    if (d)
        closedir(d);
    return n;
}

/* Waits up to ms for the daemon's sockets to fall to want; returns the count. */
static int sockets_within(int want, int ms)
{
    int n = open_sockets();
    for (int t = 0; t < ms && n > want; t += 50) {
        attnd_sleep_ms(50);
        n = open_sockets();
    }
    return n;
}

static const char *const partial[] = {
    "GET /healthz HTTP/1.1\r\nHost: x\r\n",
    "POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    "Content-Length: 100000\r\n\r\n",
    "POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    "Content-Length: 100000\r\n\r\n{\"query\":[[1,2,",
    "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", /* a whole request, then keep-alive idle */
};

TEST(hangups_free_their_slots)
{
    int base = open_sockets();
    CHECK(base >= 1);
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < sizeof partial / sizeof partial[0]; i++)
            send_and_hang_up(partial[i], 0);
    int n = sockets_within(base, 3000);
    CHECK_MSG(n <= base, "%d sockets 3 s after the hang-ups, %d before", n, base);
    http_result r;
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models", proc.base_url);
    for (int i = 0; i < 4; i++) { /* every slot of --max-connections 4 is free again */
        CHECK_INT_EQ(http_do("GET", url, NULL, 0, NULL, &r), 0);
        CHECK_INT_EQ(r.status, 200);
        http_result_free(&r);
    }
}

/* A whole request, then shutdown(SHUT_WR): the answer still comes. */
static int half_close_status(const char *request)
{
    int fd = attnd_connect_local(proc.port);
    CHECK(fd >= 0);
    if (fd < 0)
        return -1;
    CHECK(write(fd, request, strlen(request)) == (ssize_t)strlen(request));
    shutdown(fd, SHUT_WR);
    char buf[65536];
    size_t len = 0;
    ssize_t k;
    while (len < sizeof buf - 1 && (k = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)k;
    buf[len] = '\0';
    close(fd);
    return http_raw_status(buf);
}

TEST(half_close_is_answered)
{
    CHECK_INT_EQ(half_close_status("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                   "\r\n"),
                 200);
    /* computed on a worker, queued behind --max-queue-delay-us 400000: the
     * reaper looks at the socket several times while it waits */
    char body[1024] = "{\"query\":[[";
    for (int j = 0; j < 64; j++)
        strcat(body, j ? ",0.5" : "0.5");
    strcat(body, "]]}");
    char req[2048];
    snprintf(req, sizeof req,
             "POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
             strlen(body), body);
    CHECK_INT_EQ(half_close_status(req), 200);
}

int main(void)
{
    const char *args[] = {"--max-connections", "4", "--max-queue-delay-us", "400000",
                          "--max-batch-requests", "64", NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return check_summary();
    }
    RUN(hangups_free_their_slots);
    RUN(half_close_is_answered);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    return check_summary();
}

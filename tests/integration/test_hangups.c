/* test_hangups.c — what the hang-up reaper (server/http/http.c: a client gone
 * before its request is complete is shut down after ~250 ms) must not break,
 * and its everyday case: clients that hang up mid-headers, after the headers,
 * mid-body, or between keep-alive requests leave no connection behind, and
 * with --max-connections 4, four connections open at once get 200 after
 * them. (These C clients do not reproduce the held CLOSE-WAIT sockets the
 * reaper exists for; tests/scripts/test_hangups.sh's bash clients do.) A
 * client that sends a whole request and half-closes (shutdown SHUT_WR) still
 * gets its answer, also one queued for 400 ms on a worker while the reaper
 * looks at its socket, and one queued beside an older idle connection
 * (libmicrohttpd 0.9.75 reads a resumed connection before it answers it
 * unless told otherwise: answer_before_reading in server/http/http.c). One
 * HTTP thread makes "beside" certain.
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

/* The inodes of the daemon's open sockets; returns how many (at most cap). */
static int socket_inodes(unsigned long *inodes, int cap)
{
    char path[64], link[400], target[128];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)proc.pid);
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *de;
    while (d && n < cap && (de = readdir(d)) != NULL) {
        snprintf(link, sizeof link, "%s/%s", path, de->d_name);
        ssize_t k = readlink(link, target, sizeof target - 1);
        if (k > 0) {
            target[k] = '\0';
            n += sscanf(target, "socket:[%lu]", &inodes[n]) == 1;
        }
    }
    if (d)
        closedir(d);
    return n;
}

/* How many of the daemon's sockets are connections: all but those
 * /proc/PID/net/tcp{,6} lists as LISTEN. (A connection shut down on both
 * sides is in neither table, and still holds its slot until attnd closes
 * it.) -1 when those tables cannot be read. */
static int open_connections(void)
{
    unsigned long inodes[256];
    int n = socket_inodes(inodes, 256), listening = 0, tables = 0;
    const char *const table[] = {"tcp", "tcp6"};
    for (int t = 0; t < 2; t++) {
        char path[64], line[512];
        snprintf(path, sizeof path, "/proc/%d/net/%s", (int)proc.pid, table[t]);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        tables++;
        while (fgets(line, sizeof line, f)) {
            unsigned st;
            unsigned long inode;
            /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, " %*s %*s %*s %x %*s %*s %*s %*s %*s %lu", &st, &inode) != 2)
                continue; /* the header line */
            for (int k = 0; k < n; k++)
                listening += inodes[k] == inode && st == 0x0A; /* 0x0A: TCP_LISTEN */
        }
        fclose(f);
    }
    return tables ? n - listening : -1;
}

/* Waits up to ms for the daemon to hold no connection; returns how many it
 * still holds. */
static int connections_after(int ms)
{
    int n = open_connections();
    for (int t = 0; t < ms && n != 0; t += 20) {
        attnd_sleep_ms(20);
        n = open_connections();
    }
    return n;
}

/* A request and its status on each of n connections open at once. */
static void all_answered_at_once(int n, const char *request)
{
    int fd[8];
    for (int i = 0; i < n; i++) {
        fd[i] = attnd_connect_local(proc.port);
        CHECK(fd[i] >= 0);
    }
    for (int i = 0; i < n; i++)
        if (fd[i] >= 0)
            CHECK(write(fd[i], request, strlen(request)) == (ssize_t)strlen(request));
    for (int i = 0; i < n; i++) {
        if (fd[i] < 0)
            continue;
        char buf[8192];
        size_t len = 0;
        ssize_t k;
        while (len < sizeof buf - 1 && (k = read(fd[i], buf + len, sizeof buf - 1 - len)) > 0)
            len += (size_t)k;
        buf[len] = '\0';
        close(fd[i]);
        CHECK_INT_EQ(http_raw_status(buf), 200);
    }
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
    int before = connections_after(3000); /* the start-up probes' are gone */
    CHECK_INT_EQ(before, 0);
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < sizeof partial / sizeof partial[0]; i++)
            send_and_hang_up(partial[i], 0);
    int n = connections_after(3000);
    CHECK_MSG(n == 0, "%d connections still open 3 s after the hang-ups", n);
    /* every slot of --max-connections 4 is free again */
    all_answered_at_once(4, "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
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

/* A one-row /v1/attention request, computed on a worker: queued behind
 * --max-queue-delay-us 400000, so the reaper looks at its socket several
 * times while it waits. */
static void queued_request(char *req, size_t cap)
{
    char body[1024] = "{\"query\":[[";
    for (int j = 0; j < 64; j++)
        strcat(body, j ? ",0.5" : "0.5");
    strcat(body, "]]}");
    snprintf(req, cap,
             "POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
             strlen(body), body);
}

TEST(half_close_is_answered)
{
    CHECK_INT_EQ(connections_after(3000), 0);
    CHECK_INT_EQ(half_close_status("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                   "\r\n"),
                 200);
    char req[2048];
    queued_request(req, sizeof req);
    CHECK_INT_EQ(half_close_status(req), 200);
}

/* The same queued request while an older connection sits idle on the same
 * HTTP thread: when the request's connection resumes, libmicrohttpd visits the
 * idle one first, and would then read the half-closed socket's end of stream
 * before answering. */
TEST(half_close_beside_idle_connection_is_answered)
{
    CHECK_INT_EQ(connections_after(3000), 0);
    int idle = attnd_connect_local(proc.port);
    CHECK(idle >= 0);
    attnd_sleep_ms(20); /* accepted, and older than the next one */
    char req[2048];
    queued_request(req, sizeof req);
    CHECK_INT_EQ(half_close_status(req), 200);
    if (idle >= 0)
        close(idle);
}

int main(void)
{
    const char *args[] = {"--max-connections", "4", "--max-queue-delay-us", "400000",
                          "--max-batch-requests", "64", "--http-threads", "1", NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return check_summary();
    }
    RUN(hangups_free_their_slots);
    RUN(half_close_is_answered);
    RUN(half_close_beside_idle_connection_is_answered);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    return check_summary();
}

/* test_tls.c — HTTPS: attnd with --tls-cert/--tls-key (a self-signed
 * certificate made here with openssl) answers health and attention requests
 * over TLS verified against that certificate, refuses plain HTTP on the same
 * port, and refuses to start with a key but no certificate.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"

static const char body[] = "{\"query\": [[0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0,"
                           " 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25,"
                           " 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5,"
                           " -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0,"
                           " 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0]]}";

/* attnd with a certificate answers over TLS verified against it, and nothing
 * over plain HTTP or to a client that does not trust the certificate. */
TEST_WITH(https, const char *cert, const char *key)
{
    char cmd[768];
    attnd_proc p;
    const char *args[] = {"--tls-cert", cert, "--tls-key", key, NULL};
    /* attnd_proc_start sees --tls-cert and probes https://.../readyz with it. */
    int started = attnd_proc_start(&p, args) == 0;
    if (!started) {
        CHECK_MSG(0, "attnd with TLS did not start");
        return;
    }
    char url[160];
    http_result r;
    snprintf(url, sizeof url, "https://127.0.0.1:%d/healthz", p.port);
    CHECK(http_do_ex("GET", url, NULL, 0, NULL, NULL, cert, &r) == 0 && r.status == 200);
    http_result_free(&r);
    snprintf(url, sizeof url, "https://127.0.0.1:%d/v1/models/demo/attention", p.port);
    CHECK(http_do_ex("POST", url, body, strlen(body), NULL, NULL, cert, &r) == 0 &&
          r.status == 200);
    CHECK(r.body && strstr(r.body, "\"output\""));
    http_result_free(&r);
    /* The curl tool too, as an operator would. */
    snprintf(cmd, sizeof cmd,
             "curl -sS --max-time 10 --cacert %s -o /dev/null -w '%%{http_code}' "
             "https://127.0.0.1:%d/readyz | grep -qx 200", cert, p.port);
    CHECK_MSG(system(cmd) == 0, "curl --cacert over https failed");
    /* Plain HTTP on the TLS port gets no HTTP answer. */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/healthz", p.port);
    int plain = http_do("GET", url, NULL, 0, NULL, &r);
    CHECK(plain != 0 || r.status != 200);
    if (plain == 0)
        http_result_free(&r);
    /* Without trusting the certificate, verification fails. */
    snprintf(url, sizeof url, "https://127.0.0.1:%d/healthz", p.port);
    CHECK(http_do_ex("GET", url, NULL, 0, NULL, NULL, "/dev/null", &r) != 0);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);
}

/* A key without a certificate: attnd refuses to start (exit 2) and says why. */
TEST_WITH(key_without_cert, const char *key)
{
    char *out = NULL;
    const char *half[] = {"--model", "demo=config/demo.safetensors", "--tls-key", key, NULL};
    CHECK_INT_EQ(attnd_run(half, 10, &out), 2);
    CHECK(out && strstr(out, "--tls-cert and --tls-key go together"));
    free(out);
}

int main(void)
{
    char dir[] = "/tmp/attnd-tls-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char cert[128], key[128], cmd[768];
    snprintf(cert, sizeof cert, "%s/cert.pem", dir);
    snprintf(key, sizeof key, "%s/key.pem", dir);
    /* openssl is in scripts/deps.sh; a P-256 key keeps generation instant. */
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout %s -out %s -days 2 -subj /CN=127.0.0.1 "
             "-addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
             key, cert);
    if (system(cmd) != 0) {
        CHECK_MSG(0, "openssl could not make a certificate (is openssl installed?)");
        return check_summary();
    }
    RUN_WITH(https, cert, key);
    RUN_WITH(key_without_cert, key);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return check_summary();
}

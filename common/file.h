/* Small helpers shared by the loaders (engine, tokenizer): one-line error messages and
 * whole-file reads. */
#ifndef TANDEM_COMMON_FILE_H
#define TANDEM_COMMON_FILE_H
#include <stddef.h>

/* Reads the whole file into a NUL-terminated heap buffer (*out, length *len
 * without the NUL). Fails with a message naming the path when the file is
 * missing, unreadable or larger than max_bytes. Returns 0 or a negative
 * status. */
int tn_read_file(const char *path, size_t max_bytes, char **out, size_t *len,
                 char *err, size_t errlen);

/* Joins dir and name with one '/' into a new heap string (NULL on OOM). */
char *tn_path_join(const char *dir, const char *name);

#endif
